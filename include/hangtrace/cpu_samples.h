// The on-CPU samples' text and bounds (LiveObservation::cpu_samples): how a
// sampled stack becomes one ';'-joined key, and how many keys are kept.
// Pure logic; the sampler itself is userspace/collect/cpu_sampler.h.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "hangtrace/live.h"
#include "hangtrace/model.h"

namespace hangtrace {

// Distinct stacks kept per thread, and threads kept; past them samples are
// counted under kOtherStack (a thread past the bound: all its samples).
inline constexpr size_t kMaxSampleStacksPerThread = 512;
inline constexpr size_t kMaxSampledThreads = 4096;
inline constexpr const char* kOtherStack = "[other]";

// One frame of a sample key: Python "file.py:LINE func" (the file's
// basename; no ":LINE" when unknown), native the function name, else
// "module+0xOFFSET", else "0xADDR"; kernel frames get "_[k]" appended. ';'
// and control characters never appear in a frame.
std::string sample_frame(const UserFrame& f);
std::string kernel_sample_frame(const std::string& name, uint64_t addr);

// Frames given innermost first (as walked), joined outermost first with ';'.
std::string sample_key(const std::vector<std::string>& innermost_first);

// Counts `n` samples of `stack` for thread `tid` within the bounds above.
void add_cpu_sample(CpuSamples& s, int tid, const std::string& stack, uint64_t n = 1);

// "0-3,8,10-11" (/sys/devices/system/cpu/online) -> the CPUs; empty when malformed.
std::vector<int> parse_cpu_list(std::string_view text);

}  // namespace hangtrace
