// CUPTI records -> ht_gpu_activity, from real CUDA 13 CUPTI structs; and the
// injection library in a process without a GPU.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cupti_feeder.h"
#include "records.h"
#include "temp_dir.h"

extern char** environ;

namespace hangtrace::cupti {
namespace {

constexpr uint64_t kCuptiBase = 1'795'997'421'000'000'000ull;
constexpr uint64_t kMonoBase = 50'000'000'000ull;
constexpr int64_t kOffset = static_cast<int64_t>(kMonoBase - kCuptiBase);

GpuClock calibrated_clock() {
  GpuClock clock;
  clock.add(ClockPoint{kMonoBase, kCuptiBase, 300});
  return clock;
}

uint64_t mono(uint64_t cupti) { return static_cast<uint64_t>(static_cast<int64_t>(cupti) + kOffset); }

// Records reach the conversion as CUPTI hands them out: by their common header.
template <typename Record>
std::optional<ht_gpu_activity> convert(const Record& r) {
  return convert_record(*static_cast<const CUpti_Activity*>(static_cast<const void*>(&r)),
                        calibrated_clock());
}

std::string name_of(const ht_gpu_activity& a) { return std::string(a.name, strnlen(a.name, sizeof a.name)); }

void expect_header(const ht_gpu_activity& a, uint16_t kind) {
  EXPECT_EQ(a.version, HT_GPU_ACTIVITY_VERSION);
  EXPECT_EQ(a.kind, kind);
  EXPECT_EQ(a.size, sizeof(ht_gpu_activity));
  EXPECT_EQ(a.pad, 0u);
}

TEST(CuptiRecords, KernelCarriesTimesIdsGeometryAndName) {
  CUpti_ActivityKernel10 k{};
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.start = kCuptiBase + 1'000;
  k.end = kCuptiBase + 51'000;
  k.completed = kCuptiBase + 52'000;
  k.deviceId = 1;
  k.contextId = 2;
  k.streamId = 7;
  k.correlationId = 99;
  k.registersPerThread = 64;
  k.gridX = 128, k.gridY = 2, k.gridZ = 1;
  k.blockX = 256, k.blockY = 4, k.blockZ = 2;
  k.name = "_Z6matmulPKfS0_Pfi";
  auto a = convert(k);
  ASSERT_TRUE(a);
  expect_header(*a, HT_GPU_ACT_KERNEL);
  EXPECT_EQ(a->start_ns, mono(k.start));
  EXPECT_EQ(a->end_ns, mono(k.end));
  EXPECT_EQ(a->end_ns - a->start_ns, 50'000u);
  EXPECT_EQ(a->device_id, 1u);
  EXPECT_EQ(a->context_id, 2u);
  EXPECT_EQ(a->stream_id, 7u);
  EXPECT_EQ(a->correlation_id, 99u);
  EXPECT_EQ(a->detail, 64u);
  EXPECT_EQ(a->grid[0], 128u);
  EXPECT_EQ(a->grid[1], 2u);
  EXPECT_EQ(a->grid[2], 1u);
  EXPECT_EQ(a->block[0], 256u);
  EXPECT_EQ(a->block[1], 4u);
  EXPECT_EQ(a->block[2], 2u);
  EXPECT_EQ(name_of(*a), "_Z6matmulPKfS0_Pfi");
  EXPECT_EQ(a->pid, 0u);
  EXPECT_EQ(a->tid, 0u);
}

TEST(CuptiRecords, LongKernelNamesAreTruncatedAndTerminated) {
  std::string longname = "_ZN2at6native" + std::string(300, 'x') + "E";
  CUpti_ActivityKernel10 k{};
  k.kind = CUPTI_ACTIVITY_KIND_KERNEL;
  k.name = longname.c_str();
  auto a = convert(k);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->name[HT_GPU_NAME_LEN - 1], '\0');
  EXPECT_EQ(name_of(*a), longname.substr(0, HT_GPU_NAME_LEN - 1));
  EXPECT_EQ(a->start_ns, 0u) << "no start (0) stays 0";

  k.name = nullptr;  // CUPTI leaves it null for some launches
  a = convert(k);
  ASSERT_TRUE(a);
  EXPECT_EQ(name_of(*a), "");
}

TEST(CuptiRecords, MemcpyCarriesBytesAndCopyKind) {
  CUpti_ActivityMemcpy6 m{};
  m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
  m.bytes = 3ull << 30;
  m.start = kCuptiBase + 10;
  m.end = kCuptiBase + 20'010;
  m.deviceId = 0;
  m.contextId = 1;
  m.streamId = 14;
  m.correlationId = 1234;
  auto a = convert(m);
  ASSERT_TRUE(a);
  expect_header(*a, HT_GPU_ACT_MEMCPY);
  EXPECT_EQ(a->bytes, 3ull << 30);
  EXPECT_EQ(a->detail, static_cast<uint32_t>(CUPTI_ACTIVITY_MEMCPY_KIND_DTOH));
  EXPECT_EQ(a->start_ns, mono(m.start));
  EXPECT_EQ(a->end_ns, mono(m.end));
  EXPECT_EQ(a->stream_id, 14u);
  EXPECT_EQ(a->context_id, 1u);
  EXPECT_EQ(a->correlation_id, 1234u);
  EXPECT_EQ(name_of(*a), "");
}

TEST(CuptiRecords, MemsetCarriesBytesAndValue) {
  CUpti_ActivityMemset4 m{};
  m.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  m.value = 0xab;
  m.bytes = 4096;
  m.start = kCuptiBase + 100;
  m.end = kCuptiBase + 300;
  m.deviceId = 2;
  m.streamId = 9;
  m.correlationId = 77;
  auto a = convert(m);
  ASSERT_TRUE(a);
  expect_header(*a, HT_GPU_ACT_MEMSET);
  EXPECT_EQ(a->bytes, 4096u);
  EXPECT_EQ(a->detail, 0xabu);
  EXPECT_EQ(a->device_id, 2u);
  EXPECT_EQ(a->stream_id, 9u);
  EXPECT_EQ(a->correlation_id, 77u);
  EXPECT_EQ(a->end_ns - a->start_ns, 200u);
}

TEST(CuptiRecords, SynchronizationCarriesItsType) {
  CUpti_ActivitySynchronization2 s{};
  s.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
  s.type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE;
  s.start = kCuptiBase + 5'000'000;
  s.end = kCuptiBase + 905'000'000;
  s.contextId = 1;
  s.streamId = CUPTI_SYNCHRONIZATION_INVALID_VALUE;
  s.correlationId = 500;
  auto a = convert(s);
  ASSERT_TRUE(a);
  expect_header(*a, HT_GPU_ACT_SYNC);
  EXPECT_EQ(a->detail, static_cast<uint32_t>(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE));
  EXPECT_EQ(a->start_ns, kMonoBase + 5'000'000);
  EXPECT_EQ(a->end_ns, kMonoBase + 905'000'000);
  EXPECT_EQ(a->correlation_id, 500u);
  EXPECT_EQ(a->stream_id, static_cast<uint32_t>(CUPTI_SYNCHRONIZATION_INVALID_VALUE));
}

TEST(CuptiRecords, ApiCallsAreNamedWithCallerIds) {
  CUpti_ActivityAPI api{};
  api.kind = CUPTI_ACTIVITY_KIND_DRIVER;
  api.cbid = CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel;
  api.start = kCuptiBase + 1;
  api.end = kCuptiBase + 4'001;
  api.processId = 4321;
  api.threadId = 4325;
  api.correlationId = 99;
  auto a = convert(api);
  ASSERT_TRUE(a);
  expect_header(*a, HT_GPU_ACT_DRIVER_API);
  EXPECT_EQ(name_of(*a), "cuLaunchKernel");
  EXPECT_EQ(a->pid, 4321u);
  EXPECT_EQ(a->tid, 4325u);
  EXPECT_EQ(a->correlation_id, 99u);
  EXPECT_EQ(a->detail, static_cast<uint32_t>(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel));
  EXPECT_EQ(a->start_ns, mono(api.start));
  EXPECT_EQ(a->end_ns, mono(api.end));

  // The driver's _v2 is the symbol's own name and stays.
  api.cbid = CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2;
  a = convert(api);
  ASSERT_TRUE(a);
  EXPECT_EQ(name_of(*a), "cuMemcpyHtoD_v2");

  // The runtime's "_v7000" says when it appeared, not what it is called.
  api.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  api.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000;
  a = convert(api);
  ASSERT_TRUE(a);
  expect_header(*a, HT_GPU_ACT_RUNTIME_API);
  EXPECT_EQ(name_of(*a), "cudaLaunchKernel");
  api.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020;
  a = convert(api);
  ASSERT_TRUE(a);
  EXPECT_EQ(name_of(*a), "cudaDeviceSynchronize");
}

TEST(CuptiRecords, OtherKindsAreSkipped) {
  CUpti_ActivityAPI api{};
  api.kind = CUPTI_ACTIVITY_KIND_OVERHEAD;
  EXPECT_FALSE(convert(api));
}

TEST(CuptiRecords, StatusAndClockRecords) {
  auto s = status_record("cuptiActivityEnable(CONCURRENT_KERNEL) failed: CUPTI_ERROR_UNKNOWN");
  expect_header(s, HT_GPU_ACT_STATUS);
  EXPECT_EQ(name_of(s), "cuptiActivityEnable(CONCURRENT_KERNEL) failed: CUPTI_ERROR_UNKNOWN");
  auto long_status = status_record(std::string(500, 's'));
  EXPECT_EQ(name_of(long_status).size(), HT_GPU_NAME_LEN - 1u);

  auto c = clock_record(ClockPoint{kMonoBase, kCuptiBase, 321});
  expect_header(c, HT_GPU_ACT_CLOCK);
  EXPECT_EQ(c.start_ns, kMonoBase);
  EXPECT_EQ(c.end_ns, kCuptiBase);
  EXPECT_EQ(c.bytes, 321u);
}

// CUPTI walks a buffer of records laid out as it lays them out: what the
// library's buffer-completed path (and the integration test) rely on.
TEST(CuptiRecords, CuptiWalksABufferOfBuiltRecords) {
  alignas(8) uint8_t buffer[1024] = {};
  size_t used = 0;
  auto* k = reinterpret_cast<CUpti_ActivityKernel10*>(buffer);
  k->kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k->name = "k";
  used += sizeof *k;
  auto* api = reinterpret_cast<CUpti_ActivityAPI*>(buffer + used);
  api->kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  used += sizeof *api;
  std::vector<CUpti_ActivityKind> kinds;
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, used, &record) == CUPTI_SUCCESS) kinds.push_back(record->kind);
  EXPECT_EQ(kinds, (std::vector<CUpti_ActivityKind>{CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                                    CUPTI_ACTIVITY_KIND_RUNTIME}));
}

struct Finished {
  int status = -1;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs argv with stdout and stderr in files (the feeder writes little).
Finished run(const std::vector<std::string>& argv) {
  hangtrace::testing::TempDir dir{"hangtrace-cupti-test"};
  std::string out = dir.file("out"), err = dir.file("err");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  Finished f;
  if (posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ) == 0) waitpid(pid, &f.status, 0);
  posix_spawn_file_actions_destroy(&actions);
  f.out = slurp(out);
  f.err = slurp(err);
  return f;
}

size_t count_lines_with(const std::string& text, const std::string& prefix) {
  size_t n = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) n += line.rfind(prefix, 0) == 0;
  return n;
}

TEST(CuptiInjection, LoadsAndShutsDownCleanlyWithoutAGpu) {
  Finished f = run({HANGTRACE_CUPTI_FEEDER, HANGTRACE_CUPTI_LIB, "load"});
  ASSERT_TRUE(WIFEXITED(f.status)) << "status " << f.status << "\nstderr:\n" << f.err;
  EXPECT_EQ(WEXITSTATUS(f.status), 0) << f.err;
  EXPECT_NE(f.out.find("INITIALIZED"), std::string::npos) << f.out;
  EXPECT_LE(count_lines_with(f.err, "hangtrace-cupti: "), 1u) << f.err;
  EXPECT_EQ(count_lines_with(f.err, ""), count_lines_with(f.err, "hangtrace-cupti: "))
      << "only the library's one line on stderr:\n"
      << f.err;
}

}  // namespace
}  // namespace hangtrace::cupti
