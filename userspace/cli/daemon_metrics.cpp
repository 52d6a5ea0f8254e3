#include "daemon_metrics.h"

#include <sys/resource.h>

#include <fmt/format.h>

#include "daemon.h"
#include "hangtrace/daemon.h"
#include "hangtrace/procfs.h"
#include "live_histograms.h"

namespace hangtrace::cli {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

std::unique_ptr<DaemonMetrics> DaemonMetrics::make(const std::string& kernel) {
  std::unique_ptr<DaemonMetrics> m(new DaemonMetrics());
  m->registry_ = std::make_shared<prometheus::Registry>();
  auto& r = *m->registry_;
  BuildGauge()
      .Name("hangtrace_build_info")
      .Help("hangtrace's version and the kernel it runs on (always 1)")
      .Register(r)
      .Add({{"version", HANGTRACE_VERSION}, {"kernel", kernel}})
      .Set(1);
  m->jobs_ =
      &BuildGauge().Name("hangtrace_tracked").Help("Jobs and processes the daemon tracks now").Register(r);
  m->hang_active_ =
      &BuildGauge()
           .Name("hangtrace_hang_active")
           .Help("Tracked jobs hung now (no progress for --hang-after), by the diagnosis's cause")
           .Register(r);
  m->job_hung_ =
      &BuildGauge()
           .Name("hangtrace_job_hung")
           .Help(
               "1 for each tracked job hung now, by its job id (the same on every host), rank, "
               "cause and hang bundle (served at /bundles/BUNDLE); no series for jobs that are not hung")
           .Register(r);
  m->hangs_detected_ =
      &BuildCounter().Name("hangtrace_hangs_detected_total").Help("Hangs detected, by cause").Register(r);
  m->bundles_ =
      &BuildCounter()
           .Name("hangtrace_bundles_written_total")
           .Help("Postmortem bundles written, by trigger (hang, oom-kill, sigbus, abnormal-exit, on-demand)")
           .Register(r);
  m->bundle_errors_ = &BuildCounter()
                           .Name("hangtrace_bundle_errors_total")
                           .Help("Postmortem bundles that could not be written")
                           .Register(r);
  m->deaths_ = &BuildCounter()
                    .Name("hangtrace_process_deaths_total")
                    .Help("Abnormal deaths of tracked processes, by how (oom-kill, signal, exit-nonzero)")
                    .Register(r);
  m->blocked_ =
      &BuildHistogram()
           .Name("hangtrace_blocked_seconds")
           .Help(
               "Time tracked threads spent blocked per wait, by role and wait kind (in kernel while the "
               "exact hooks are attached; else sampled: the waits of at least --sample-every)")
           .Register(r);
  m->main_time_ =
      &BuildCounter()
           .Name("hangtrace_main_thread_seconds_total")
           .Help(
               "Seconds the tracked jobs' main threads spent, by stall cause (on-cpu, dataloader, "
               "storage-io, network, lock, sleep, other), from the 1 s sampled passes")
           .Register(r);
  m->gpu_idle_ = &BuildCounter()
                      .Name("hangtrace_gpu_idle_seconds_total")
                      .Help("Seconds a GPU used by a tracked job was idle (NVML utilization <= 5%)")
                      .Register(r);
  m->events_ =
      &BuildCounter().Name("hangtrace_events_total").Help("Records the BPF programs streamed").Register(r);
  m->dropped_ = &BuildCounter()
                     .Name("hangtrace_dropped_events_total")
                     .Help("Records lost because the ring buffer was full")
                     .Register(r);
  m->cpu_ =
      &BuildCounter().Name("hangtrace_daemon_cpu_seconds_total").Help("CPU time the daemon used").Register(r);
  m->rss_ = &BuildGauge()
                 .Name("hangtrace_daemon_resident_memory_bytes")
                 .Help("The daemon's resident memory")
                 .Register(r);
  m->scan_seconds_ = &BuildGauge()
                          .Name("hangtrace_daemon_scan_seconds")
                          .Help("How long the last scan for new jobs took")
                          .Register(r);
  m->scans_ = &BuildCounter()
                   .Name("hangtrace_daemon_scans_total")
                   .Help("Scans for new jobs made: one that stops rising is a daemon no longer watching")
                   .Register(r);
  // Series an alert takes increase() of exist from the start, at 0.
  for (const char* how : {"oom-kill", "signal", "exit-nonzero"}) m->deaths_->Add({{"how", how}});
  for (const char* trigger : {"hang", "oom-kill", "sigbus", "abnormal-exit", "on-demand"})
    m->bundles_->Add({{"trigger", trigger}});
  m->recorder_ = &BuildGauge()
                      .Name("hangtrace_recorder")
                      .Help(
                          "The flight recorders of the tracked jobs: records and bytes held, records evicted "
                          "before their time by the count or byte bound")
                      .Register(r);
  m->exact_hooks_ = &BuildGauge()
                         .Name("hangtrace_exact_hooks_attached")
                         .Help(
                             "1 while the hooks on every syscall, context switch and wakeup are attached "
                             "(a job looks stuck, or --steady-state exact)")
                         .Register(r);
  m->exact_attachments_ = &BuildCounter()
                               .Name("hangtrace_exact_hooks_attachments_total")
                               .Help("Times the sampled steady state attached the exact hooks")
                               .Register(r);
  m->sample_ = &BuildGauge()
                    .Name("hangtrace_daemon_sample")
                    .Help("The last pass of the sampled steady state: seconds it took, threads it saw")
                    .Register(r);
  m->exact_hooks_->Add({});
  m->exact_attachments_->Add({});
  m->scans_->Add({});
  m->jobs_->Add({{"what", "jobs"}});
  m->jobs_->Add({{"what", "processes"}});
  m->dropped_->Add({});
  m->events_->Add({});
  m->bundle_errors_->Add({});
  return m;
}

void DaemonMetrics::set_jobs(size_t jobs, size_t processes) {
  jobs_->Add({{"what", "jobs"}}).Set(static_cast<double>(jobs));
  jobs_->Add({{"what", "processes"}}).Set(static_cast<double>(processes));
}

void DaemonMetrics::set_hangs_active(const std::map<std::string, int>& by_cause) {
  for (const auto& [cause, n] : by_cause) hang_active_->Add({{"cause", cause}}).Set(n);
}

void DaemonMetrics::set_jobs_hung(const std::set<HungJob>& hung) {
  auto labels = [](const HungJob& j) {
    return prometheus::Labels{
        {"job_id", j.job_id}, {"rank", j.rank}, {"cause", j.cause}, {"bundle", j.bundle}};
  };
  for (const auto& j : jobs_hung_)
    if (!hung.count(j)) job_hung_->Remove(&job_hung_->Add(labels(j)));
  for (const auto& j : hung) job_hung_->Add(labels(j)).Set(1);
  jobs_hung_ = hung;
}

void DaemonMetrics::hang_detected(const std::string& cause) {
  hangs_detected_->Add({{"cause", cause}}).Increment();
}
void DaemonMetrics::bundle_written(const std::string& trigger) {
  bundles_->Add({{"trigger", trigger}}).Increment();
}
void DaemonMetrics::bundle_failed() { bundle_errors_->Add({}).Increment(); }
void DaemonMetrics::process_death(const std::string& how) { deaths_->Add({{"how", how}}).Increment(); }

void DaemonMetrics::observe_blocked(const std::string& role, const std::string& wait,
                                    const std::vector<double>& buckets, double sum_seconds) {
  prometheus::Histogram::BucketBoundaries bounds = daemon::exported_bucket_bounds();
  blocked_->Add({{"role", role}, {"wait", wait}}, bounds).ObserveMultiple(buckets, sum_seconds);
}

void DaemonMetrics::add_main_thread_time(const std::string& cause, double seconds) {
  main_time_->Add({{"cause", cause}}).Increment(seconds);
}

void DaemonMetrics::add_gpu_idle(unsigned gpu, double seconds) {
  gpu_idle_->Add({{"gpu", std::to_string(gpu)}}).Increment(seconds);
}

void DaemonMetrics::set_ring_counters(uint64_t events, uint64_t dropped) {
  if (events > events_seen_) events_->Add({}).Increment(static_cast<double>(events - events_seen_));
  if (dropped > dropped_seen_) dropped_->Add({}).Increment(static_cast<double>(dropped - dropped_seen_));
  events_seen_ = events;
  dropped_seen_ = dropped;
}

void DaemonMetrics::set_self_usage(double cpu_seconds, double resident_bytes) {
  if (cpu_seconds > cpu_seen_) cpu_->Add({}).Increment(cpu_seconds - cpu_seen_);
  cpu_seen_ = cpu_seconds;
  rss_->Add({}).Set(resident_bytes);
}

void DaemonMetrics::scan_took(double seconds) {
  scan_seconds_->Add({}).Set(seconds);
  scans_->Add({}).Increment();
}

void DaemonMetrics::set_exact_hooks(bool attached, uint64_t attachments) {
  exact_hooks_->Add({}).Set(attached ? 1 : 0);
  if (attachments > attachments_seen_)
    exact_attachments_->Add({}).Increment(static_cast<double>(attachments - attachments_seen_));
  attachments_seen_ = attachments;
}

void DaemonMetrics::sample_took(double seconds, size_t threads) {
  sample_->Add({{"what", "seconds"}}).Set(seconds);
  sample_->Add({{"what", "threads"}}).Set(static_cast<double>(threads));
}

void DaemonMetrics::set_recorders(size_t records, size_t bytes, uint64_t evicted) {
  recorder_->Add({{"what", "records"}}).Set(static_cast<double>(records));
  recorder_->Add({{"what", "bytes"}}).Set(static_cast<double>(bytes));
  recorder_->Add({{"what", "evicted"}}).Set(static_cast<double>(evicted));
}

// ---- what the daemon publishes, each second -------------------------------------------

namespace {

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

}  // namespace

void Daemon::update_metrics(uint64_t now) {
  size_t processes = 0;
  std::map<std::string, int> hung = causes_seen_;
  for (auto& [c, n] : hung) n = 0;
  std::set<DaemonMetrics::HungJob> jobs_hung;
  for (const auto& [root, job] : jobs_) {
    processes += job.pids.size();
    if (!job.hung) continue;
    const std::string cause = job.hang_cause.empty() ? "no-progress" : job.hang_cause;
    hung[cause]++;
    jobs_hung.insert({job.job_id, job.rank ? std::to_string(*job.rank) : "", cause, job.hang_bundle});
  }
  metrics_->set_jobs_hung(jobs_hung);
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

}  // namespace hangtrace::cli
