// The blocked-time histograms the syscall dispatcher keeps in kernel
// (bpf/blocked_hist.bpf.h) when LiveOptions::blocked_histograms is set: the
// daemon's steady-state view of how long each process waits, by kind,
// without a record per wait.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "hangtrace/abi.h"
#include "hangtrace/result.h"

namespace hangtrace {

struct BlockedHistogram {
  int tgid = 0;
  uint8_t wait_kind = 0;  // enum ht_wait_kind
  bool main_thread = false;
  std::array<uint64_t, HT_HIST_BUCKETS> count{};  // summed over CPUs; bucket i: [2^i, 2^(i+1)) us
  uint64_t sum_ns = 0;
};

// Every (process, kind, main thread) entry so far, counts since the entry was
// made; empty when no tracer with histograms is loaded in this process.
Result<std::vector<BlockedHistogram>> read_blocked_histograms();

// Drops a process's entries (after its exit: the map is a bounded hash).
void forget_blocked_histograms(int tgid);

}  // namespace hangtrace
