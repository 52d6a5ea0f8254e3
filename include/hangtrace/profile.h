// Where a live window's wall time went (issue 18): for each main thread (each
// rank's), the window split into on CPU, waiting for a CPU, and waits by cause
// (DataLoader batches, the GPU, collectives, storage I/O, network, locks,
// sleeps, other), and the critical path behind its waits: each wait ended by
// another thread (who woke whom) is attributed to that thread, and what that
// thread was doing in the window, recursively to a bounded depth.
//
// Pure logic over a Snapshot and a LiveObservation; the rules in
// rules/slow.cpp turn it into findings of slow (not frozen) jobs.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "hangtrace/live.h"
#include "hangtrace/model.h"
#include "hangtrace/procfs.h"

namespace hangtrace {

// X(enumerator, name, doc)
#define HANGTRACE_STALL_CAUSES(X)                                                                    \
  X(OnCpu, "on-cpu", "running on a CPU (user or kernel), from the thread's schedstat")               \
  X(Runnable, "runnable", "ready to run but waiting for a CPU (schedstat's run delay)")              \
  X(DataLoader, "dataloader", "waiting for batches: woken by a DataLoader worker or loader thread")  \
  X(Gpu, "gpu", "in a CUDA synchronize, synchronous copy or other host wait for the device")         \
  X(Collective, "collective", "in a collective or a wait a peer rank ends (NCCL, gloo, c10d store)") \
  X(StorageIo, "storage-io", "reading or writing files: storage, network or FUSE file systems")      \
  X(Network, "network", "on a socket to a process that is not part of the job")                      \
  X(Lock, "lock", "on a lock or condition another thread of the job releases")                       \
  X(Sleep, "sleep", "in a timed sleep, or a poll that timed out with nobody waking it")              \
  X(Other, "other", "any other wait, waits shorter than the streaming threshold, time not traced")

enum class StallCause {
#define HANGTRACE_STALL_CAUSE_ENUMERATOR(id, name, doc) id,
  HANGTRACE_STALL_CAUSES(HANGTRACE_STALL_CAUSE_ENUMERATOR)
#undef HANGTRACE_STALL_CAUSE_ENUMERATOR
      Count
};
const char* stall_cause_name(StallCause c);
const char* stall_cause_doc(StallCause c);

// What one thread's time of one cause was spent on ("read /data/*.jpg on
// /mnt/data (fuse.slowfs)"), the calls and their latency.
struct StallObject {
  std::string what;
  uint64_t ns = 0;
  uint64_t calls = 0;
  uint64_t median_ns = 0, p90_ns = 0;  // per call, from log2 buckets (upper bound of the bucket)
  // Files: the mount the calls went to, as the waiter's mountinfo shows it.
  std::string mount_point, fstype, source;
  std::vector<std::string> files;  // examples, at most a few
};

// A thread (or group of threads of one role) that ended waits of the one
// above it on the path.
struct StallWaker {
  int pid = 0, tid = 0;
  std::string comm, role;  // role as job_role_label names it ("worker", "main", "rank 1")
  uint64_t ns = 0;         // of the waiter's time of this cause that this thread ended
};

struct CauseShare {
  StallCause cause = StallCause::Other;
  uint64_t ns = 0;
  double share = 0;                  // of the thread's window
  std::vector<StallObject> objects;  // biggest first, at most a few
  std::vector<StallWaker> wakers;    // biggest first
};

// On-CPU samples of a thread, by stack (frames outermost first, ';'-joined).
struct FrameShare {
  std::string stack;
  uint64_t samples = 0;
  double share = 0;  // of the thread's on-CPU time (samples / all its samples)
};

struct ThreadProfile {
  int pid = 0, tid = 0;
  std::string comm, role;
  uint64_t window_ns = 0;          // the part of the window the thread lived through
  std::vector<CauseShare> causes;  // every cause with time, biggest first; ns add up to window_ns
  uint64_t cpu_samples = 0;
  std::vector<FrameShare> on_cpu_frames;  // biggest first, at most a few
  const CauseShare* cause(StallCause c) const;
};

// One step of the critical path: a group of threads (same process role) that
// ended waits of the step above; their own split of time; and, below, who
// ended *their* waits.
struct PathStep {
  int depth = 0;                       // 0: the main thread
  StallCause via = StallCause::Other;  // the cause of the parent's waits these threads ended
  uint64_t ended_ns = 0;               // of the parent's wait time these threads ended
  double share_of_parent = 0;          // ended_ns over the parent's window
  std::string label;                   // "workers 12, 13 (python3)"
  std::vector<int> pids, tids;
  uint64_t window_ns = 0;          // the sum of the group's threads' windows
  std::vector<CauseShare> causes;  // the group's time, summed over its threads, biggest first
  std::vector<FrameShare> on_cpu_frames;
  std::vector<PathStep> next;  // bounded: kMaxPathDepth, kMaxPathFanout
};

// One lock the job's threads queued on in the window: its waiters and how
// long each waited on it, and the threads whose release ended those waits.
struct LockQueue {
  int pid = 0;
  uint64_t address = 0;
  std::string what;                               // "futex 0x7f..40", "the GIL of 212"
  std::vector<std::pair<int, uint64_t>> waiters;  // (tid, ns waited), biggest first
  std::vector<std::pair<int, uint64_t>>
      holders;         // (tid, ns of others' waits its release ended), biggest first
  uint64_t waits = 0;  // wait calls
};

struct StallProfile {
  uint64_t window_ns = 0;
  uint64_t start_ns = 0, end_ns = 0;  // CLOCK_MONOTONIC
  std::vector<ThreadProfile> mains;   // the main thread of the target and of each rank
  std::vector<PathStep> paths;        // one per main thread (depth 0), same order
  std::vector<LockQueue> locks;       // futexes waited on by 2+ threads, most waited first (at most 8)
  // The whole profile of any thread of the job (for a rule that needs one
  // off the path: what a lock's holders do).
  std::map<int, ThreadProfile> threads;
  bool empty() const { return mains.empty(); }
};

inline constexpr int kMaxPathDepth = 3;
inline constexpr size_t kMaxPathFanout = 4;

inline constexpr size_t kMaxThreadTimes = 16384;

// Reads the schedstat of every thread of `tgids` into `times` (the window's
// differences so far); `first` keeps each thread's first reading. A thread
// first seen after the window opened counts from zero (it was born in it).
void read_thread_times(const procfs::ProcFs& proc, const std::set<int>& tgids, uint64_t now_ns,
                       bool window_start, std::map<int, ThreadTimes>& times,
                       std::map<int, procfs::Schedstat>& first);

// The mounts of the files the window's waits were on (LiveObservation::
// file_mounts), read from each waiter's mountinfo at the window's end.
void read_file_mounts(const procfs::ProcFs& proc, LiveObservation& o);

// The profile of a live window over the snapshot taken at its end (roles,
// fds, mounts, Python stacks); empty when the window has no per-thread times.
StallProfile build_stall_profile(const Snapshot& snapshot, const LiveObservation& live);

}  // namespace hangtrace
