// The daemon's sampled steady state, the pure part: waits told from a pass
// of the task iterator once a second, with no hook on any hot path.
//
// Each pass says, per thread, whether it is off CPU inside a waiting
// syscall, for how long (the scheduler's own clock: a wait that began before
// the daemon is timed in full), and how many voluntary switches it has made.
// Two passes that see the same thread blocked with the same switch count
// saw one wait; a changed count means it ran between them, so the wait seen
// before has ended. What that gives, at no cost to the traced process:
//   - every wait that lasts at least a sample period, with its kind and its
//     duration to within one period (its lower bound: the last pass that
//     still saw it);
//   - waits that ended by a wakeup rather than a timeout: a thread seen in a
//     wait with no timeout (a lock, a pipe read, waitpid) that has run since
//     was woken by someone -- the watchdog's sampled progress signal.
// Waits shorter than a period are mostly not seen; the exact hooks
// (in-kernel histograms, who-woke-whom) cover those when they are attached.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "hangtrace/abi.h"

namespace hangtrace {

// One thread in one pass of the brief task iterator (ht_task_brief).
struct TaskBrief {
  int tid = 0, tgid = 0;
  bool on_cpu = false;      // running or runnable: not waiting
  uint64_t off_cpu_ns = 0;  // since it last left a CPU (0 on CPU)
  uint64_t sum_exec_ns = 0;
  uint64_t nvcsw = 0;       // voluntary context switches
  int64_t syscall_nr = -1;  // -1: not in a syscall (or unknown)
  uint64_t syscall_args[6] = {0, 0, 0, 0, 0, 0};
};

// What a blocked thread's syscall waits on, when it is a wait.
struct SampledCall {
  bool is_wait = false;
  uint8_t wait_kind = 0;  // enum ht_wait_kind
  bool timed = false;     // it can end by itself (a timeout, a sleep)
  int fd = -1;            // the fd argument of fd waits, else -1
};
SampledCall classify_sampled_call(int64_t nr, const uint64_t args[6]);

// What an fd is, asked once per wait on it (the daemon reads /proc/PID/fd):
// HT_WAIT_NET for a socket, else HT_WAIT_IO; obj_kind: enum ht_obj_kind, as
// in ht_syscall_event.
struct FdInfo {
  uint8_t wait_kind = HT_WAIT_IO;
  uint32_t obj_kind = HT_OBJ_UNKNOWN;
  uint64_t inode = 0;
};
using FdInfoFn = std::function<FdInfo(int tgid, int fd)>;

struct SampledWait {
  int tid = 0, tgid = 0;
  uint8_t wait_kind = 0;
  bool timed = false;
  int64_t nr = -1;
  uint64_t args[6] = {0, 0, 0, 0, 0, 0};
  FdInfo fd;
  uint64_t start_ns = 0;       // CLOCK_MONOTONIC: the pass's time minus the time off CPU
  uint64_t seen_until_ns = 0;  // the last pass that saw it in progress
  bool woken = false;          // ended with the thread running again (not by its exit)
  uint64_t duration_ns() const { return seen_until_ns > start_ns ? seen_until_ns - start_ns : 0; }
};

class WaitSampler {
 public:
  // Ended waits shorter than `report_after_ns` (as seen) are not reported.
  explicit WaitSampler(uint64_t report_after_ns, FdInfoFn fd_info = {})
      : report_after_ns_(report_after_ns), fd_info_(std::move(fd_info)) {}

  struct Pass {
    std::vector<SampledWait> ended;  // waits this pass saw end (or their thread exit)
    // Per thread: it was seen in a wait without a timeout and has run since.
    std::map<int, uint64_t> woken_from_untimed;
  };
  // `tasks`: every thread of the traced processes at `now_ns`. A thread
  // missing from it has exited.
  Pass update(uint64_t now_ns, const std::vector<TaskBrief>& tasks);
  // Waits in progress, by thread.
  std::map<int, SampledWait> in_progress() const;
  // A process's threads are no longer sampled (untraced): forgotten now.
  void forget_tgid(int tgid);
  size_t threads() const { return threads_.size(); }

 private:
  struct Thread {
    uint64_t nvcsw = 0;
    bool waiting = false;
    SampledWait wait;
  };
  uint64_t report_after_ns_;
  FdInfoFn fd_info_;
  std::map<int, Thread> threads_;
};

// A flight-recorder record (the ring buffer's own bytes: ht_futex_event or
// ht_syscall_event) for a wait the sampler saw end, so that bundles replay
// sampled and hooked waits alike. No stacks (ids -ENOENT).
std::string sampled_wait_record(const SampledWait& w, const std::string& comm);

}  // namespace hangtrace
