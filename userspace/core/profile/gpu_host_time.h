// A thread's time in CUDA host waits in a live window, for the stall
// profile's "gpu" cause (stall_profile.cpp).
#pragma once

#include <cstdint>
#include <string>

#include "hangtrace/live.h"

namespace hangtrace {

struct GpuHostTime {
  uint64_t returned_ns = 0;  // synchronize calls and synchronous copies that returned, clipped to the window
  uint64_t open_ns = 0;      // the one still in progress at the window's end
  uint64_t calls = 0;
  std::string what = "GPU host waits";  // the call with the most time
};

GpuHostTime gpu_host_time(const LiveObservation& live, int tid);

}  // namespace hangtrace
