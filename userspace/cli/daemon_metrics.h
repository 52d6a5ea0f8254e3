// The daemon's Prometheus metrics (docs/fleet.md lists them), served on
// /metrics by prometheus-cpp. Labels stay bounded: cause, trigger, role, wait
// kind, GPU index -- never a pid or a tid, which would grow without end.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <map>
#include <set>
#include <memory>
#include <string>
#include <vector>

#include "hangtrace/result.h"

namespace hangtrace::cli {

class DaemonMetrics {
 public:
  // The registry of every metric (daemon_http.cpp serves it).
  static std::unique_ptr<DaemonMetrics> make(const std::string& kernel);
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  void set_jobs(size_t jobs, size_t processes);
  // Jobs hung now, by cause (every cause seen keeps its series, at 0 when none is hung).
  void set_hangs_active(const std::map<std::string, int>& by_cause);
  // One series per job hung now, (job id, rank, cause): those of jobs no
  // longer hung are removed, so the labels stay bounded by the hung jobs.
  struct HungJob {
    std::string job_id, rank, cause, bundle;
    auto operator<=>(const HungJob&) const = default;
  };
  void set_jobs_hung(const std::set<HungJob>& hung);
  void hang_detected(const std::string& cause);
  void bundle_written(const std::string& trigger);
  void bundle_failed();
  void process_death(const std::string& how);  // "oom-kill", "signal", "exit-nonzero"
  // In-kernel log2 bucket increments (already folded to the exported buckets).
  void observe_blocked(const std::string& role, const std::string& wait, const std::vector<double>& buckets,
                       double sum_seconds);
  void add_gpu_idle(unsigned gpu, double seconds);
  // A job's main thread's time, by stall cause (profile.h's names), from the sampled passes.
  void add_main_thread_time(const std::string& cause, double seconds);
  void set_ring_counters(uint64_t events, uint64_t dropped);
  void set_self_usage(double cpu_seconds, double resident_bytes);
  void scan_took(double seconds);
  void set_recorders(size_t records, size_t bytes, uint64_t evicted);
  // The hooks on every syscall, switch and wakeup: attached now or not, and how often they were.
  void set_exact_hooks(bool attached, uint64_t attachments);
  void sample_took(double seconds, size_t threads);

 private:
  DaemonMetrics() = default;
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Gauge>* jobs_ = nullptr;
  prometheus::Family<prometheus::Gauge>* hang_active_ = nullptr;
  prometheus::Family<prometheus::Gauge>* job_hung_ = nullptr;
  std::set<HungJob> jobs_hung_;
  prometheus::Family<prometheus::Counter>* hangs_detected_ = nullptr;
  prometheus::Family<prometheus::Counter>* bundles_ = nullptr;
  prometheus::Family<prometheus::Counter>* bundle_errors_ = nullptr;
  prometheus::Family<prometheus::Counter>* deaths_ = nullptr;
  prometheus::Family<prometheus::Histogram>* blocked_ = nullptr;
  prometheus::Family<prometheus::Counter>* gpu_idle_ = nullptr;
  prometheus::Family<prometheus::Counter>* main_time_ = nullptr;
  prometheus::Family<prometheus::Counter>* events_ = nullptr;
  prometheus::Family<prometheus::Counter>* dropped_ = nullptr;
  prometheus::Family<prometheus::Counter>* cpu_ = nullptr;
  prometheus::Family<prometheus::Gauge>* rss_ = nullptr;
  prometheus::Family<prometheus::Gauge>* scan_seconds_ = nullptr;
  prometheus::Family<prometheus::Counter>* scans_ = nullptr;
  prometheus::Family<prometheus::Gauge>* recorder_ = nullptr;
  prometheus::Family<prometheus::Gauge>* exact_hooks_ = nullptr;
  prometheus::Family<prometheus::Counter>* exact_attachments_ = nullptr;
  prometheus::Family<prometheus::Gauge>* sample_ = nullptr;
  uint64_t attachments_seen_ = 0;
  uint64_t events_seen_ = 0, dropped_seen_ = 0;
  double cpu_seen_ = 0;
};

}  // namespace hangtrace::cli
