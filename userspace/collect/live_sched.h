// The "sched" concern (bpf/sched.bpf.c): who wakes whom among the traced
// tasks, counted in kernel; read back here for the report.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hangtrace/result.h"

namespace hangtrace {

// One (waker thread -> traced wakee thread) pair of the in-kernel `wakeups` map.
struct WakeupCount {
  int waker_tgid = 0, waker_tid = 0;  // tgid 0: woken from interrupt context on an idle CPU
  std::string waker_comm;
  int wakee_tgid = 0, wakee_tid = 0;
  uint64_t count = 0;
  uint64_t last_ts_ns = 0;  // CLOCK_MONOTONIC of the latest wakeup
};

// The counts gathered so far by the sched concern of this process's live
// tracer(s), most frequent first; empty when none is loaded. The module is
// owned by LiveTracer, which exposes no modules, so loaded sched modules
// register their map here.
Result<std::vector<WakeupCount>> read_wakeup_counts();

}  // namespace hangtrace
