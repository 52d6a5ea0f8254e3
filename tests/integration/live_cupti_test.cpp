// GPU activity through the CUPTI injection library's USDT probe, live (root +
// BTF, no GPU needed).
//
// cupti_feeder loads libhangtrace_cupti.so as the driver would, waits until
// an attached uprobe raises the probe's semaphore (which proves the
// semaphore), then hands real CUPTI records to the library's own
// buffer-completed callback. The tracer attaches when told, through
// notice_mapped_file, that a traced process maps the library; the records
// must come out of the ring buffer, calibrated onto CLOCK_MONOTONIC, for the
// traced feeder and not for an untraced one loading the same file.
#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "hangtrace/abi.h"
#include "hangtrace/live.h"
#include "live_cupti.h"
#include "live_tracer.h"
#include "support.h"

#ifdef HANGTRACE_CUPTI_LIB
#include "cupti_feeder.h"
#endif

namespace hangtrace::testing {
namespace {

using namespace std::chrono_literals;

std::vector<HookStatus> cupti_hooks(const LiveTracer& t) {
  std::vector<HookStatus> out;
  for (auto& h : t.hooks())
    if (h.concern == "cupti") out.push_back(h);
  return out;
}

std::string describe(const std::vector<HookStatus>& hooks) {
  std::ostringstream os;
  for (const auto& h : hooks)
    os << "  " << h.program << " " << h.attach << " " << (h.active ? "active" : "inactive") << " " << h.reason
       << "\n";
  return os.str();
}

// The library's path as `pid` maps it (what LiveSession hands to notice_mapped_file).
std::string mapped_path(int pid, const std::string& file_name) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  for (std::string line; std::getline(maps, line);) {
    auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    std::string path = line.substr(slash);
    if (path.size() >= file_name.size() &&
        path.compare(path.size() - file_name.size(), std::string::npos, file_name) == 0)
      return path;
  }
  return "";
}

TEST(LiveCupti, FindsTheInjectionLibraryBesideTheBinary) {
#ifndef HANGTRACE_CUPTI_LIB
  GTEST_SKIP() << "the CUPTI injection library is not built (no CUPTI or sys/sdt.h)";
#else
  std::string lib = HANGTRACE_CUPTI_LIB;  // <build>/lib/libhangtrace_cupti.so
  std::string build_dir = lib.substr(0, lib.rfind("/lib/"));
  auto found = find_cupti_injection_library(build_dir + "/hangtrace");
  ASSERT_TRUE(found);
  EXPECT_EQ(*found, lib);
  EXPECT_FALSE(find_cupti_injection_library(build_dir + "/lib/hangtrace"));
#endif
}

TEST(LiveCupti, TracedProcessDeliversActivityThroughTheUsdtProbe) {
  HANGTRACE_REQUIRE_BPF();
#ifndef HANGTRACE_CUPTI_LIB
  GTEST_SKIP() << "the CUPTI injection library is not built (no CUPTI or sys/sdt.h)";
#else
  namespace f = ::hangtrace::testing::feeder;
  Workload traced({HANGTRACE_CUPTI_FEEDER, HANGTRACE_CUPTI_LIB, "feed"}, /*gated_stdin=*/true);
  ASSERT_EQ(traced.wait_for_line("READY"), "READY " + std::to_string(traced.pid()));
  Workload untraced({HANGTRACE_CUPTI_FEEDER, HANGTRACE_CUPTI_LIB, "feed"}, /*gated_stdin=*/true);
  ASSERT_FALSE(untraced.wait_for_line("READY").empty());

  LiveOptions options;
  options.tgids = {traced.pid()};
  auto tracer = LiveTracer::start(options);
  ASSERT_TRUE(tracer) << tracer.error();
  LiveTracer& t = **tracer;

  auto standby = cupti_hooks(t);
  ASSERT_EQ(standby.size(), 1u) << describe(standby);
  EXPECT_FALSE(standby[0].active);
  EXPECT_EQ(
      standby[0].reason.rfind("standby: no traced process loaded hangtrace's CUPTI injection library", 0), 0u)
      << describe(standby);

  std::string path = mapped_path(traced.pid(), kCuptiInjectionLibraryName);
  ASSERT_FALSE(path.empty()) << "the feeder does not map the library";
  t.notice_mapped_file(traced.pid(), "/usr/lib/libcuda.so.1");  // not ours: ignored
  t.notice_mapped_file(traced.pid(), path);
  t.notice_mapped_file(traced.pid(), path);  // one attachment per file
  auto attached = cupti_hooks(t);
  ASSERT_EQ(attached.size(), 1u) << describe(attached);
  ASSERT_TRUE(attached[0].active) << describe(attached);
  EXPECT_NE(attached[0].attach.find(path), std::string::npos) << describe(attached);

  // Raised only by the uprobe just attached.
  ASSERT_EQ(traced.wait_for_line("ATTACHED", 10s), "ATTACHED");
  std::string fed = traced.wait_for_line("FED", 10s);
  ASSERT_FALSE(fed.empty());
  unsigned long long fed_mono = 0, fed_cupti = 0;
  ASSERT_EQ(std::sscanf(fed.c_str(), "FED %llu %llu", &fed_mono, &fed_cupti), 2) << fed;
  // The untraced feeder's semaphore is raised too (the probe is on the file);
  // its records must stop in the kernel.
  ASSERT_EQ(untraced.wait_for_line("ATTACHED", 10s), "ATTACHED");
  ASSERT_FALSE(untraced.wait_for_line("FED", 10s).empty());

  std::vector<TraceEvent> events;
  auto collect = [&](const void* data, size_t size) {
    auto e = decode_event(data, size);
    ASSERT_TRUE(e) << e.error();
    if (e->type == HT_EV_GPU_ACTIVITY) events.push_back(*e);
  };
  auto has_kernel = [&] {
    return std::any_of(events.begin(), events.end(),
                       [](const TraceEvent& e) { return e.gpu_activity.kind == HT_GPU_ACT_KERNEL; });
  };
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!has_kernel() && std::chrono::steady_clock::now() < deadline) t.poll(100, collect);
  t.poll(0, collect);  // both feeders printed FED after firing: all is in the ring by now
  ASSERT_TRUE(has_kernel()) << events.size() << " gpu-activity records, no kernel";

  std::vector<GpuActivity> by_kind[HT_GPU_ACT_STATUS + 1];
  for (const TraceEvent& e : events) {
    EXPECT_EQ(e.tgid, traced.pid()) << "a record from an untraced process (kind "
                                    << gpu_activity_kind_name(e.gpu_activity.kind) << ")";
    if (e.tgid == traced.pid() && e.gpu_activity.kind <= HT_GPU_ACT_STATUS)
      by_kind[e.gpu_activity.kind].push_back(e.gpu_activity);
  }

  ASSERT_EQ(by_kind[HT_GPU_ACT_KERNEL].size(), 1u);
  const GpuActivity& k = by_kind[HT_GPU_ACT_KERNEL][0];
  EXPECT_EQ(k.name, f::kKernelName);
  EXPECT_EQ(k.device_id, f::kDevice);
  EXPECT_EQ(k.context_id, f::kContext);
  EXPECT_EQ(k.stream_id, f::kStream);
  EXPECT_EQ(k.correlation_id, f::kKernelCorrelation);
  EXPECT_EQ(k.detail, f::kRegisters);
  EXPECT_EQ(k.grid[0], 4u);
  EXPECT_EQ(k.grid[1], 2u);
  EXPECT_EQ(k.block[0], 256u);
  EXPECT_EQ(k.pid, traced.pid());
  // On CLOCK_MONOTONIC: the feeder's kernel ended when it read both clocks.
  EXPECT_NEAR(static_cast<double>(k.end_ns), static_cast<double>(fed_mono), 1e6);
  EXPECT_NEAR(static_cast<double>(k.end_ns - k.start_ns), static_cast<double>(f::kKernelNs), 1e3);

  ASSERT_EQ(by_kind[HT_GPU_ACT_MEMCPY].size(), 1u);
  EXPECT_EQ(by_kind[HT_GPU_ACT_MEMCPY][0].bytes, f::kMemcpyBytes);
  ASSERT_EQ(by_kind[HT_GPU_ACT_DRIVER_API].size(), 1u);
  EXPECT_EQ(by_kind[HT_GPU_ACT_DRIVER_API][0].name, "cuLaunchKernel");
  EXPECT_EQ(by_kind[HT_GPU_ACT_DRIVER_API][0].pid, traced.pid());
  EXPECT_EQ(by_kind[HT_GPU_ACT_DRIVER_API][0].correlation_id, f::kKernelCorrelation);
  ASSERT_EQ(by_kind[HT_GPU_ACT_SYNC].size(), 1u);
  EXPECT_EQ(by_kind[HT_GPU_ACT_SYNC][0].stream_id, f::kStream);

  // Calibration points: CLOCK_MONOTONIC vs CUPTI's clock (CLOCK_REALTIME), like the feeder's.
  ASSERT_FALSE(by_kind[HT_GPU_ACT_CLOCK].empty());
  for (const GpuActivity& c : by_kind[HT_GPU_ACT_CLOCK]) {
    double offset = static_cast<double>(static_cast<int64_t>(c.start_ns - c.end_ns));
    EXPECT_NEAR(offset, static_cast<double>(static_cast<int64_t>(fed_mono - fed_cupti)), 1e6);
    EXPECT_LT(c.bytes, 1'000'000u) << "uncertainty";
  }

  // The library's watcher saw the semaphore too and tried to enable CUPTI
  // activity, which a machine without a GPU refuses; it says so. (Timing:
  // it looks every 500 ms, so wait for its record with a deadline.)
  auto has_status = [&] {
    return std::any_of(events.begin(), events.end(), [&](const TraceEvent& e) {
      return e.tgid == traced.pid() && e.gpu_activity.kind == HT_GPU_ACT_STATUS;
    });
  };
  deadline = std::chrono::steady_clock::now() + 5s;
  while (!has_status() && std::chrono::steady_clock::now() < deadline) t.poll(100, collect);
  ASSERT_TRUE(has_status());
  for (const TraceEvent& e : events) {
    if (e.gpu_activity.kind != HT_GPU_ACT_STATUS) continue;
    EXPECT_TRUE(e.gpu_activity.name.rfind("cuptiActivityEnable(", 0) == 0 ||
                e.gpu_activity.name.rfind("CUPTI activity enabled (", 0) == 0)
        << e.gpu_activity.name;
  }

  LiveObservation o;
  t.contribute(o);
  ASSERT_EQ(o.gpu.libraries.size(), 1u);
  EXPECT_EQ(o.gpu.libraries[0], path + ": USDT hangtrace:gpu_activity");

  traced.release();
  untraced.release();
  EXPECT_EQ(traced.wait_exit(), 0);
  EXPECT_EQ(untraced.wait_exit(), 0);
#endif
}

}  // namespace
}  // namespace hangtrace::testing
