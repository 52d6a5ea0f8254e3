// Slow, not frozen: findings from the stall profile of a live window
// (profile/stall_profile.cpp). Warnings, never critical: the job moves on.
//   data-starved     a main thread waits on its DataLoader for a large share
//   io-bound         the threads on its critical path (or it) mostly read or write files
//   lock-contention  threads take turns on one lock, each waiting a large share
//   collective-skew  a rank's main thread waits in collectives on its peers
//   gpu-idle         the GPU idles most of the window; the host cause from the path
// Thresholds: AnalysisOptions (docs/json-schema.md lists them).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <thread>

#include "hangtrace/text.h"
#include "rules.h"

namespace hangtrace::rules {

namespace {

std::string pct(double share) { return fmt::format("{:.0f}%", share * 100.0); }

double seconds(uint64_t ns) { return static_cast<double>(ns) / 1e9; }

std::string ms(uint64_t ns) {
  double v = static_cast<double>(ns) / 1e6;
  return v >= 10 ? fmt::format("{:.0f} ms", v) : fmt::format("{:.1f} ms", v);
}

// "read /mnt/data/*.jpg (fuse.slowfs slowfs), median ~12 ms per call, 2,300 calls"
std::string object_text(const StallObject& o) {
  if (!o.calls) return o.what;
  return fmt::format("{}, median ~{} per call over {} calls", o.what, ms(o.median_ns), o.calls);
}

// What a step's threads spent their time on: "88% in read /mnt/... (...),
// median ~12 ms per call over 2300 calls; 9% on CPU".
std::string causes_text(const std::vector<CauseShare>& causes, size_t at_most = 3) {
  std::vector<std::string> parts;
  for (const auto& c : causes) {
    if (parts.size() >= at_most || c.share < 0.05) break;
    std::string where =
        c.objects.empty() ? std::string(stall_cause_name(c.cause)) : object_text(c.objects.front());
    if (c.cause == StallCause::OnCpu) where = "on CPU";
    if (c.cause == StallCause::Runnable) where = "waiting for a CPU";
    parts.push_back(fmt::format("{} {}", pct(c.share),
                                c.cause == StallCause::OnCpu || c.cause == StallCause::Runnable
                                    ? where
                                    : fmt::format("in {}", where)));
  }
  return fmt::format("{}", fmt::join(parts, "; "));
}

std::string frames_text(const std::vector<FrameShare>& frames) {
  if (frames.empty()) return "";
  // The innermost frames of the hottest stack.
  const std::string& stack = frames.front().stack;
  size_t cut = stack.size();
  for (int i = 0; i < 3 && cut != std::string::npos && cut > 0; ++i) cut = stack.rfind(';', cut - 1);
  std::string tail = cut == std::string::npos ? stack : stack.substr(cut + 1);
  std::replace(tail.begin(), tail.end(), ';', '>');
  return fmt::format("{} of its on-CPU samples in {}", pct(frames.front().share), tail);
}

void add_cause_evidence(Finding& f, const std::string& who, const std::vector<CauseShare>& causes,
                        uint64_t window_ns) {
  std::vector<std::string> parts;
  for (const auto& c : causes)
    parts.push_back(fmt::format("{} {} ({:.2f} s)", stall_cause_name(c.cause), pct(c.share), seconds(c.ns)));
  f.evidence.push_back(fmt::format("{}: {} of {:.2f} s: {}", who, "time", seconds(window_ns),
                                   fmt::format("{}", fmt::join(parts, ", "))));
}

const PathStep* step_via(const PathStep& s, StallCause via) {
  const PathStep* best = nullptr;
  for (const auto& n : s.next)
    if (n.via == via && (!best || n.ended_ns > best->ended_ns)) best = &n;
  return best;
}

double share_of(const std::vector<CauseShare>& causes, StallCause c) {
  for (const auto& s : causes)
    if (s.cause == c) return s.share;
  return 0;
}

const CauseShare* cause_in(const std::vector<CauseShare>& causes, StallCause c) {
  for (const auto& s : causes)
    if (s.cause == c) return &s;
  return nullptr;
}

int worker_count(const RuleContext& ctx, int main_pid) {
  int n = 0;
  for (const auto& p : ctx.snap.processes)
    if (p.ppid == main_pid && job_role_label(ctx.snap, &p) == "worker") ++n;
  return n;
}

std::vector<std::string> loader_advice(const RuleContext& ctx, const PathStep* loaders, int main_pid) {
  std::vector<std::string> advice;
  const int workers = worker_count(ctx, main_pid);
  const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
  const std::string now = workers ? fmt::format(" (now {}; this host has {} CPUs)", workers, cpus) : "";
  StallCause top = loaders && !loaders->causes.empty() ? loaders->causes.front().cause : StallCause::Other;
  if (top == StallCause::StorageIo) {
    advice.push_back(
        "the workers wait on file reads: copy the dataset to local disk or RAM first, or pack the small "
        "files "
        "into a few large ones (WebDataset/TFRecord shards, LMDB) read sequentially");
    advice.push_back(
        fmt::format("overlap more reads: raise DataLoader num_workers{} and prefetch_factor", now));
  } else if (top == StallCause::OnCpu || top == StallCause::Runnable) {
    advice.push_back(fmt::format(
        "the workers are CPU-bound in __getitem__: raise DataLoader num_workers{} if CPUs are free, or make "
        "the "
        "per-sample work cheaper (pre-decode/resize the dataset offline, decode on the GPU, e.g. DALI or "
        "torchvision.io.decode_jpeg(device='cuda'))",
        now));
  } else {
    advice.push_back(
        fmt::format("raise DataLoader num_workers{} and prefetch_factor so batches are ready ahead", now));
  }
  advice.push_back(
      "persistent_workers=True keeps workers (and their warm caches) across epochs; pin_memory=True "
      "with .to(device, non_blocking=True) overlaps the host-to-GPU copy");
  return advice;
}

// data-starved and io-bound for one main thread.
void loader_findings(const RuleContext& ctx, const ThreadProfile& main, const PathStep& path,
                     std::vector<Finding>& out) {
  const AnalysisOptions& opt = ctx.opt;
  const double starved = share_of(main.causes, StallCause::DataLoader);
  const PathStep* loaders = step_via(path, StallCause::DataLoader);
  const std::string who = ctx.thread_label(main.tid);
  // io-bound: the loaders (or main itself) mostly in file I/O.
  const PathStep* io_step = nullptr;
  double io_share = 0;
  if (loaders && starved >= opt.data_starved_share &&
      share_of(loaders->causes, StallCause::StorageIo) >= opt.io_bound_share) {
    io_step = loaders;
    io_share = share_of(loaders->causes, StallCause::StorageIo);
  } else if (share_of(main.causes, StallCause::StorageIo) >= opt.io_bound_share) {
    io_step = &path;
    io_share = share_of(main.causes, StallCause::StorageIo);
  }
  if (io_step) {
    Finding f(FindingKind::IoBound);
    const CauseShare* io = cause_in(io_step->causes, StallCause::StorageIo);
    const StallObject* top = io && !io->objects.empty() ? &io->objects.front() : nullptr;
    f.pids = io_step->pids;
    f.tids = {main.tid};
    for (int t : io_step->tids) add_unique(f.tids, t);
    f.summary = io_step == &path
                    ? fmt::format("{} spent {} of the {:.1f} s window in {}", who, pct(io_share),
                                  seconds(main.window_ns), top ? object_text(*top) : "file I/O")
                    : fmt::format(
                          "{} spent {} of their time in {}; {} waited {} of the {:.1f} s window for their "
                          "batches",
                          io_step->label, pct(io_share), top ? object_text(*top) : "file I/O", who,
                          pct(starved), seconds(main.window_ns));
    f.details["share"] = io_share;
    f.details["main_share"] = io_step == &path ? io_share : starved;
    f.details["mount_point"] = top ? top->mount_point : "";
    f.details["fstype"] = top ? top->fstype : "";
    f.details["source"] = top ? top->source : "";
    f.details["files"] = top ? top->files : std::vector<std::string>{};
    f.details["median_ms"] = top ? static_cast<double>(top->median_ns) / 1e6 : 0.0;
    f.details["p90_ms"] = top ? static_cast<double>(top->p90_ns) / 1e6 : 0.0;
    f.details["calls"] = top ? top->calls : 0;
    if (top)
      f.evidence.push_back(fmt::format("{} calls took {:.2f} s in all; per call median ~{}, p90 ~{}",
                                       top->calls, seconds(top->ns), ms(top->median_ns), ms(top->p90_ns)));
    add_cause_evidence(f, io_step->label, io_step->causes, io_step->window_ns);
    f.chain.push_back({who, "waits for", io_step == &path ? "file I/O" : io_step->label});
    if (top) f.chain.push_back({io_step->label, "waits in", top->what});
    const bool network_fs =
        top && (procfs::is_network_fstype(top->fstype) || procfs::is_fuse_fstype(top->fstype));
    f.advice.push_back(
        "cache the data locally: copy the dataset to a local disk or /dev/shm before training (or on first "
        "read), or pack the many small files into large shards read sequentially (WebDataset, TFRecord, "
        "LMDB)");
    if (network_fs)
      f.advice.push_back(fmt::format(
          "{} is a {} mount: every small read is a round trip to its server; check its latency there (the "
          "server or FUSE daemon) and mount options (rsize, readahead, attribute caching)",
          top->mount_point, top->fstype));
    f.advice.push_back("more reads in flight hide latency: raise num_workers and prefetch_factor");
    out.push_back(std::move(f));
  }
  if (starved < opt.data_starved_share) return;
  Finding f(FindingKind::DataStarved);
  f.pids = {main.pid};
  f.tids = {main.tid};
  if (loaders) f.pids.insert(f.pids.end(), loaders->pids.begin(), loaders->pids.end());
  std::string feeders = loaders ? fmt::format(" from {}", loaders->label) : "";
  std::string doing = loaders ? fmt::format("; they spent {}", causes_text(loaders->causes)) : "";
  std::string frames = loaders ? frames_text(loaders->on_cpu_frames) : "";
  f.summary = fmt::format("{} waited {} of the {:.1f} s window for DataLoader batches{}{}{}", who,
                          pct(starved), seconds(main.window_ns), feeders, doing,
                          frames.empty() ? "" : fmt::format(" ({})", frames));
  f.details["share"] = starved;
  std::vector<int> workers;
  if (loaders) workers = loaders->pids;
  workers.erase(std::remove(workers.begin(), workers.end(), main.pid), workers.end());
  f.details["worker_pids"] = workers;
  if (loaders) {
    f.details["workers_busy"] = causes_text(loaders->causes);
    f.chain.push_back({who, "waits for", loaders->label});
    if (!loaders->causes.empty())
      f.chain.push_back({loaders->label, "waits in",
                         loaders->causes.front().objects.empty()
                             ? stall_cause_name(loaders->causes.front().cause)
                             : loaders->causes.front().objects.front().what});
    add_cause_evidence(f, loaders->label, loaders->causes, loaders->window_ns);
  }
  add_cause_evidence(f, who, main.causes, main.window_ns);
  f.advice = loader_advice(ctx, loaders, main.pid);
  out.push_back(std::move(f));
}

void lock_findings(const RuleContext& ctx, const StallProfile& p, std::vector<Finding>& out) {
  for (const LockQueue& q : p.locks) {
    // Turn-taking: a lock's holders queue on it too (a condition variable's
    // waiters are woken by a thread that never waits on it).
    std::vector<int> contending;
    double top_share = 0, sum_share = 0;
    for (const auto& [tid, ns] : q.waiters) {
      auto t = p.threads.find(tid);
      if (t == p.threads.end() || !t->second.window_ns) continue;
      double share = static_cast<double>(ns) / static_cast<double>(t->second.window_ns);
      if (share < 0.05) continue;
      contending.push_back(tid);
      top_share = std::max(top_share, share);
      sum_share += share;
    }
    bool turns = false;
    for (const auto& [h, ns] : q.holders)
      turns = turns || std::find(contending.begin(), contending.end(), h) != contending.end();
    if (contending.size() < 2 || !turns || top_share < ctx.opt.lock_contention_share) continue;
    const double mean = sum_share / static_cast<double>(contending.size());
    Finding f(FindingKind::LockContention);
    f.pids = {q.pid};
    f.tids = contending;
    std::vector<int> holders;
    for (const auto& [h, ns] : q.holders) holders.push_back(h);
    std::vector<std::string> labels;
    for (size_t i = 0; i < contending.size() && i < 4; ++i) labels.push_back(ctx.thread_label(contending[i]));
    f.summary =
        fmt::format("{} threads queue on {} in {}: each waits {} of the window on average (up to {}): {}{}",
                    contending.size(), q.what, ctx.thread_label(q.pid), pct(mean), pct(top_share),
                    fmt::format("{}", fmt::join(labels, ", ")), contending.size() > 4 ? ", ..." : "");
    f.details["share"] = mean;
    f.details["max_share"] = top_share;
    f.details["lock"] = q.what;
    f.details["address"] = fmt::format("{:#x}", q.address);
    f.details["waiter_tids"] = contending;
    f.details["holder_tids"] = holders;
    f.details["waits"] = q.waits;
    // What the holders do, apart from waiting for the lock themselves.
    for (size_t i = 0; i < holders.size() && i < 3; ++i) {
      auto t = p.threads.find(holders[i]);
      if (t == p.threads.end()) continue;
      std::vector<CauseShare> rest;
      for (const auto& c : t->second.causes)
        if (!(c.cause == StallCause::Lock && !c.objects.empty() && c.objects.front().what == q.what))
          rest.push_back(c);
      f.evidence.push_back(fmt::format("holder {}: {}", ctx.thread_label(holders[i]), causes_text(rest)));
    }
    f.chain.push_back({ctx.thread_label(contending.front()), "waits on", q.what});
    f.chain.push_back(
        {q.what, "can be released by", holders.empty() ? "?" : ctx.thread_label(holders.front())});
    f.advice.push_back(
        fmt::format("shorten the critical section of {}: do the slow part (I/O, sleeps, heavy compute) "
                    "outside the lock, or "
                    "split the lock / give each thread its own state",
                    q.what));
    if (q.what.starts_with("the GIL"))
      f.advice.push_back(
          "GIL-bound threads: move the work to processes (DataLoader workers, multiprocessing) or to "
          "code that releases the GIL");
    out.push_back(std::move(f));
  }
}

void collective_findings(const RuleContext& ctx, const StallProfile& p, std::vector<Finding>& out) {
  for (size_t i = 0; i < p.mains.size(); ++i) {
    const ThreadProfile& m = p.mains[i];
    const CauseShare* c = m.cause(StallCause::Collective);
    if (!c || c->share < ctx.opt.collective_skew_share) continue;
    Finding f(FindingKind::CollectiveSkew);
    f.pids = {m.pid};
    f.tids = {m.tid};
    std::vector<std::string> peers;
    for (const auto& w : c->wakers)
      if (w.pid != m.pid) peers.push_back(fmt::format("{} {} ({})", w.role, w.pid, w.comm));
    f.summary = fmt::format("{} waited {} of the {:.1f} s window in collectives on its peers{}",
                            ctx.thread_label(m.tid), pct(c->share), seconds(m.window_ns),
                            peers.empty() ? "" : fmt::format(", last to arrive: {}", fmt::join(peers, ", ")));
    f.details["share"] = c->share;
    if (!c->objects.empty()) f.details["wait"] = c->objects.front().what;
    add_cause_evidence(f, ctx.thread_label(m.tid), m.causes, m.window_ns);
    f.advice.push_back(
        "this rank is fast and waits for slower peers: compare the peers' profiles (hangtrace on each rank, "
        "`hangtrace merge`); balance the work (uneven batch sizes or sequence lengths, a rank doing extra "
        "logging/eval/checkpointing, a slower GPU or data path on one host)");
    out.push_back(std::move(f));
  }
}

void gpu_idle_findings(const RuleContext& ctx, const StallProfile& p, std::vector<Finding>& out) {
  if (!ctx.live || ctx.live->gpu.nvml.empty() || p.mains.empty()) return;
  std::map<unsigned, std::pair<size_t, size_t>> idle;  // device -> (idle samples, samples)
  for (const auto& s : ctx.live->gpu.nvml) {
    if (!s.has_utilization || s.ts_ns < p.start_ns || s.ts_ns > p.end_ns) continue;
    auto& [n_idle, n] = idle[s.device];
    ++n;
    if (s.gpu_util_pct <= ctx.opt.gpu_idle_util_pct) ++n_idle;
  }
  const ThreadProfile& m = p.mains.front();
  for (const auto& [device, counts] : idle) {
    if (counts.second < 2) continue;
    double share = static_cast<double>(counts.first) / static_cast<double>(counts.second);
    if (share < ctx.opt.gpu_idle_share || share_of(m.causes, StallCause::Gpu) >= 0.5) continue;
    Finding f(FindingKind::GpuIdle);
    f.pids = {m.pid};
    f.tids = {m.tid};
    std::vector<CauseShare> host;
    for (const auto& c : m.causes)
      if (c.cause != StallCause::Gpu) host.push_back(c);
    f.summary =
        fmt::format("GPU {} was idle (utilization <= {}%) in {} of the window; meanwhile {} spent {}", device,
                    ctx.opt.gpu_idle_util_pct, pct(share), ctx.thread_label(m.tid), causes_text(host));
    f.details["share"] = share;
    f.details["device"] = device;
    f.details["host_cause"] = host.empty() ? "" : stall_cause_name(host.front().cause);
    add_cause_evidence(f, ctx.thread_label(m.tid), m.causes, m.window_ns);
    f.advice.push_back(
        "the GPU waits for the host: fix what the main thread spends its time on (the findings "
        "above); overlap it with the GPU (prefetching loaders, non_blocking copies, CUDA graphs)");
    out.push_back(std::move(f));
  }
}

}  // namespace

bool is_slow_job_kind(FindingKind k) {
  return k == FindingKind::DataStarved || k == FindingKind::IoBound || k == FindingKind::LockContention ||
         k == FindingKind::CollectiveSkew || k == FindingKind::GpuIdle;
}

std::vector<Finding> slow_job_findings(const RuleContext& ctx) {
  std::vector<Finding> out;
  if (!ctx.profile || ctx.profile->empty() ||
      static_cast<double>(ctx.profile->window_ns) / 1e9 < ctx.opt.min_profile_window_s)
    return out;
  const StallProfile& p = *ctx.profile;
  for (size_t i = 0; i < p.mains.size() && i < p.paths.size(); ++i)
    loader_findings(ctx, p.mains[i], p.paths[i], out);
  lock_findings(ctx, p, out);
  collective_findings(ctx, p, out);
  gpu_idle_findings(ctx, p, out);
  return out;
}

}  // namespace hangtrace::rules
