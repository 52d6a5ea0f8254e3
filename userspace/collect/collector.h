// Builds a Snapshot of a live process tree: the target, every descendant
// (DataLoader workers, spawn children) and the peers its waits lead to.
#pragma once

#include <string>

#include "hangtrace/live.h"
#include "hangtrace/model.h"
#include "hangtrace/result.h"
#include "native_stacks.h"

namespace hangtrace {

struct CollectOptions {
  std::string proc_root = "/proc";     // injectable for tests
  bool use_bpf = true;                 // kernel stacks and off-CPU times
  bool include_peers = true;           // processes outside the tree holding the other end
  bool probe_readiness = true;         // pidfd_getfd + poll(0) / FIONREAD on waited fds
  double min_progress_window_s = 0.2;  // at least this long between progress samples
  bool native_stacks = true;           // unwind blocked threads' user stacks (needs use_bpf)
  // Watch a main thread found asleep on a timer for a moment (up to 1.5 s):
  // whether it polls (collector_polls.cpp).
  bool watch_polls = true;
  // false: locate CPython's _PyRuntime by scanning its data, as if the
  // interpreter had no symbols (tests exercise that path with it).
  bool python_symbols = true;
  // Read the kernel log (/dev/kmsg, without blocking) for deaths before
  // hangtrace attached: OOM kills, segfaults, Xid errors (kernel_log.h).
  bool read_kernel_log = true;
  // Unwinding state and symbols kept across captures; null: the one shared
  // by this whole process (process_native_stack_cache()).
  NativeStackCache* native_cache = nullptr;
  int verbosity = 0;
};

// Fails only when the target itself cannot be examined (no such pid, a
// kernel thread, permission denied); anything less becomes a line in
// Snapshot::limitations.
Result<Snapshot> collect_snapshot(int target_pid, const CollectOptions& options);

// A stand-in snapshot for a job that is gone: the report is then made of
// what was seen while it ran (`live`), and `why` says so.
Snapshot exited_job_snapshot(int pid, const LiveObservation& live, const std::string& why);

}  // namespace hangtrace
