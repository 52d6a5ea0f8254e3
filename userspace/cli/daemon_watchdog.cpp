// The daemon's watchdog and bundles: each job's progress signals checked
// every --check-every, the incidents its deaths are (bundled once their
// records have arrived), and the postmortem bundle written for either.
#include "daemon.h"

#include <fmt/format.h>

#include <filesystem>

#include <algorithm>
#include <cstdio>

#include "collector.h"
#include "hangtrace/bundle.h"
#include "hangtrace/kallsyms.h"
#include "python_stacks.h"
#include "task_iter.h"
#include "host_clock.h"

namespace hangtrace::cli {

std::string Daemon::main_python_frames(Job& job, uint64_t now) {
  // Its caches (code objects, by address) only grow: a reader lives for a
  // bounded number of checks (a target making new code objects all the
  // time costs a fresh reader, not memory).
  constexpr unsigned kChecksPerReader = 40;
  if (job.python && ++job.python_checks >= kChecksPerReader) job.python.reset();
  if (!job.python) {
    job.python_checks = 0;
    auto opened = PythonThreadStacks::open(proc_, job.root);
    if (!opened) return "";
    job.python = std::move(*opened);
  }
  auto frames = job.python->stack(job.root, now);
  if (!frames) {
    // An exec'd image, or an interpreter finalized: found again next check.
    job.python.reset();
    return "";
  }
  return daemon::python_frames_fingerprint(*frames);
}

void Daemon::check_progress(Job& job, uint64_t now, const std::vector<WakeupCount>* wakeups,
                            const LiveObservation& gpu) {
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
  for (const auto& t : gpu.gpu.threads)
    if (job.pids.count(t.pid)) sample.gpu_launches += t.launches;
  sample.python_frames = main_python_frames(job, now);

  std::string moved = job.watch->update(sample);
  if (!moved.empty()) {
    log(2, fmt::format("job {}: progress ({})", job.root, moved));
    if (job.hung) {
      log(0, fmt::format("job {} ({}) makes progress again ({})", job.root, job.comm, moved));
      job.hung = false;
    }
    return;
  }
  if (job.hung || !job.watch->hung(now)) return;
  job.hung = true;
  double stuck_s = static_cast<double>(now - job.watch->last_progress_ns()) / 1e9;
  log(0, fmt::format("job {} ({}) made no progress for {:.0f} s: capturing a bundle", job.root, job.comm,
                     stuck_s));
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
    log(0, fmt::format("job {}: {} of process {} ({}): capturing a bundle", job.root, inc.trigger, inc.pid,
                       inc.comm));
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
  std::optional<LiveObservation> gpu;  // the GPU threads' counts: read once for every job checked
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
    if (!gpu) tracer_->contribute(gpu.emplace());
    check_progress(job, now, wakeups ? &*wakeups : nullptr, *gpu);
  }
  if (checked || (jobs_.empty() && tracer_->hot_hooks_attached())) set_exact_hooks(now);
}

void Daemon::write_bundle_for(Job& job, const std::string& trigger, uint64_t incident_ns,
                              const std::string& note, const LiveObservation* window) {
  const double offset = mono_to_unix_offset_s();
  const uint64_t now = now_ns();
  LiveObservation live = window ? *window : job.recorder->replay(job.tracked_since_ns, now);
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
      log(0, fmt::format("job {}: this hang was bundled before (a previous daemon run)", job.root));
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
  meta.clock = sample_host_clock();
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
  if (trigger == "hang") {
    job.hang_cause = meta.cause;
    job.job_id = meta.job_id;
    job.rank = meta.rank;
    job.hang_bundle.clear();
  }
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
    log(0, path.error());
    return;
  }
  metrics_->bundle_written(trigger);
  job.last_bundle_ns = now_ns();
  if (trigger == "hang") job.hang_bundle = std::filesystem::path(*path).filename().string();
  log(0,
      fmt::format("bundle written: {} ({}, {}: {})", path->c_str(), trigger, meta.cause, d.verdict.summary));
  if (auto pruned = prune_bundles(options_.bundle_dir, options_.keep_bundles); pruned && *pruned)
    log(1, fmt::format("removed {} old bundle(s) (--keep {})", *pruned, options_.keep_bundles));
}

}  // namespace hangtrace::cli
