// Always-on fleet mode, the pure parts (no libbpf, no root): which processes
// are jobs to track, the flight recorder of each job's significant events,
// the watchdog that tells a job making no progress, and the roles and wait
// kinds the in-kernel histograms are reported by. The daemon itself
// (userspace/cli/daemon.cpp) ties them to the live tracer.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "hangtrace/live.h"
#include "hangtrace/pattern.h"
#include "hangtrace/result.h"

namespace hangtrace::procfs {
class ProcFs;
struct BoundedText;
}  // namespace hangtrace::procfs

namespace hangtrace::daemon {

// ---- which processes are jobs ------------------------------------------------

struct JobSelectors {
  std::vector<std::string> cmdline_patterns;  // RE2 patterns (pattern.h), searched in the command line
  std::vector<std::string> cgroup_prefixes;   // a cgroup path (any hierarchy) starting with one
  bool gpu = false;                           // processes holding a /dev/nvidia* device open
  bool empty() const { return cmdline_patterns.empty() && cgroup_prefixes.empty() && !gpu; }
};

// Selectors made ready to match; fails on a pattern that does not compile
// ("failed to compile --match 'x(?=y)': invalid perl operator: (?=").
class JobMatcher {
 public:
  static Result<JobMatcher> make(const JobSelectors& selectors);
  // Why a process with this command line, /proc/PID/cgroup text and
  // device fds matches ("cmdline ~ 'train'", "cgroup /kubepods/...",
  // "holds /dev/nvidia0"), or nullopt. `cmdline_cut`: the command line was
  // longer than procfs's kMaxCmdlineBytes and `cmdline` is its first part;
  // a match in that part says so.
  std::optional<std::string> match(std::string_view cmdline, bool cmdline_cut, const std::string& cgroup_text,
                                   const std::vector<std::string>& fd_targets) const;
  bool wants_cmdline() const { return !patterns_.empty(); }
  bool wants_fds() const { return selectors_.gpu; }
  bool wants_cgroup() const { return !selectors_.cgroup_prefixes.empty(); }
  const JobSelectors& selectors() const { return selectors_; }

 private:
  JobSelectors selectors_;
  std::vector<Pattern> patterns_;
};

// --gpu reads the link of each fd: of a process's first kMaxMatchFds (its
// GPU is opened early; a process may hold a million fds, and the daemon
// scans every 2 s), keeping at most kMaxMatchDeviceFds of them.
constexpr size_t kMaxMatchFds = 65536;
constexpr size_t kMaxMatchDeviceFds = 16;

// What the selectors look at besides the command line, read only when they
// need it: the process's /proc/PID/cgroup text (--cgroup) and the
// /dev/nvidia* devices it holds open (--gpu).
struct MatchInputs {
  std::string cgroup;
  std::vector<std::string> device_fds;
};
MatchInputs read_match_inputs(const procfs::ProcFs& proc, int pid, const JobMatcher& matcher);

// What the daemon keeps of each process's command line: the host's
// processes may each show a MiB of arguments that their forks share at no
// cost to their owner, and a copy of each would be gigabytes here. The
// match is made on all that was read (procfs's kMaxCmdlineBytes); kept are
// its first kMaxKeptCmdlineBytes (logs, bundles; " ..." after a longer one)
// and a digest of the whole, which tells two command lines apart (a forked
// worker from an exec'd one, an exec from none).
constexpr size_t kMaxKeptCmdlineBytes = 4096;

struct ProcessEntry {
  int pid = 0, ppid = 0;
  uint64_t start_ticks = 0;  // /proc stat field 22: a reused pid is another process
  std::string comm;
  std::string cmdline;          // at most kMaxKeptCmdlineBytes (+ " ...")
  uint64_t cmdline_digest = 0;  // of all that was read of it
  bool cmdline_cut = false;     // longer than kMaxCmdlineBytes: matched on its first part
  std::string matched_by;       // "" when the selectors do not match it
};
// Sets `e`'s command line fields from what was read of it.
void keep_cmdline(ProcessEntry& e, const procfs::BoundedText& read);
// Whether two entries have the same command line (digest and kept text).
bool same_cmdline(const ProcessEntry& a, const ProcessEntry& b);

// Every user process under proc_root (kernel threads skipped), with why it
// matches. Processes that vanish while being read are skipped.
Result<std::vector<ProcessEntry>> scan_processes(const std::string& proc_root, const JobMatcher& matcher);

// The roots of the jobs among `processes`: matching processes with no
// matching ancestor of the same command line (DataLoader workers forked from
// the main process share its command line: they belong to its job), leaving
// out launchers, matching processes with a job below them (torchrun and its
// ranks: each rank is a job).
std::vector<int> job_roots(const std::vector<ProcessEntry>& processes);

// Tracked jobs (root -> its processes) whose root is no longer a job root
// while one of their processes now is: a launcher picked up alone, before it
// exec'd its ranks (torchrun with one rank per node: until the rank's exec,
// the child is a forked copy of it). Each such job is to be ended, and the
// new roots picked up as jobs of their own.
std::vector<int> superseded_jobs(const std::map<int, std::set<int>>& tracked, const std::vector<int>& roots);

// `root`'s descendants in `processes` (children, grandchildren, ...).
std::vector<int> descendants_of(int root, const std::vector<ProcessEntry>& processes);
// The same from the parent -> children index of `processes` (children_of),
// built once for every job of a scan.
using ChildIndex = std::multimap<int, int>;
ChildIndex children_of(const std::vector<ProcessEntry>& processes);
std::vector<int> descendants_of(int root, const ChildIndex& children);

// ---- incidents -------------------------------------------------------------------

// The bundle trigger a process's death is ("sigbus", "abnormal-exit"), from
// its raw wait status, or nullopt for an ordinary end: a normal exit, or a
// stop by SIGTERM, SIGINT, SIGHUP or SIGKILL (its scheduler or its user; the
// OOM killer's SIGKILL is an oom-kill, known from its own record).
std::optional<std::string> exit_incident(int raw_status);

// ---- roles and wait kinds (metric labels, bounded) ----------------------------

// "main_thread" (the job's main thread), "main_process" (its other threads:
// pin_memory, gloo, NCCL's watchdog), "worker" (descendant processes).
const char* role_name(bool is_job_root, bool main_thread);
const char* wait_kind_name(uint8_t kind);  // enum ht_wait_kind: "futex", "io", "net", ...
// The stall cause (profile.h's names: "on-cpu", "dataloader", "storage-io",
// ...) of a job's main thread as one sampled pass saw it: on a CPU, or
// blocked in `call` on an fd of `fd_kind` (enum ht_obj_kind; HT_OBJ_UNKNOWN
// for a call with no fd). Coarser than a live window's profile (no wakers):
// a poll/select/epoll or pipe read of a main thread that has DataLoader
// workers counts as waiting for batches, a futex as a lock, a socket as the
// network, a regular file as storage; a sleep, or a timed wait ended by itself, as sleep.
const char* sampled_main_cause(bool on_cpu, bool in_syscall, uint8_t wait_kind, bool timed, uint32_t fd_kind,
                               bool has_workers);

// Upper bounds (seconds) of the exported histogram buckets: powers of 4
// microseconds, so each is a sum of whole in-kernel log2 buckets.
const std::vector<double>& exported_bucket_bounds();
// In-kernel log2 bucket counts (bucket i: [2^i, 2^(i+1)) us) folded into
// exported_bucket_bounds() (plus +Inf at the end), not cumulative.
std::vector<double> fold_log2_buckets(const uint64_t* counts, size_t n);

// ---- the flight recorder --------------------------------------------------------

// The last `horizon` of a job's significant records (deaths, signals, OOM
// kills, /dev/shm trouble, long waits, TCP trouble, RSS steps, GPU calls),
// as the raw ring-buffer bytes: bounded by age, count and bytes; what the
// bounds pushed out before its time is counted.
class FlightRecorder {
 public:
  FlightRecorder(uint64_t horizon_ns, size_t max_records, size_t max_bytes)
      : horizon_ns_(horizon_ns), max_records_(max_records), max_bytes_(max_bytes) {}
  void add(uint64_t ts_ns, const void* data, size_t size);
  // Forgets records older than the horizon before `now_ns`.
  void prune(uint64_t now_ns);
  size_t size() const { return records_.size(); }
  size_t bytes() const { return bytes_; }
  uint64_t evicted() const { return evicted_; }  // pushed out by the count or byte bound
  uint64_t horizon_ns() const { return horizon_ns_; }
  struct Record {
    uint64_t ts_ns;
    std::string raw;
  };
  const std::deque<Record>& records() const { return records_; }

  // The live observation these records make (deaths and their causes, long
  // waits, RSS series...), as the report and the exports take it.
  LiveObservation replay(uint64_t start_ns, uint64_t end_ns) const;
  // recorder.json: {"horizon_s", "records", "evicted", "events": [...]}, each
  // event with its time on both clocks (unix from `mono_to_unix_offset_s`).
  nlohmann::json to_json(double mono_to_unix_offset_s) const;

 private:
  uint64_t horizon_ns_;
  size_t max_records_, max_bytes_;
  std::deque<Record> records_;
  size_t bytes_ = 0;
  uint64_t evicted_ = 0;
};

// One record as recorder.json shows it.
nlohmann::json event_to_json(const TraceEvent& e, double mono_to_unix_offset_s);

// ---- the watchdog ----------------------------------------------------------------

// What a job's progress is judged on, sampled now and then; cumulative
// counters (they only grow while the job lives).
struct ProgressSample {
  uint64_t now_ns = 0;  // CLOCK_MONOTONIC
  // Wakeups of the job's main thread by another thread of the job (a worker
  // handing over a batch, the pin-memory thread): the in-kernel counts.
  uint64_t wakeups_from_job = 0;
  uint64_t gpu_launches = 0;  // kernel launches by the job's threads (uprobes)
  // The sampled steady state's stand-in for wakeups_from_job: times the main
  // thread was seen in a wait without a timeout and had run by the next pass
  // (WaitSampler: someone woke it; a timeout cannot end such a wait).
  uint64_t main_woken_sampled = 0;
  // The main thread's Python frames ("file:line function" innermost first);
  // "" when they could not be read (then they are no signal either way).
  std::string python_frames;
};

// A job is hung when none of its progress signals moved for `hang_after`.
class ProgressWatch {
 public:
  explicit ProgressWatch(uint64_t hang_after_ns) : hang_after_ns_(hang_after_ns) {}
  // Returns which signal moved ("wakeups from the job", "GPU launches",
  // "main thread woken", "Python frames"), or "" when none did.
  std::string update(const ProgressSample& s);
  bool hung(uint64_t now_ns) const { return started_ && now_ns - last_progress_ns_ >= hang_after_ns_; }
  uint64_t last_progress_ns() const { return last_progress_ns_; }
  const std::string& last_progress_signal() const { return last_signal_; }
  uint64_t hang_after_ns() const { return hang_after_ns_; }

 private:
  uint64_t hang_after_ns_;
  bool started_ = false;
  uint64_t last_progress_ns_ = 0;
  std::string last_signal_;
  ProgressSample last_;
};

// The Python frames of a thread as ProgressSample::python_frames has them.
std::string python_frames_fingerprint(const std::vector<UserFrame>& python_stack);

}  // namespace hangtrace::daemon
