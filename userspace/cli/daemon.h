// hangtrace daemon: always-on fleet mode. Tracks every process the selectors
// match (and their workers, followed on fork), aggregates in kernel in steady
// state (blocked-time histograms, who-woke-whom counts, deaths), keeps a
// flight recorder per job, and writes a postmortem bundle when a job hangs
// (no progress for --hang-after), or one of its processes is OOM-killed,
// dies of SIGBUS, or exits abnormally. Metrics on /metrics (Prometheus).
#pragma once

#include <array>
#include <atomic>
#include <tuple>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon_http.h"
#include "daemon_metrics.h"
#include "hangtrace/abi.h"
#include "hangtrace/daemon.h"
#include "hangtrace/process_scanner.h"
#include "hangtrace/procfs.h"
#include "hangtrace/profile.h"
#include "hangtrace/result.h"
#include "hangtrace/wait_sampler.h"
#include "live_sched.h"
#include "live_tracer.h"
#include "nvml_sampler.h"
#include "python_stacks.h"

namespace hangtrace::cli {

// Why the task iterator's identity pass cannot stand for /proc/PID/stat in
// the scan for jobs ("" when it can): the daemon in another pid or time
// namespace than the initial ones, or BPF failing.
std::string identity_pass_mismatch(const procfs::ProcFs& proc);

struct DaemonOptions {
  daemon::JobSelectors selectors;
  double hang_after_s = 180;  // the seed runbook's three minutes
  double check_every_s = 0;   // progress sampling period; 0: hang_after / 12, within [0.5, 15] s
  std::string bundle_dir = "/var/lib/hangtrace/bundles";
  size_t keep_bundles = 50;
  std::string metrics_address = "127.0.0.1:9464";  // "" serves none
  // The bundles read-only next to /metrics (daemon_http.h): off unless asked;
  // beyond the loopback interface only with a token.
  bool serve_bundles = false;
  std::string bundle_token_file;
  double recorder_minutes = 10;
  size_t recorder_records = 20000;      // per job
  size_t recorder_bytes = 8u << 20;     // per job
  double record_waits_after_ms = 1000;  // waits at least this long go to the flight recorder
  double scan_every_s = 2;
  int ringbuf_mb = 4;
  double stall_after_s = 10;
  // "sampled": no hot-path hooks in steady state (see wait_sampler.h); the
  // exact ones attach while a job looks stuck. "exact": always attached.
  std::string steady_state = "sampled";
  double sample_every_s = 1;
  double suspect_after_s = 0;  // 0: hang_after / 4, at least two checks
  // SIGUSR1: the exact hooks and every wait summed for this long, then a
  // bundle per job with its stall profile (trigger "on-demand").
  double profile_seconds = 5;
  uint32_t profile_sample_hz = 49;  // on-CPU samples in that window (0: none)
  int verbosity = 0;
  bool sampled() const { return steady_state == "sampled"; }
};

class Daemon {
 public:
  static Result<std::unique_ptr<Daemon>> start(const DaemonOptions& options);
  // Runs until `stop` is set (SIGTERM, SIGINT); returns the exit status.
  // `profile` set (SIGUSR1): an on-demand profile of every job starts (the
  // flag is cleared when it is taken).
  int run(const std::atomic<bool>& stop, std::atomic<bool>* profile = nullptr);

 private:
  struct Incident {
    std::string trigger;  // "oom-kill", "sigbus", "abnormal-exit"
    int pid = 0;
    std::string comm;
    uint64_t ts_ns = 0, due_ns = 0;
  };
  struct Job {
    explicit Job(const daemon::ProcessEntry& e)
        : root(e.pid),
          start_ticks(e.start_ticks),
          comm(e.comm),
          cmdline(e.cmdline),
          matched_by(e.matched_by) {}
    int root = 0;
    uint64_t start_ticks = 0;
    std::string comm, cmdline, matched_by;
    std::set<int> pids;  // its live processes
    std::unique_ptr<daemon::FlightRecorder> recorder;
    std::unique_ptr<daemon::ProgressWatch> watch;
    uint64_t tracked_since_ns = 0, next_check_ns = 0, last_bundle_ns = 0;
    std::map<std::tuple<int, int>, uint64_t> wake_counts;  // (waker tid, wakee tid) -> last count seen
    uint64_t wakeups_from_job = 0;                         // sum of the increases seen
    bool hung = false;
    std::string hang_cause;
    // Its job id (job_identity.h) and rank, as its last hang bundle found them.
    std::string job_id;
    std::optional<int> rank;
    std::string hang_bundle;          // the name of that bundle ("" when it could not be written)
    std::vector<Incident> incidents;  // waiting for their due time (the death's records to arrive)
    std::set<std::pair<int, std::string>> incident_seen;  // (pid, trigger): one bundle each
    std::map<int, ProcessMeta> meta;                      // its live processes
    std::deque<ProcessMeta> dead_meta;                    // the last ones that exited
    uint64_t main_woken_sampled = 0;  // WaitSampler: the main thread woken from untimed waits
    // The watchdog's reader of the main thread's Python frames, kept between
    // checks: the interpreter is found (maps, ELF symbols) once, not on every
    // check of every job. Null while the root runs no CPython (retried).
    std::unique_ptr<PythonThreadStacks> python;
    unsigned python_checks = 0;  // checks made with it
  };
  // When the exact hooks were attached: a sampled wait inside such a period
  // was seen by the kernel too.
  struct HotPeriod {
    uint64_t from_ns = 0, to_ns = 0;  // to_ns 0: still attached
  };

  // An on-demand profile window (daemon_profile.cpp): its records go to
  // their own aggregator, not to the flight recorders.
  struct ProfileWindow {
    uint64_t start_ns = 0, due_ns = 0, last_times_ns = 0;
    std::set<int> tgids;  // the tracked processes at its start, and those forked in it
    Aggregator aggregator;
    std::map<int, ThreadTimes> thread_times;
    std::map<int, procfs::Schedstat> first_schedstat;
    uint64_t undecodable = 0, events_at_start = 0, dropped_at_start = 0;
    bool sampling = false;  // the on-CPU sampler runs for it
  };

  explicit Daemon(const DaemonOptions& o) : options_(o) {}
  void on_record(const void* data, size_t size);
  void scan();
  void pick_up(int root, const std::vector<daemon::ProcessEntry>& processes);
  void add_process(Job& job, int pid, bool from_fork);
  void drop_process(int pid);
  void end_job(int root, const std::string& why);
  void check_jobs(uint64_t now);
  void write_due_incidents(Job& job, uint64_t now);
  void check_progress(Job& job, uint64_t now, const std::vector<WakeupCount>* wakeups,
                      const LiveObservation& gpu);
  std::string main_python_frames(Job& job, uint64_t now);
  // `window`: the observation of an on-demand profile, instead of the
  // flight recorder's replay.
  void write_bundle_for(Job& job, const std::string& trigger, uint64_t incident_ns, const std::string& note,
                        const LiveObservation* window = nullptr);
  void start_profile(uint64_t now);
  void profile_record(const void* data, size_t size);
  void continue_profile(uint64_t now);
  void finish_profile(uint64_t now);
  void update_metrics(uint64_t now);
  void sample_waits(uint64_t now);
  void record_sampled_wait(const SampledWait& w);
  bool kernel_saw(const SampledWait& w) const;
  void set_exact_hooks(uint64_t now);
  uint64_t check_every_ns() const;
  void report_gpu_hook_errors();
  // What a sampled wait's fd is (WaitSampler's FdLookup).
  static FdInfo sampled_fd_info(int tgid, int fd);
  uint64_t now_ns() const;
  double mono_to_unix_offset_s() const;
  // The cause of an earlier bundle (a previous daemon run's) of the same trigger for this job.
  std::optional<std::string> bundled_before(const Job& job, const std::string& trigger) const;
  // Whether process `p` runs the executable `file` (another hangtrace):
  // its exe link is looked at once per process image, not on every scan.
  bool runs_file(const daemon::ProcessEntry& p, const procfs::FileId& file);
  struct ExeSeen {
    uint64_t start_ticks = 0;
    uint64_t cmdline_digest = 0;
    std::optional<procfs::FileId> exe;
  };
  std::map<int, ExeSeen> exe_seen_;  // pid -> its executable, as runs_file last read it
  // Processes whose command line was too long to match whole and that
  // matched no --match: each said once (pid -> start), the first few at the
  // default verbosity, the rest at -v (another user may start thousands).
  void say_cut_cmdlines(const std::vector<daemon::ProcessEntry>& processes);
  std::map<int, uint64_t> cut_said_;
  size_t cut_lines_ = 0;
  void log(int level, const std::string& line) const;

  DaemonOptions options_;
  procfs::ProcFs proc_;
  std::unique_ptr<daemon::JobMatcher> matcher_;
  std::unique_ptr<daemon::ProcessScanner> scanner_;  // over matcher_
  std::unique_ptr<LiveTracer> tracer_;
  std::unique_ptr<DaemonMetrics> metrics_;
  std::unique_ptr<DaemonHttp> http_;  // /metrics, /bundles; none without --metrics
  std::unique_ptr<NvmlSampler> nvml_;
  std::map<int, Job> jobs_;                // by root pid
  std::map<int, int> job_of_;              // pid -> root pid
  std::map<int, std::string> role_of_;     // pid -> "main" / "worker", kept until its histograms are read
  std::vector<int> forget_after_metrics_;  // exited pids whose histograms go after the next read
  std::set<std::pair<int, uint64_t>> ended_jobs_;  // (root, start): never picked up again
  std::map<std::tuple<int, uint8_t, bool>, std::array<uint64_t, HT_HIST_BUCKETS + 1>> hist_seen_;
  std::set<std::string> reported_hook_errors_;  // GPU uprobes that failed, said once each
  std::map<std::string, int> causes_seen_;
  uint64_t last_scan_ns_ = 0, last_metrics_ns_ = 0, last_nvml_round_ns_ = 0, last_sample_ns_ = 0;
  uint64_t last_main_pass_ns_ = 0;  // the sampled pass that last split the main threads' time by cause
  // A pass's view of each job's main thread, as its share of time by cause.
  void add_main_thread_causes(const std::vector<TaskBrief>& briefs, uint64_t now);
  std::unique_ptr<WaitSampler> sampler_;
  std::unique_ptr<ProfileWindow> profile_;
  HotPeriod hot_now_, hot_last_;
  uint64_t hot_attachments_ = 0;
  std::string kernel_release_, hostname_;
};

}  // namespace hangtrace::cli
