// What tests/cupti/cupti_feeder.cpp puts in its records, for the tests that
// check what comes out.
#pragma once

#include <cstdint>

namespace hangtrace::testing::feeder {

inline constexpr const char* kKernelName = "_Z21hangtrace_feed_kernelPfi";
inline constexpr uint64_t kKernelNs = 2'000'000;
inline constexpr uint32_t kDevice = 3;
inline constexpr uint32_t kContext = 5;
inline constexpr uint32_t kStream = 13;
inline constexpr uint32_t kKernelCorrelation = 4242;
inline constexpr uint32_t kRegisters = 40;
inline constexpr uint64_t kMemcpyBytes = 1u << 20;

}  // namespace hangtrace::testing::feeder
