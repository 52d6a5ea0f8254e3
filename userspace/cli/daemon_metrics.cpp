#include "daemon_metrics.h"

#include <fmt/format.h>

#include "hangtrace/daemon.h"

namespace hangtrace::cli {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

Result<std::unique_ptr<DaemonMetrics>> DaemonMetrics::start(const std::string& address,
                                                            const std::string& kernel) {
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
  m->hangs_detected_ =
      &BuildCounter().Name("hangtrace_hangs_detected_total").Help("Hangs detected, by cause").Register(r);
  m->bundles_ = &BuildCounter()
                     .Name("hangtrace_bundles_written_total")
                     .Help("Postmortem bundles written, by trigger (hang, oom-kill, sigbus, abnormal-exit)")
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
  // Series an alert takes increase() of exist from the start, at 0.
  for (const char* how : {"oom-kill", "signal", "exit-nonzero"}) m->deaths_->Add({{"how", how}});
  for (const char* trigger : {"hang", "oom-kill", "sigbus", "abnormal-exit"})
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
  m->jobs_->Add({{"what", "jobs"}});
  m->jobs_->Add({{"what", "processes"}});
  m->dropped_->Add({});
  m->events_->Add({});
  m->bundle_errors_->Add({});
  if (!address.empty()) {
    try {
      m->exposer_ = std::make_unique<prometheus::Exposer>(address, 2);
    } catch (const std::exception& e) {
      return make_error(fmt::format("failed to serve metrics on {}: {}", address, e.what()));
    }
    m->exposer_->RegisterCollectable(m->registry_);
    m->address_ = address;
  }
  return m;
}

std::string DaemonMetrics::bound_address() const {
  if (!exposer_) return "";
  auto ports = exposer_->GetListeningPorts();
  if (ports.empty()) return "";
  // The host as asked ("0.0.0.0" in a pod), the port as bound (":0" picks one).
  std::string host = address_.substr(0, address_.rfind(':'));
  return fmt::format("{}:{}", host.empty() ? "127.0.0.1" : host, ports.front());
}

void DaemonMetrics::set_jobs(size_t jobs, size_t processes) {
  jobs_->Add({{"what", "jobs"}}).Set(static_cast<double>(jobs));
  jobs_->Add({{"what", "processes"}}).Set(static_cast<double>(processes));
}

void DaemonMetrics::set_hangs_active(const std::map<std::string, int>& by_cause) {
  for (const auto& [cause, n] : by_cause) hang_active_->Add({{"cause", cause}}).Set(n);
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

void DaemonMetrics::scan_took(double seconds) { scan_seconds_->Add({}).Set(seconds); }

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

}  // namespace hangtrace::cli
