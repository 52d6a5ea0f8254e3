// Live events: decoding the ring-buffer records (include/hangtrace/abi.h) and
// aggregating them into what the report needs — per-thread timelines, deaths
// and their causes, RSS series, who woke whom — in bounded memory.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "hangtrace/gpu.h"
#include "hangtrace/model.h"
#include "hangtrace/result.h"

namespace hangtrace {

// A decoded record; which fields are meaningful depends on `type` (ht_event_type).
// An HT_EV_SHORT_WAITS record: a thread's consecutive waits under the
// streaming threshold on one object with one waker (hangtrace/abi.h,
// struct ht_short_waits).
struct ShortWaits {
  int64_t nr = -1;
  uint64_t object = 0;  // futex word, or the fd's inode (0: unknown)
  int fd = -1;
  uint32_t obj_kind = 0;
  int waker_tgid = 0, waker_tid = 0;  // 0: unknown or timed out
  std::string waker_comm;
  uint32_t count = 0;
  bool futex = false, timed_out = false;
  uint64_t sum_ns = 0;
  uint32_t buckets[16] = {};  // HT_SHORT_WAIT_BUCKETS (static_asserted in live.cpp)
};

struct TraceEvent {
  uint32_t type = 0;
  uint64_t ts_ns = 0;  // CLOCK_MONOTONIC
  int tgid = 0, tid = 0;
  std::string comm;
  // process
  int parent_tgid = 0, child_tgid = 0;
  int exit_code = 0;  // raw: status << 8 | signal
  bool group_exit = false;
  // signal
  int sig = 0, si_code = 0, sig_result = 0;
  int sender_tgid = 0, sender_tid = 0;
  std::string sender_comm;
  // oom
  uint64_t total_vm_kb = 0, anon_rss_kb = 0, file_rss_kb = 0, shmem_rss_kb = 0;
  int oom_score_adj = 0;
  uint64_t memcg_id = 0;
  uint64_t memcg_limit_bytes = 0;  // 0 when unknown / unlimited
  // futex / syscall
  uint64_t uaddr = 0;
  uint32_t op = 0;
  int64_t ret = 0;
  uint64_t duration_ns = 0, timeout_ns = 0;
  uint32_t mnt_id = 0;  // syscall on a regular file: its mount, and "dir/name"
  std::string file;
  // Stack ids in the kernel's stack map (< 0: none); for a wakeup, the waker's.
  int32_t kstack_id = -1, ustack_id = -1;
  int64_t nr = -1;
  int fd = -1;
  uint32_t obj_kind = 0;
  uint64_t obj_inode = 0;
  // shm
  uint32_t shm_op = 0;
  uint64_t inode = 0, size = 0, addr = 0;
  uint64_t fs_size = 0, fs_used = 0;  // the tmpfs at the event, measured in the kernel
  std::string name;
  // tcp
  std::string local, remote;
  int old_state = 0, new_state = 0;
  // rss
  uint64_t rss_bytes = 0, anon_bytes = 0;
  // wakeup
  int waker_tgid = 0, waker_tid = 0;
  std::string waker_comm;
  // gpu-call / gpu-activity
  GpuCall gpu_call;
  GpuActivity gpu_activity;
  ShortWaits short_waits;
};

const char* event_type_name(uint32_t type);
const char* shm_op_name(uint32_t op);

// Validates size and type; an unknown type is an error the caller may skip.
Result<TraceEvent> decode_event(const void* data, size_t size);

// What userspace learned about a process while it was alive (its cgroup can
// no longer be read once the OOM killer took it).
struct ProcessMeta {
  int pid = 0;
  std::string comm, cmdline;
  uint64_t mount_ns = 0;      // inode of its mount namespace (whose /dev/shm it sees)
  std::string memory_cgroup;  // path under the memory controller
  std::optional<uint64_t> memory_limit_bytes;
};

// A controller's path from /proc/PID/cgroup text: the v1 "N:<controller>:/path"
// line (also among "N:cpu,cpuacct:/path"), else the v2 "0::/path" line (v2 set
// to true). Empty when neither.
std::optional<std::string> cgroup_controller_path(const std::string& proc_cgroup_text,
                                                  std::string_view controller, bool* v2);
std::optional<std::string> memory_cgroup_path(const std::string& proc_cgroup_text, bool* v2);

struct BlockedInterval {
  uint64_t start_ns = 0, end_ns = 0;
  std::string what;  // "futex 0x7f..40", "read pipe:[123]"
  // Where it waited: keys of LiveObservation::kernel_stacks / user_stacks (< 0: none).
  int32_t kstack_id = -1, ustack_id = -1;
};

struct ProcessDeath {
  int pid = 0;
  std::string comm;
  uint64_t ts_ns = 0;
  int exit_code = 0;  // raw status
  int signal = 0;     // 0 for a normal exit
  bool oom_victim = false;
  std::optional<TraceEvent> oom;
  std::optional<TraceEvent> fatal_signal;  // the signal_generate that killed it
  std::vector<TraceEvent> shm_trouble;     // ENOSPC, faults, SIGBUS just before
};

struct RssSeries {
  int pid = 0;
  std::string comm;
  uint64_t first_ts_ns = 0, last_ts_ns = 0;
  uint64_t first_bytes = 0, last_bytes = 0, max_bytes = 0;
  size_t samples = 0;
};

// A thread's CPU accounting over the window: /proc/PID/task/TID/schedstat
// read when the window opened (or when the thread was first seen) and when it
// closed (or last seen alive), as differences.
struct ThreadTimes {
  int pid = 0;
  std::string comm;
  uint64_t first_ns = 0, last_ns = 0;  // CLOCK_MONOTONIC of the two readings
  uint64_t on_cpu_ns = 0;              // schedstat run time between them
  uint64_t runnable_ns = 0;            // schedstat run delay (waiting for a CPU) between them
  bool seen_at_start = false;          // read when the window opened
};

// The streamed waits of one thread in the window, summed by what it waited
// on and who ended it (the latest wakeup seen for the thread, if it fell in
// or just before the wait): every wait, not only the recent ones
// `LiveObservation::blocked` keeps.
struct WaitTotal {
  uint32_t type = 0;      // HT_EV_FUTEX_WAIT or HT_EV_SYSCALL_BLOCK
  int pid = 0;            // the waiter's process
  int64_t nr = -1;        // syscall (HT_NR_*); futex waits: HT_NR_futex
  uint32_t obj_kind = 0;  // ht_obj_kind of the fd (syscalls)
  // futex: uaddr; syscall: the fd's inode (0: none); files: one total per
  // mount and directory (a loader opens a new file per sample), so a hash of
  // mnt_id and the directory's name.
  uint64_t object = 0;
  int fd = -1;                       // the last call's fd
  int waker_pid = 0, waker_tid = 0;  // 0: no wakeup seen (timed out, a signal, or not sampled)
  std::string waker_comm;
  bool timed_out = false;  // ended by its timeout (-ETIMEDOUT, poll/select/epoll returned 0, a sleep)
  // Files (obj_kind HT_OBJ_FILE): where the file lives, from the record.
  uint32_t mnt_id = 0;
  std::vector<std::string> files;  // names as the records carry them ("dir/name"), a few examples
  int32_t ustack_id = -1;          // one call's user stack (key of user_stacks with the thread's pid)
  int32_t kstack_id = -1;          // one call's kernel stack
  uint64_t count = 0, sum_ns = 0;
  // Of sum_ns, the time inside one of the thread's GPU host waits
  // (a synchronize call, a synchronous copy): the driver's own wait.
  uint64_t in_gpu_ns = 0;
  uint32_t buckets[32] = {};  // log2 of the wait in microseconds, as HT_HIST_BUCKETS
};

// A thread's GPU host waits (gpu_fn_is_host_wait) that returned in the
// window, clipped to it: the stall profile's "gpu" time, whether the thread
// slept in the driver (WaitTotal::in_gpu_ns) or spun on a CPU.
struct GpuHostWaits {
  int pid = 0;
  uint64_t calls = 0, ns = 0;
  std::map<uint32_t, uint64_t> ns_by_fn;  // by enum ht_gpu_fn
};

// On-CPU samples of the traced threads, taken from outside the processes
// (never stopping them): per thread, how many samples saw each stack, frames
// outermost first and ';'-joined (Python frames "file.py:LINE func", native
// ones their function name).
struct CpuSamples {
  uint32_t hz = 0;          // 0: the sampler did not run
  uint64_t samples = 0;     // samples of traced threads
  uint64_t unreadable = 0;  // samples whose stack could not be read
  std::map<int, std::map<std::string, uint64_t>> by_tid;
};

struct LiveHook {
  std::string concern, program, attach;
  bool active = false;
  std::string reason;
};

struct LiveObservation {
  double duration_s = 0;
  uint64_t start_ns = 0, end_ns = 0;
  uint64_t events = 0, dropped = 0, undecodable = 0;
  uint64_t stacks_lost = 0;  // stack walks whose bucket another stack held (counted in kernel)
  std::vector<LiveHook> hooks;
  std::vector<ProcessDeath> deaths;
  std::map<int, RssSeries> rss;                        // by pid
  std::map<int, std::deque<BlockedInterval>> blocked;  // by tid, the most recent
  std::map<int, TraceEvent> last_waker;                // by wakee tid
  // The (sampled) wakeups of each wakee, oldest first, as many as the
  // blocked intervals kept: a wait of 10 ms or more always has the wakeup
  // that ended it here (one record per pair per 10 ms), shorter ones may not.
  std::map<int, std::deque<TraceEvent>> recent_wakeups;  // by wakee tid
  // The stacks the records above name, resolved when the window closed:
  // kernel ones by stack id, user ones by (tgid, stack id) -- user addresses
  // mean something only in their process. Innermost first.
  std::map<int32_t, std::vector<KernelFrame>> kernel_stacks;
  std::map<std::pair<int, int32_t>, std::vector<UserFrame>> user_stacks;
  std::vector<TraceEvent> tcp;      // state changes, retransmits (bounded)
  std::vector<TraceEvent> shm;      // shm activity (bounded)
  std::map<int, ProcessMeta> meta;  // by pid
  std::vector<int> forked;          // processes that appeared while tracing
  // The last stop signal (SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU) sent to each
  // process while tracing, by receiving pid; a later SIGCONT removes it.
  std::map<int, TraceEvent> stop_signals;
  // /dev/shm {used, size} bytes sampled when a process hit ENOSPC or SIGBUS on it.
  std::map<int, std::pair<uint64_t, uint64_t>> shm_usage;
  GpuObservation gpu;
  // The stall profile's inputs (include/hangtrace/profile.h).
  std::map<int, ThreadTimes> thread_times;            // by tid
  std::map<int, std::vector<WaitTotal>> wait_totals;  // by tid, at most kMaxWaitTotalsPerThread each
  uint64_t wait_totals_dropped = 0;                   // waits not summed: a thread or key past the bounds
  std::map<int, GpuHostWaits> gpu_host_waits;         // by tid
  // The mounts file waits went to, by (pid, mnt_id), from the process's
  // mountinfo when the window closed.
  std::map<std::pair<int, uint32_t>, MountEntry> file_mounts;
  CpuSamples cpu_samples;
};

inline constexpr size_t kMaxWaitTotalsPerThread = 128;
// Past kMaxWaitTotalsPerThread - kWaitTotalsForMany keys, a thread's waits on
// further objects are summed per kind and waker with this as their object
// (a loader that opens a new socket or file per batch has thousands): their
// time still counts, under "other sockets" and the like.
inline constexpr size_t kWaitTotalsForMany = 32;
inline constexpr uint64_t kManyObjects = ~0ull;
inline constexpr size_t kMaxWaitTotalThreads = 8192;

class Aggregator {
 public:
  explicit Aggregator(size_t per_thread_intervals = 64, size_t max_list = 4096)
      : per_thread_(per_thread_intervals), max_list_(max_list) {}
  Aggregator(const Aggregator&) = delete;  // holds a pointer into itself
  Aggregator& operator=(const Aggregator&) = delete;
  void add(const TraceEvent& e);
  // The consumer's hot path, straight from a raw record (abi.h) without
  // building a TraceEvent: futex waits, futex wakes and blocking syscalls --
  // nearly every record of a busy job, all of a `--min-block-ms 0` storm --
  // are checked as decode_event() checks them and aggregated as add() would.
  // NotHot: any other type (the caller decodes it and calls add()).
  enum class Raw { Added, NotHot, Undecodable };
  Raw add_raw(const void* data, size_t size);
  void set_meta(const ProcessMeta& m) { obs_.meta[m.pid] = m; }
  // Keeps the fullest reading: that is what the process ran into.
  void note_shm_usage(int pid, uint64_t used, uint64_t size) {
    auto it = obs_.shm_usage.find(pid);
    if (it == obs_.shm_usage.end() || used > it->second.first) obs_.shm_usage[pid] = {used, size};
  }
  const ProcessMeta* meta(int pid) const;
  // The observation so far (blocked intervals brought up to date).
  LiveObservation& observation();
  // Closes the window: duration, counters.
  LiveObservation finish(uint64_t start_ns, uint64_t end_ns, uint64_t events, uint64_t dropped);

 private:
  ProcessDeath& death_of(int pid);
  void add_gpu_activity(const GpuActivity& a);
  // Blocked intervals are kept raw, per thread, in a fixed ring (no
  // allocation per record once a thread's ring is full); their `what` text is
  // formatted only when the observation is read.
  struct RawInterval {
    uint64_t start_ns, end_ns;
    uint64_t key;  // futex: uaddr; syscall: nr
    int32_t fd;
    uint32_t type;
    int32_t kstack_id, ustack_id;
  };
  // A wait as it was summed, kept for a GPU host wait that covers it and is
  // reported after it (the call's record comes when the call returns).
  struct RecentWait {
    uint64_t start_ns = 0, end_ns = 0, ns = 0;  // ns 0: claimed, or none
    uint32_t total = 0;                         // index in the thread's wait_totals
  };
  static constexpr size_t kRecentWaits = 8;
  static constexpr size_t kRecentGpuCalls = 4;
  struct IntervalRing {
    std::vector<RawInterval> slots;  // grows to per_thread_, then wraps
    size_t next = 0;                 // the oldest once full
    std::array<RecentWait, kRecentWaits> recent{};
    uint32_t recent_next = 0;
    // The thread's last GPU host waits, for waits summed after them
    // (short waits still in the kernel when the call returned).
    std::array<std::pair<uint64_t, uint64_t>, kRecentGpuCalls> gpu_calls{};
    uint32_t gpu_next = 0;
  };
  IntervalRing& ring_of(int tid);
  void add_blocked(const RawInterval& b, int tid);
  // live_wait_totals.cpp: the wait just summed into `t` (of `tid`'s
  // totals) inside a GPU host wait, now or when one is reported.
  void note_recent_wait(int tid, uint64_t start_ns, uint64_t end_ns, uint64_t ns, WaitTotal& t);
  void add_gpu_host_wait(const GpuCall& c);
  std::vector<WaitTotal>* last_totals_ = nullptr;  // the vector wait_total_of last returned into
 public:
  // One streamed wait into LiveObservation::wait_totals (live_wait_totals.cpp).
  struct WaitRecord {
    uint32_t type;
    int tgid, tid;
    uint64_t start_ns, end_ns;
    int64_t nr;
    int fd;
    uint32_t obj_kind;
    uint64_t object;  // uaddr or inode
    int64_t ret;
    uint32_t mnt_id;
    std::string_view file;
    int32_t kstack_id, ustack_id;
  };
  // Waits that began before the window are counted from its start.
  void set_window_start(uint64_t ns) { window_start_ns_ = ns; }

 private:
  void add_wait_total(const WaitRecord& w);
  // Waits under the streaming threshold, summed in the kernel (ht_short_waits).
  void add_short_waits(int tgid, int tid, uint64_t end_ns, const ShortWaits& w);
  // The thread's total for one key, made if there is room (else counted in
  // wait_totals_dropped and nullptr).
  WaitTotal* wait_total_of(int tgid, int tid, uint32_t type, int64_t nr, uint32_t obj_kind, uint64_t object,
                           int waker_tid, bool timed_out);
  uint64_t window_start_ns_ = 0;  // waits that began before it are counted from it
  size_t wait_total_entries_ = 0;
  void flush_blocked();
  size_t per_thread_, max_list_;
  LiveObservation obs_;
  std::unordered_map<int, IntervalRing> rings_;  // by tid; nodes are stable
  int last_tid_ = 0;
  IntervalRing* last_ring_ = nullptr;  // rings_[last_tid_]: consecutive records mostly share a thread
  bool blocked_dirty_ = false;
  std::map<int, TraceEvent> pending_signal_;  // last fatal signal per tgid
  std::map<int, TraceEvent> pending_oom_;
  std::map<int, std::vector<TraceEvent>> recent_shm_;  // per tgid, last few
};

}  // namespace hangtrace
