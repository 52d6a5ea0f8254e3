// The daemon's sampled steady state (wait_sampler.h): no hook on the hot
// paths until a job looks stuck, waits seen by sampling every task of the
// tracked jobs instead, and the exact hooks attached while a job is a suspect.
#include "daemon.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "hangtrace/abi.h"
#include "task_iter.h"

namespace hangtrace::cli {

// What a sampled wait's fd is, from /proc (asked once per wait seen).
FdInfo Daemon::sampled_fd_info(int tgid, int fd) {
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
  // An on-demand profile (daemon_profile.cpp) keeps them while it runs.
  const bool want = !suspects.empty() || profile_;
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
    if (who.empty())
      log(0, "exact hooks attached: an on-demand profile");
    else
      log(0, fmt::format("exact hooks attached: no progress from job {} for {:.0f} s", who,
                         static_cast<double>(suspect_after) / 1e9));
  } else {
    hot_last_ = {hot_now_.from_ns, now};
    hot_now_ = {};
    log(0, "exact hooks detached: no job looks stuck and no profile is being taken");
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
  add_main_thread_causes(*briefs, now);
}

void Daemon::add_main_thread_causes(const std::vector<TaskBrief>& briefs, uint64_t now) {
  // Each pass stands for the time since the one before (at most a few
  // periods: a stalled daemon does not make one pass stand for minutes).
  const uint64_t since = last_main_pass_ns_ ? now - last_main_pass_ns_ : 0;
  last_main_pass_ns_ = now;
  if (!since || since > 5'000'000'000ull) return;
  std::map<int, size_t> processes;  // root -> processes of its job
  for (const auto& [pid, root] : job_of_) ++processes[root];
  for (const TaskBrief& b : briefs) {
    if (b.tid != b.tgid || !jobs_.count(b.tgid)) continue;  // the main thread of a job's root
    const SampledCall call = classify_sampled_call(b.syscall_nr, b.syscall_args);
    const uint32_t fd_kind = call.is_wait && call.fd >= 0 ? sampled_fd_info(b.tgid, call.fd).obj_kind
                                                          : static_cast<uint32_t>(HT_OBJ_UNKNOWN);
    metrics_->add_main_thread_time(
        daemon::sampled_main_cause(b.on_cpu, b.syscall_nr >= 0 && call.is_wait, call.wait_kind, call.timed,
                                   fd_kind, processes[b.tgid] > 1),
        static_cast<double>(since) / 1e9);
  }
}

}  // namespace hangtrace::cli
