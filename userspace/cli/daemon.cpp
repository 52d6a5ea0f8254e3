#include "daemon.h"

#include <linux/capability.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "collector.h"
#include "hangtrace/abi.h"
#include "hangtrace/bundle.h"
#include "hangtrace/kallsyms.h"
#include "hangtrace/procfs.h"
#include "live_histograms.h"
#include "live_sched.h"
#include "process_meta.h"
#include "python_stacks.h"
#include "task_iter.h"

namespace hangtrace::cli {

namespace {

// Records that would flood the recorder without telling a postmortem more
// (CUPTI activity: one per kernel), and ones the steady state never streams.
bool worth_recording(uint32_t type) {
  return type != HT_EV_GPU_ACTIVITY && type != HT_EV_FUTEX_WAKE && type != HT_EV_WAKEUP;
}

std::string trim_comm(const char* comm, size_t n) { return std::string(comm, strnlen(comm, n)); }

uint64_t self_rss_bytes() {
  auto rss = procfs::ProcFs().self_rss_bytes();
  return rss ? *rss : 0;
}

double self_cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

// What a sampled wait's fd is, from /proc (asked once per wait seen).
FdInfo fd_info(int tgid, int fd) {
  FdInfo info;
  const procfs::ProcFs proc;
  auto link = proc.fd_link(tgid, fd);
  if (!link || link->empty()) return info;
  const std::string& t = *link;
  if (auto file = proc.fd_file(tgid, fd)) info.inode = file->inode;
  if (t.starts_with("socket:")) {
    info.wait_kind = HT_WAIT_NET;
    info.obj_kind = HT_OBJ_SOCKET;
  } else if (t.starts_with("pipe:")) {
    info.obj_kind = HT_OBJ_PIPE;
  } else if (t.starts_with("anon_inode:")) {
    info.obj_kind = HT_OBJ_ANON;
  } else {
    info.obj_kind = HT_OBJ_FILE;
  }
  return info;
}

}  // namespace

uint64_t Daemon::now_ns() const {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

double Daemon::mono_to_unix_offset_s() const {
  timespec real{}, mono{};
  clock_gettime(CLOCK_REALTIME, &real);
  clock_gettime(CLOCK_MONOTONIC, &mono);
  return (static_cast<double>(real.tv_sec) + real.tv_nsec / 1e9) -
         (static_cast<double>(mono.tv_sec) + mono.tv_nsec / 1e9);
}

void Daemon::log(int level, const std::string& line) const {
  if (options_.verbosity >= level) std::fprintf(stderr, "hangtrace daemon: %s\n", line.c_str());
}

Result<std::unique_ptr<Daemon>> Daemon::start(const DaemonOptions& options) {
  std::unique_ptr<Daemon> d(new Daemon(options));
  auto matcher = daemon::JobMatcher::make(options.selectors);
  if (!matcher) return make_error(matcher.error());
  d->matcher_ = std::make_unique<daemon::JobMatcher>(std::move(*matcher));
  struct utsname u {};
  if (uname(&u) == 0) {
    d->kernel_release_ = u.release;
    d->hostname_ = u.nodename;
  }

  std::error_code ec;
  std::filesystem::create_directories(options.bundle_dir, ec);
  if (ec) return make_error(fmt::format("failed to create {}: {}", options.bundle_dir, ec.message()));
  if (access(options.bundle_dir.c_str(), W_OK) != 0)
    return make_error(fmt::format("failed to use {}: {}", options.bundle_dir, std::strerror(errno)));

  auto metrics = DaemonMetrics::start(options.metrics_address, d->kernel_release_);
  if (!metrics) return make_error(metrics.error());
  d->metrics_ = std::move(*metrics);

  LiveOptions lo;
  // Steady state: nothing is streamed per wait or per wake. Waits longer
  // than this, deaths, signals, OOM kills, /dev/shm trouble, TCP trouble and
  // RSS steps are: they are what the flight recorder keeps.
  lo.min_block_ns = static_cast<uint64_t>(options.record_waits_after_ms * 1e6);
  lo.stream_wakes = false;
  lo.blocked_histograms = true;
  lo.shm_trouble_only = true;
  // Sampled: nothing runs on the hot paths until a job looks stuck.
  lo.hot_hooks = !options.sampled();
  lo.ringbuf_bytes = static_cast<uint64_t>(options.ringbuf_mb) << 20;
  lo.verbosity = options.verbosity > 2 ? options.verbosity - 2 : 0;
  // GPU libraries (libcuda, libnccl) get uprobes when a job maps them.
  lo.module_rescan = ModuleRescan::UntilCuda;
  auto tracer = LiveTracer::start(lo);
  if (!tracer) return make_error(tracer.error());
  d->tracer_ = std::move(*tracer);
  d->nvml_ = NvmlSampler::open();
  if (options.sampled())
    d->sampler_ = std::make_unique<WaitSampler>(static_cast<uint64_t>(options.sample_every_s * 1e9), fd_info);
  // The snapshot of each bundle reuses one verified task iterator.
  keep_task_iterator_loaded(true);
  return d;
}

// ---- records -----------------------------------------------------------------------

void Daemon::on_record(const void* data, size_t size) {
  if (size < sizeof(ht_event_header)) return;
  ht_event_header h;
  std::memcpy(&h, data, sizeof h);
  const int tgid = static_cast<int>(h.tgid);
  auto owner = job_of_.find(tgid);
  if (h.type == HT_EV_PROC_FORK && size >= sizeof(ht_proc_event)) {
    ht_proc_event e;
    std::memcpy(&e, data, sizeof e);
    // The kernel traces the child already; the daemon learns its job.
    if (owner != job_of_.end()) add_process(jobs_.at(owner->second), static_cast<int>(e.child_tgid), true);
  }
  if (owner == job_of_.end()) return;
  Job& job = jobs_.at(owner->second);
  if (worth_recording(h.type)) job.recorder->add(h.ts_ns, data, size);

  auto incident = [&](const std::string& trigger, int pid, const std::string& comm) {
    if (!job.incident_seen.insert({pid, trigger}).second) return;
    // Let the death's other records (signal, exit) arrive first.
    job.incidents.push_back({trigger, pid, comm, h.ts_ns, now_ns() + 300'000'000ull});
  };
  switch (h.type) {
    case HT_EV_OOM_VICTIM:
      metrics_->process_death("oom-kill");
      incident("oom-kill", tgid, trim_comm(h.comm, sizeof h.comm));
      break;
    case HT_EV_SIGNAL:
      if (size >= sizeof(ht_signal_event)) {
        ht_signal_event e;
        std::memcpy(&e, data, sizeof e);
        if (e.sig == SIGBUS) incident("sigbus", tgid, trim_comm(h.comm, sizeof h.comm));
      }
      break;
    case HT_EV_PROC_EXIT:
      if (size >= sizeof(ht_proc_event)) {
        ht_proc_event e;
        std::memcpy(&e, data, sizeof e);
        if (!(e.flags & 1)) break;  // a thread, not the whole process
        int status = static_cast<int>(e.exit_code);
        bool oom = job.incident_seen.count({tgid, "oom-kill"}) > 0;
        if (auto how = daemon::exit_incident(status); how && !oom) {
          metrics_->process_death((status & 0x7f) ? "signal" : "exit-nonzero");
          incident(*how, tgid, trim_comm(h.comm, sizeof h.comm));
        } else if ((status & 0x7f) && !oom) {
          metrics_->process_death("signal");
        }
        drop_process(tgid);
      }
      break;
    default:
      break;
  }
}

// ---- jobs ----------------------------------------------------------------------------

void Daemon::add_process(Job& job, int pid, bool from_fork) {
  if (pid <= 0 || !job.pids.insert(pid).second) return;
  job_of_[pid] = job.root;
  role_of_[pid] = pid == job.root ? "main" : "worker";
  if (!from_fork) tracer_->trace_tgid(pid);
  // A forked worker has its parent's command line and cgroup: read only what
  // was not forked (a fork per worker per epoch must stay cheap).
  auto root_meta = job.meta.find(job.root);
  if (from_fork && root_meta != job.meta.end()) {
    ProcessMeta m = root_meta->second;
    m.pid = pid;
    job.meta[pid] = std::move(m);
  } else {
    job.meta[pid] = read_process_meta(pid);
  }
  log(1, fmt::format("job {}: process {} joins ({})", job.root, pid, from_fork ? "forked" : "found"));
}

void Daemon::drop_process(int pid) {
  auto owner = job_of_.find(pid);
  if (owner == job_of_.end()) return;
  int root = owner->second;
  job_of_.erase(owner);
  forget_after_metrics_.push_back(pid);
  log(1, fmt::format("job {}: process {} leaves", root, pid));
  if (auto it = jobs_.find(root); it != jobs_.end()) {
    Job& job = it->second;
    // What is known of the dead stays for the next bundles (its death's), a
    // bounded number of them.
    if (auto m = job.meta.find(pid); m != job.meta.end() && pid != root) {
      job.dead_meta.push_back(std::move(m->second));
      job.meta.erase(m);
      if (job.dead_meta.size() > 64) job.dead_meta.pop_front();
    }
    it->second.pids.erase(pid);
  }
}

void Daemon::pick_up(int root, const std::vector<daemon::ProcessEntry>& processes) {
  auto entry = std::find_if(processes.begin(), processes.end(), [&](const auto& p) { return p.pid == root; });
  if (entry == processes.end()) return;
  if (ended_jobs_.count({root, entry->start_ticks})) return;
  Job job;
  job.root = root;
  job.start_ticks = entry->start_ticks;
  job.comm = entry->comm;
  job.cmdline = entry->cmdline;
  job.matched_by = entry->matched_by;
  job.recorder =
      std::make_unique<daemon::FlightRecorder>(static_cast<uint64_t>(options_.recorder_minutes * 60e9),
                                               options_.recorder_records, options_.recorder_bytes);
  job.watch = std::make_unique<daemon::ProgressWatch>(static_cast<uint64_t>(options_.hang_after_s * 1e9));
  job.tracked_since_ns = now_ns();
  auto& j = jobs_.emplace(root, std::move(job)).first->second;
  add_process(j, root, false);
  for (int pid : daemon::descendants_of(root, processes)) add_process(j, pid, false);
  report_gpu_hook_errors();
  std::fprintf(stderr, "hangtrace daemon: tracking job %d (%s): %s; %zu process(es)\n", root, j.comm.c_str(),
               j.matched_by.c_str(), j.pids.size());
}

void Daemon::end_job(int root, const std::string& why) {
  auto it = jobs_.find(root);
  if (it == jobs_.end()) return;
  Job& job = it->second;
  write_due_incidents(job, ~0ull);  // every pending one, now
  for (int pid : std::vector<int>(job.pids.begin(), job.pids.end())) drop_process(pid);
  ended_jobs_.insert({root, job.start_ticks});
  std::fprintf(stderr, "hangtrace daemon: job %d (%s) ended: %s\n", root, job.comm.c_str(), why.c_str());
  jobs_.erase(root);
}

void Daemon::report_gpu_hook_errors() {
  // The tracer finds the GPU libraries the jobs map (ModuleRescan::UntilCuda).
  // A library whose uprobes failed is said once: otherwise only its bundles
  // would tell ("0 uprobes").
  for (const auto& h : tracer_->hooks()) {
    if (h.concern != "gpu" || h.active || h.reason.empty() || h.reason.starts_with("standby") ||
        !reported_hook_errors_.insert(h.attach).second)
      continue;
    bool denied = h.reason.find("Permission denied") != std::string::npos && !has_capability(CAP_SYS_ADMIN);
    std::fprintf(stderr, "hangtrace daemon: warning: %s: %s%s\n", h.attach.c_str(), h.reason.c_str(),
                 denied ? " (this kernel allows uprobes only with CAP_SYS_ADMIN: see docs/deploy.md)" : "");
  }
}

void Daemon::scan() {
  uint64_t started = now_ns();
  auto processes = daemon::scan_processes(proc_.root(), *matcher_);
  if (!processes) {
    log(0, processes.error());
    return;
  }
  std::map<int, uint64_t> start_of;
  std::map<int, int> parent_of;
  for (const auto& p : *processes) {
    start_of[p.pid] = p.start_ticks;
    parent_of[p.pid] = p.ppid;
  }
  // Never the daemon itself, nor what started it (its command line names
  // the pattern too).
  std::set<int> self = {getpid()};
  for (int pid = getppid(); pid > 1 && self.insert(pid).second;)
    pid = parent_of.count(pid) ? parent_of[pid] : 0;
  // Nor another hangtrace (a second daemon, a `hangtrace --pid`): the same
  // executable file.
  auto own = proc_.self_exe_file();
  for (auto& p : *processes) {
    if (p.matched_by.empty()) continue;
    if (self.count(p.pid)) {
      p.matched_by.clear();
    } else if (auto exe = proc_.exe_file(p.pid); own && exe && *exe == *own) {
      p.matched_by.clear();
    }
  }
  // Jobs whose root is gone (its exit record lost to a full ring buffer, or
  // never traced), and processes that went without a record.
  std::vector<int> gone_roots;
  for (auto& [root, job] : jobs_) {
    auto s = start_of.find(root);
    if (s == start_of.end() || s->second != job.start_ticks) gone_roots.push_back(root);
  }
  for (int root : gone_roots) end_job(root, "its main process is gone");
  std::erase_if(ended_jobs_, [&](const auto& e) {
    auto s = start_of.find(e.first);
    return s == start_of.end() || s->second != e.second;
  });
  for (auto& [root, job] : jobs_) {
    for (int pid : std::vector<int>(job.pids.begin(), job.pids.end()))
      if (!start_of.count(pid)) drop_process(pid);
    // Workers forked while a fork record was lost.
    for (int pid : daemon::descendants_of(root, *processes))
      if (!job.pids.count(pid)) add_process(job, pid, false);
  }
  report_gpu_hook_errors();
  for (int root : daemon::job_roots(*processes))
    if (!jobs_.count(root) && !job_of_.count(root)) pick_up(root, *processes);
  metrics_->scan_took(static_cast<double>(now_ns() - started) / 1e9);
}

std::optional<std::string> Daemon::bundled_before(const Job& job, const std::string& trigger) const {
  // A restarted daemon finds the bundle its predecessor wrote for the same
  // hang of the same process (pid and start time): it does not write another.
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(options_.bundle_dir, ec)) {
    std::ifstream in(entry.path() / "meta.json");
    if (!in) continue;
    auto j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded()) continue;
    auto m = bundle_meta_from_json(j);
    if (m && m->trigger == trigger && m->job_pid == job.root && m->job_start_ticks == job.start_ticks &&
        m->hostname == hostname_)
      return m->cause;
  }
  return std::nullopt;
}

// ---- the watchdog and incidents -----------------------------------------------------

void Daemon::check_progress(Job& job, uint64_t now, const std::vector<WakeupCount>* wakeups) {
  daemon::ProgressSample sample;
  sample.now_ns = now;
  if (wakeups) {
    // Counts only grow, but an LRU eviction restarts a pair's count: what
    // is summed is each pair's increases.
    // Only the pairs present now are kept: workers come and go.
    std::map<std::tuple<int, int>, uint64_t> now_counts;
    for (const auto& w : *wakeups) {
      if (w.wakee_tid != job.root || w.waker_tid == job.root || !job_of_.count(w.waker_tgid) ||
          job_of_.at(w.waker_tgid) != job.root)
        continue;
      auto before = job.wake_counts.find({w.waker_tid, w.wakee_tid});
      uint64_t seen = before == job.wake_counts.end() ? 0 : before->second;
      if (w.count > seen) job.wakeups_from_job += w.count - seen;
      now_counts[{w.waker_tid, w.wakee_tid}] = w.count;
    }
    job.wake_counts = std::move(now_counts);
  }
  sample.wakeups_from_job = job.wakeups_from_job;
  sample.main_woken_sampled = job.main_woken_sampled;
  LiveObservation gpu;
  tracer_->contribute(gpu);
  for (const auto& t : gpu.gpu.threads)
    if (job.pids.count(t.pid)) sample.gpu_launches += t.launches;
  ProcessInfo p;
  p.pid = job.root;
  ThreadInfo main;
  main.tid = job.root;
  p.threads.push_back(main);
  collect_python_stacks(p, job.root, proc_.pid_path(job.root));
  sample.python_frames = daemon::python_frames_fingerprint(p.threads.front().python_stack);

  std::string moved = job.watch->update(sample);
  if (!moved.empty()) {
    log(2, fmt::format("job {}: progress ({})", job.root, moved));
    if (job.hung) {
      std::fprintf(stderr, "hangtrace daemon: job %d (%s) makes progress again (%s)\n", job.root,
                   job.comm.c_str(), moved.c_str());
      job.hung = false;
    }
    return;
  }
  if (job.hung || !job.watch->hung(now)) return;
  job.hung = true;
  double stuck_s = static_cast<double>(now - job.watch->last_progress_ns()) / 1e9;
  std::fprintf(stderr, "hangtrace daemon: job %d (%s) made no progress for %.0f s: capturing a bundle\n",
               job.root, job.comm.c_str(), stuck_s);
  write_bundle_for(
      job, "hang", now,
      fmt::format("no progress for {:.0f} s (last: {})", stuck_s, job.watch->last_progress_signal()));
}

void Daemon::write_due_incidents(Job& job, uint64_t now) {
  // Incidents whose records have had time to arrive.
  for (size_t i = 0; i < job.incidents.size();) {
    if (job.incidents[i].due_ns > now) {
      ++i;
      continue;
    }
    Incident inc = job.incidents[i];
    job.incidents.erase(job.incidents.begin() + static_cast<long>(i));
    // A job dying of what was just bundled (the main process exits after
    // its worker was OOM-killed) is the same incident.
    if (inc.trigger == "abnormal-exit" && job.last_bundle_ns &&
        inc.ts_ns < job.last_bundle_ns + 30'000'000'000ull) {
      log(1, fmt::format("job {}: {} of process {} follows the last bundle: not bundled again", job.root,
                         inc.trigger, inc.pid));
      continue;
    }
    std::fprintf(stderr, "hangtrace daemon: job %d: %s of process %d (%s): capturing a bundle\n", job.root,
                 inc.trigger.c_str(), inc.pid, inc.comm.c_str());
    write_bundle_for(job, inc.trigger, inc.ts_ns,
                     fmt::format("{} of process {} ({})", inc.trigger, inc.pid, inc.comm));
  }
}

uint64_t Daemon::check_every_ns() const {
  return static_cast<uint64_t>((options_.check_every_s > 0
                                    ? options_.check_every_s
                                    : std::clamp(options_.hang_after_s / 12, 0.5, 15.0)) *
                               1e9);
}

void Daemon::check_jobs(uint64_t now) {
  std::optional<std::vector<WakeupCount>> wakeups;
  const uint64_t every = check_every_ns();
  bool checked = false;
  for (auto& [root, job] : jobs_) {
    write_due_incidents(job, now);
    job.recorder->prune(now);
    if (now < job.next_check_ns || !job.pids.count(root)) continue;
    job.next_check_ns = now + every;
    checked = true;
    if (!wakeups) {
      auto w = read_wakeup_counts();
      if (w)
        wakeups = std::move(*w);
      else
        log(0, w.error());
    }
    check_progress(job, now, wakeups ? &*wakeups : nullptr);
  }
  if (checked || (jobs_.empty() && tracer_->hot_hooks_attached())) set_exact_hooks(now);
}

// ---- the sampled steady state ---------------------------------------------------------

void Daemon::set_exact_hooks(uint64_t now) {
  if (!options_.sampled()) return;
  // Suspect: no progress for a quarter of --hang-after (and two checks at
  // least), so the hang, when it comes, is diagnosed with who woke whom and
  // every wait of the last three quarters. A job already bundled as hung
  // keeps none attached: its evidence is taken, and the hooks cost the
  // whole machine, not only the job.
  const uint64_t suspect_after =
      options_.suspect_after_s > 0
          ? static_cast<uint64_t>(options_.suspect_after_s * 1e9)
          : std::max<uint64_t>(static_cast<uint64_t>(options_.hang_after_s * 1e9 / 4), 2 * check_every_ns());
  std::vector<int> suspects;
  for (const auto& [root, job] : jobs_) {
    uint64_t last = job.watch->last_progress_ns();
    if (!job.hung && last && job.pids.count(root) && now - last >= suspect_after) suspects.push_back(root);
  }
  const bool want = !suspects.empty();
  if (want == tracer_->hot_hooks_attached()) return;
  if (auto done = tracer_->set_hot_hooks(want); !done) {
    log(0, fmt::format("failed to {} the exact hooks: {}", want ? "attach" : "detach", done.error()));
    return;
  }
  if (want) {
    hot_now_ = {now, 0};
    ++hot_attachments_;
    std::string who;
    for (int root : suspects) who += fmt::format("{}{}", who.empty() ? "" : ", ", root);
    log(0, fmt::format("exact hooks attached: no progress from job {} for {:.0f} s", who,
                       static_cast<double>(suspect_after) / 1e9));
  } else {
    hot_last_ = {hot_now_.from_ns, now};
    hot_now_ = {};
    log(0, "exact hooks detached: no job looks stuck");
  }
}

bool Daemon::kernel_saw(const SampledWait& w) const {
  auto inside = [&](const HotPeriod& p) {
    return p.from_ns && p.from_ns <= w.start_ns && (p.to_ns == 0 || w.seen_until_ns <= p.to_ns);
  };
  return inside(hot_now_) || inside(hot_last_);
}

void Daemon::record_sampled_wait(const SampledWait& w) {
  // The kernel's histograms and stream had it while the exact hooks were on.
  if (kernel_saw(w)) return;
  auto role = role_of_.find(w.tgid);
  if (role == role_of_.end()) return;
  const uint64_t ns = w.duration_ns();
  std::array<uint64_t, HT_HIST_BUCKETS> one{};
  uint64_t us = ns / 1000;
  int bucket = 0;
  while (bucket + 1 < HT_HIST_BUCKETS && (us >> (bucket + 1)) != 0) ++bucket;
  one[static_cast<size_t>(bucket)] = 1;
  const char* r =
      role->second == "main" ? daemon::role_name(true, w.tid == w.tgid) : daemon::role_name(false, false);
  metrics_->observe_blocked(r, daemon::wait_kind_name(w.wait_kind),
                            daemon::fold_log2_buckets(one.data(), one.size()), static_cast<double>(ns) / 1e9);
  if (static_cast<double>(ns) < options_.record_waits_after_ms * 1e6) return;
  auto owner = job_of_.find(w.tgid);
  if (owner == job_of_.end()) return;
  Job& job = jobs_.at(owner->second);
  auto meta = job.meta.find(w.tgid);
  std::string raw = sampled_wait_record(w, meta != job.meta.end() ? meta->second.comm : job.comm);
  job.recorder->add(w.seen_until_ns, raw.data(), raw.size());
}

void Daemon::sample_waits(uint64_t now) {
  std::vector<int> tgids;
  tgids.reserve(job_of_.size());
  for (const auto& [pid, root] : job_of_) tgids.push_back(pid);
  if (tgids.empty()) {
    // Nothing tracked: no pass over the machine's tasks, only the end of
    // the last job's waits.
    if (sampler_->threads())
      for (const auto& w : sampler_->update(now, {}).ended) record_sampled_wait(w);
    return;
  }
  const uint64_t started = now_ns();
  auto briefs = sample_task_briefs(tgids);
  if (!briefs) {
    log(0, briefs.error());
    return;
  }
  auto pass = sampler_->update(now, *briefs);
  metrics_->sample_took(static_cast<double>(now_ns() - started) / 1e9, briefs->size());
  for (const auto& [tid, n] : pass.woken_from_untimed)
    if (auto job = jobs_.find(tid); job != jobs_.end()) job->second.main_woken_sampled += n;
  for (const auto& w : pass.ended) record_sampled_wait(w);
}

void Daemon::write_bundle_for(Job& job, const std::string& trigger, uint64_t incident_ns,
                              const std::string& note) {
  const double offset = mono_to_unix_offset_s();
  const uint64_t now = now_ns();
  LiveObservation live = job.recorder->replay(job.tracked_since_ns, now);
  for (const auto& m : job.dead_meta) live.meta[m.pid] = m;
  for (const auto& [pid, m] : job.meta) live.meta[pid] = m;
  tracer_->contribute(live);
  live.events = tracer_->counter(HT_CNT_EVENTS);
  live.dropped = tracer_->counter(HT_CNT_DROPPED);
  for (const auto& h : tracer_->hooks())
    live.hooks.push_back({h.concern, h.program, h.attach, h.active, h.reason});
  // Kernel stacks of the recorded waits (user stacks need the processes'
  // mappings at the time, which the daemon does not keep).
  std::set<int32_t> ids;
  for (const auto& [tid, intervals] : live.blocked)
    for (const auto& b : intervals)
      if (b.kstack_id >= 0) ids.insert(b.kstack_id);
  if (!ids.empty())
    if (auto symbols = KernelSymbols::load())
      for (int32_t id : ids) {
        std::vector<KernelFrame> frames;
        for (uint64_t addr : tracer_->stack(id)) {
          std::string name = symbols->symbolize(addr);
          if (frames.empty() && (name.starts_with("bpf_") || name.starts_with("__bpf_"))) continue;
          frames.push_back({addr, std::move(name)});
        }
        if (!frames.empty()) live.kernel_stacks[id] = std::move(frames);
      }

  if (trigger == "hang")
    if (auto cause = bundled_before(job, trigger)) {
      // Its diagnosis is in that bundle; the metrics show the hang again.
      std::fprintf(stderr, "hangtrace daemon: job %d: this hang was bundled before (a previous daemon run)\n",
                   job.root);
      job.hang_cause = *cause;
      return;
    }
  CollectOptions co;
  co.verbosity = options_.verbosity > 1 ? options_.verbosity - 1 : 0;
  Result<Snapshot> snap = collect_snapshot(job.root, co);
  Snapshot s = snap ? std::move(*snap)
                    : exited_job_snapshot(
                          job.root, live,
                          fmt::format("the job's main process could not be examined ({})", snap.error()));
  AnalysisOptions ao;
  ao.stall_after_s = options_.stall_after_s;
  Diagnosis d = diagnose(s, ao, &live);
  BundleMeta meta = bundle_meta_for(s, d, trigger);
  if (d.findings.empty()) meta.cause = trigger == "hang" ? "no-progress" : trigger;
  meta.job_start_ticks = job.start_ticks;
  meta.incident_unix = static_cast<double>(incident_ns) / 1e9 + offset;
  meta.note = note;
  if (trigger == "hang") {
    double last = static_cast<double>(job.watch->last_progress_ns()) / 1e9 + offset;
    // The snapshot can see further back than the watch (a wait that began
    // before the daemon did): the earlier of the two.
    if (meta.last_progress_unix <= 0 || last < meta.last_progress_unix) meta.last_progress_unix = last;
  }
  if (meta.job_comm.empty()) {
    meta.job_comm = job.comm;
    meta.job_cmdline = job.cmdline;
  }
  if (trigger == "hang") job.hang_cause = meta.cause;
  if (trigger == "hang") metrics_->hang_detected(meta.cause);
  nlohmann::json recorder = job.recorder->to_json(offset);
  // Who woke whom in the job, counted in the kernel since it was tracked
  // (most frequent first): the steady state streams none of it.
  recorder["wakeups"] = nlohmann::json::array();
  if (auto counts = read_wakeup_counts())
    for (const auto& w : *counts) {
      if (!job.pids.count(w.wakee_tgid)) continue;
      if (recorder["wakeups"].size() >= 256) break;
      recorder["wakeups"].push_back({{"waker_pid", w.waker_tgid},
                                     {"waker_tid", w.waker_tid},
                                     {"waker_comm", w.waker_comm},
                                     {"wakee_pid", w.wakee_tgid},
                                     {"wakee_tid", w.wakee_tid},
                                     {"count", w.count},
                                     {"last_unix", static_cast<double>(w.last_ts_ns) / 1e9 + offset}});
    }
  recorder["job"] = {{"pid", job.root},
                     {"comm", job.comm},
                     {"matched_by", job.matched_by},
                     {"tracked_since_unix", static_cast<double>(job.tracked_since_ns) / 1e9 + offset}};
  auto path =
      write_bundle(options_.bundle_dir, bundle_dir_name(meta), render_bundle(s, d, &live, meta, recorder));
  if (!path) {
    metrics_->bundle_failed();
    std::fprintf(stderr, "hangtrace daemon: %s\n", path.error().c_str());
    return;
  }
  metrics_->bundle_written(trigger);
  job.last_bundle_ns = now_ns();
  std::fprintf(stderr, "hangtrace daemon: bundle written: %s (%s, %s: %s)\n", path->c_str(), trigger.c_str(),
               meta.cause.c_str(), d.verdict.summary.c_str());
  if (auto pruned = prune_bundles(options_.bundle_dir, options_.keep_bundles); pruned && *pruned)
    log(1, fmt::format("removed {} old bundle(s) (--keep {})", *pruned, options_.keep_bundles));
}

// ---- metrics ----------------------------------------------------------------------------

void Daemon::update_metrics(uint64_t now) {
  size_t processes = 0;
  std::map<std::string, int> hung = causes_seen_;
  for (auto& [c, n] : hung) n = 0;
  for (const auto& [root, job] : jobs_) {
    processes += job.pids.size();
    if (job.hung) hung[job.hang_cause.empty() ? "no-progress" : job.hang_cause]++;
  }
  for (const auto& [c, n] : hung) causes_seen_[c] = 0;
  metrics_->set_jobs(jobs_.size(), processes);
  size_t records = 0, bytes = 0;
  uint64_t evicted = 0;
  for (const auto& [root, job] : jobs_) {
    records += job.recorder->size();
    bytes += job.recorder->bytes();
    evicted += job.recorder->evicted();
  }
  metrics_->set_recorders(records, bytes, evicted);
  metrics_->set_exact_hooks(tracer_->hot_hooks_attached(), hot_attachments_);
  metrics_->set_hangs_active(hung);
  metrics_->set_ring_counters(tracer_->counter(HT_CNT_EVENTS), tracer_->counter(HT_CNT_DROPPED));
  metrics_->set_self_usage(self_cpu_seconds(), static_cast<double>(self_rss_bytes()));

  if (auto hists = read_blocked_histograms()) {
    std::map<std::pair<std::string, std::string>, std::pair<std::vector<double>, double>> deltas;
    for (const auto& h : *hists) {
      auto role = role_of_.find(h.tgid);
      if (role == role_of_.end()) continue;
      auto& seen = hist_seen_[{h.tgid, h.wait_kind, h.main_thread}];
      std::array<uint64_t, HT_HIST_BUCKETS> inc{};
      bool any = false;
      for (int i = 0; i < HT_HIST_BUCKETS; ++i) {
        inc[i] = h.count[i] > seen[i] ? h.count[i] - seen[i] : 0;
        any |= inc[i] > 0;
        seen[i] = h.count[i];
      }
      double sum =
          h.sum_ns > seen[HT_HIST_BUCKETS] ? static_cast<double>(h.sum_ns - seen[HT_HIST_BUCKETS]) / 1e9 : 0;
      seen[HT_HIST_BUCKETS] = h.sum_ns;
      if (!any) continue;
      const char* r =
          role->second == "main" ? daemon::role_name(true, h.main_thread) : daemon::role_name(false, false);
      auto& d = deltas[{r, daemon::wait_kind_name(h.wait_kind)}];
      std::vector<double> folded = daemon::fold_log2_buckets(inc.data(), inc.size());
      if (d.first.empty()) d.first.assign(folded.size(), 0.0);
      for (size_t i = 0; i < folded.size(); ++i) d.first[i] += folded[i];
      d.second += sum;
    }
    for (const auto& [key, d] : deltas) metrics_->observe_blocked(key.first, key.second, d.first, d.second);
  } else {
    log(0, hists.error());
  }
  // Exited processes: their last counts are in; their entries go.
  for (int pid : forget_after_metrics_) {
    if (!job_of_.count(pid)) tracer_->untrace_tgid(pid);
    forget_blocked_histograms(pid);
    role_of_.erase(pid);
    std::erase_if(hist_seen_, [&](const auto& kv) { return std::get<0>(kv.first) == pid; });
  }
  forget_after_metrics_.clear();

  // GPU idle time: NVML samples since the last look, on GPUs that a tracked
  // job uses (any GPU when NVML cannot tell processes apart).
  if (nvml_ && nvml_->usable()) {
    GpuObservation g;
    nvml_->contribute(g);
    const bool any_cuda = tracer_->mapped_modules().any_maps_cuda();
    for (const auto& smp : g.nvml) {
      if (smp.ts_ns <= last_nvml_round_ns_ || !smp.has_utilization || !any_cuda) continue;
      if (smp.gpu_util_pct <= 5) metrics_->add_gpu_idle(smp.device, NvmlSampler::kDefaultIntervalNs / 1e9);
    }
    if (!g.nvml.empty()) last_nvml_round_ns_ = g.nvml.back().ts_ns;
  }
  last_metrics_ns_ = now;
}

int Daemon::run(const std::atomic<bool>& stop) {
  if (nvml_->usable()) nvml_->start();
  std::string address = metrics_->bound_address();
  std::fprintf(
      stderr, "hangtrace daemon: ready: bundles in %s, metrics %s, hang after %.0f s, %s steady state\n",
      options_.bundle_dir.c_str(), address.empty() ? "off" : ("on http://" + address + "/metrics").c_str(),
      options_.hang_after_s, options_.steady_state.c_str());
  // Bundles a writer that died left half-written, and the retention limit.
  prune_bundles(options_.bundle_dir, options_.keep_bundles);
  auto sink = [this](const void* data, size_t size) { on_record(data, size); };
  const uint64_t scan_every = static_cast<uint64_t>(options_.scan_every_s * 1e9);
  while (!stop.load()) {
    tracer_->poll(200, sink);
    uint64_t now = now_ns();
    if (now - last_scan_ns_ >= scan_every) {
      scan();
      last_scan_ns_ = now_ns();
    }
    if (sampler_ && now_ns() - last_sample_ns_ >= static_cast<uint64_t>(options_.sample_every_s * 1e9)) {
      last_sample_ns_ = now_ns();
      sample_waits(last_sample_ns_);
    }
    check_jobs(now_ns());
    if (now - last_metrics_ns_ >= 1'000'000'000ull) update_metrics(now);
  }
  nvml_->stop();
  std::fprintf(stderr, "hangtrace daemon: stopping; %zu job(s) were tracked\n", jobs_.size());
  return 0;
}

}  // namespace hangtrace::cli
