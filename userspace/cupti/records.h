// CUPTI activity records -> struct ht_gpu_activity (include/hangtrace/abi.h),
// the record the injection library hands to the USDT probe. The structs are
// the ones CUDA 13's CUPTI delivers for the kinds the library enables:
// CUpti_ActivityKernel10, Memcpy6, Memset4, Synchronization2 and API.
#pragma once

#include <cupti.h>

#include <cstdint>
#include <optional>
#include <string_view>

#include "hangtrace/abi.h"
#include "hangtrace/gpu_clock.h"

namespace hangtrace::cupti {

// The record for `rec` with CUPTI times moved onto CLOCK_MONOTONIC by
// `clock`; nothing for kinds hangtrace does not use.
std::optional<ht_gpu_activity> convert_record(const CUpti_Activity& rec, const GpuClock& clock);

// HT_GPU_ACT_STATUS with `text` as its name (truncated to fit).
ht_gpu_activity status_record(std::string_view text);
// HT_GPU_ACT_CLOCK: the calibration point and its uncertainty.
ht_gpu_activity clock_record(const ClockPoint& point);

// "cuLaunchKernel", "cudaLaunchKernel" (CUPTI's runtime names end in the
// version they appeared in, "_v7000": dropped; the driver's "_v2" is part of
// the symbol and kept); "" when CUPTI does not know the callback.
std::string api_name(CUpti_ActivityKind kind, uint32_t cbid);

// Copies `text` into a name field, always NUL-terminated.
void set_name(ht_gpu_activity& a, std::string_view text);

}  // namespace hangtrace::cupti
