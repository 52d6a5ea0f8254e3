// The daemon's on-demand profile (SIGUSR1): for --profile-seconds, the exact
// hooks attached (the sampled steady state has none) and every wait of the
// tracked jobs counted -- those under --record-waits-after-ms summed in the
// kernel (bpf/short_waits.bpf.h) -- into an aggregator of its own, with each
// thread's CPU time from schedstat and its Python frames sampled on CPU
// (--profile-sample-hz, the cpu_samples concern's perf events opened for the
// window only); then one bundle per job whose diagnosis
// carries the stall profile (where its main thread's time went, and who was
// on the critical path), trigger "on-demand". The flight recorders never see
// the window's short-wait records: they would crowd out the history a
// postmortem needs.
#include <fmt/format.h>

#include <cstdio>
#include <cstring>

#include "daemon.h"
#include "hangtrace/abi.h"
#include "hangtrace/profile.h"
#include "process_meta.h"

namespace hangtrace::cli {

void Daemon::start_profile(uint64_t now) {
  if (profile_) {
    log(0, "a profile is already being taken: this request joins it");
    return;
  }
  if (jobs_.empty()) {
    log(0, "profile requested, but no job is tracked: nothing to profile");
    return;
  }
  profile_ = std::make_unique<ProfileWindow>();
  profile_->start_ns = now;
  profile_->due_ns = now + static_cast<uint64_t>(options_.profile_seconds * 1e9);
  profile_->aggregator.set_window_start(now);
  profile_->events_at_start = tracer_->counter(HT_CNT_EVENTS);
  profile_->dropped_at_start = tracer_->counter(HT_CNT_DROPPED);
  for (const auto& [pid, root] : job_of_) profile_->tgids.insert(pid);
  for (const auto& [root, job] : jobs_)
    for (const auto& [pid, m] : job.meta) profile_->aggregator.set_meta(m);
  // The exact hooks first (set_exact_hooks keeps them while profile_ is
  // set), then the sums, so no wait of the window is half-seen.
  set_exact_hooks(now);
  tracer_->set_short_waits(true);
  if (options_.profile_sample_hz) {
    profile_->sampling = tracer_->set_cpu_sampling(true);
    if (!profile_->sampling)
      log(0, "on-CPU frames will not be sampled: the cpu_samples concern is not active");
  }
  profile_->last_times_ns = now_ns();
  read_thread_times(proc_, profile_->tgids, profile_->last_times_ns, true, profile_->thread_times,
                    profile_->first_schedstat);
  log(0, fmt::format("profiling {} job(s) ({} processes) for {:.0f} s", jobs_.size(), profile_->tgids.size(),
                     options_.profile_seconds));
}

void Daemon::profile_record(const void* data, size_t size) {
  ProfileWindow& p = *profile_;
  switch (p.aggregator.add_raw(data, size)) {
    case Aggregator::Raw::Added:
      return;
    case Aggregator::Raw::Undecodable:
      ++p.undecodable;
      return;
    case Aggregator::Raw::NotHot:
      break;
  }
  auto event = decode_event(data, size);
  if (!event) {
    ++p.undecodable;
    return;
  }
  if (event->type == HT_EV_PROC_FORK && event->child_tgid && p.tgids.insert(event->child_tgid).second)
    p.aggregator.set_meta(read_process_meta(event->child_tgid));
  p.aggregator.add(*event);
}

void Daemon::continue_profile(uint64_t now) {
  if (!profile_) return;
  if (now < profile_->due_ns) {
    // A thread that dies in the window keeps the CPU time of its last reading.
    if (now - profile_->last_times_ns >= 1'000'000'000ull) {
      profile_->last_times_ns = now;
      read_thread_times(proc_, profile_->tgids, now, false, profile_->thread_times,
                        profile_->first_schedstat);
    }
    return;
  }
  finish_profile(now);
}

void Daemon::finish_profile(uint64_t now) {
  tracer_->set_short_waits(false);
  if (profile_->sampling) tracer_->set_cpu_sampling(false);
  // What the kernel summed but has not sent (at most short_wait_flush_ns a
  // thread) and the records already queued.
  auto sink = [this](const void* data, size_t size) { on_record(data, size); };
  for (int i = 0; i < 8 && tracer_->poll(0, sink) > 0; ++i) {
  }
  std::unique_ptr<ProfileWindow> p = std::move(profile_);
  const uint64_t end = now_ns();
  read_thread_times(proc_, p->tgids, end, false, p->thread_times, p->first_schedstat);
  LiveObservation o =
      p->aggregator.finish(p->start_ns, end, tracer_->counter(HT_CNT_EVENTS) - p->events_at_start,
                           tracer_->counter(HT_CNT_DROPPED) - p->dropped_at_start);
  o.thread_times = std::move(p->thread_times);
  o.undecodable = p->undecodable;
  if (p->sampling) {
    // Python frames; a native-only stack would need the processes'
    // executable mappings, which the daemon does not keep (counted, not shown).
    CpuSampler::Taken cpu = tracer_->take_cpu_samples();
    o.cpu_samples = std::move(cpu.samples);
    uint64_t native = 0;
    for (const auto& n : cpu.native) native += n.count;
    if (native) log(1, fmt::format("profile: {} on-CPU samples had no Python frame (not shown)", native));
  }
  read_file_mounts(proc_, o);
  set_exact_hooks(now);  // detached again unless a job is a suspect
  size_t written = 0;
  for (auto& [root, job] : jobs_) {
    if (!job.pids.count(root)) continue;  // its main process is gone: nothing to profile it by
    write_bundle_for(
        job, "on-demand", p->start_ns,
        fmt::format("on-demand profile of {:.1f} s", static_cast<double>(end - p->start_ns) / 1e9), &o);
    ++written;
  }
  if (!written) log(0, "profile done, but no profiled job is still running");
}

}  // namespace hangtrace::cli
