// The on-CPU sampler (bpf/cpu_samples.bpf.c, userspace/collect/cpu_sampler)
// against real processes (root + BTF): a thread burning CPU in a known
// function -- a Python one read from outside the interpreter, a native one
// from the kernel's user stack -- gets the samples, in that function, and the
// blocked main thread of the same process (almost) none.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>

#include "elf_symbols.h"
#include "hangtrace/procfs.h"
#include "live_tracer.h"
#include "support.h"

namespace hangtrace::testing {
namespace {

using namespace std::chrono_literals;

constexpr uint32_t kHz = 99;

std::unique_ptr<LiveTracer> start_sampler(int pid, uint32_t hz = kHz) {
  LiveOptions opt;
  opt.tgids = {pid};
  opt.sample_hz = hz;
  auto t = LiveTracer::start(opt);
  if (!t) {
    ADD_FAILURE() << t.error();
    return nullptr;
  }
  return std::move(*t);
}

std::optional<HookStatus> sampler_hook(const LiveTracer& t) {
  for (const auto& h : t.hooks())
    if (h.concern == "cpu_samples") return h;
  return std::nullopt;
}

// "" when the sampler's perf events are attached, else why not.
std::string perf_events_missing(const LiveTracer& t) {
  std::optional<HookStatus> h = sampler_hook(t);
  if (!h) return "no cpu_samples concern";
  return h->active ? "" : "no perf events here: " + h->reason;
}

// Polls the ring buffer for `window`, then takes the samples.
CpuSampler::Taken sample_for(LiveTracer& t, std::chrono::milliseconds window) {
  auto end = std::chrono::steady_clock::now() + window;
  while (std::chrono::steady_clock::now() < end) t.poll(50, [](const void*, size_t) {});
  return t.take_cpu_samples();
}

// Seconds thread `tid` of `pid` has run (schedstat), 0 when unreadable.
double cpu_seconds(int pid, int tid) {
  auto ns = procfs::ProcFs("/proc").thread_schedstat(pid, tid);
  return ns ? static_cast<double>(*ns) / 1e9 : 0.0;
}

// Samples follow the CPU time a thread got, not the wall clock: on a busy
// machine (CI's other tests, a CPU hog) a spinner runs a share of the
// window. What must hold whatever the scheduler does: at least half of
// kHz x the CPU time it surely got sampled (from after the sampler started;
// perf's frequency mode settles in over its first samples), at most half
// again as many as the CPU time it may have been sampled in (from before
// the sampler started).
void expect_samples_follow_cpu_time(uint64_t samples, double surely_s, double at_most_s,
                                    const std::string& why) {
  std::cout << "cpu " << surely_s << " to " << at_most_s << " s at " << kHz << " Hz; samples " << samples
            << "\n";
  EXPECT_GE(static_cast<double>(samples), std::max(5.0, surely_s * kHz / 2)) << why;
  EXPECT_LE(static_cast<double>(samples), at_most_s * kHz * 1.5 + 10) << why;
}

uint64_t total(const std::map<std::string, uint64_t>& stacks) {
  uint64_t n = 0;
  for (const auto& [k, v] : stacks) n += v;
  return n;
}

std::string describe(const CpuSamples& s) {
  std::ostringstream os;
  os << "hz " << s.hz << " samples " << s.samples << " unreadable " << s.unreadable << "\n";
  for (const auto& [tid, stacks] : s.by_tid)
    for (const auto& [k, v] : stacks) os << "  " << tid << " " << v << " " << k << "\n";
  return os.str();
}

std::string python_script(const std::string& name) {
  return (std::filesystem::path(HANGTRACE_TEST_PYTHON_DIR) / name).string();
}

TEST(LiveCpuSamples, PythonSpinnerIsSampledInItsFunctionAndTheBlockedMainThreadIsNot) {
  HANGTRACE_REQUIRE_BPF();
  Workload w({"/usr/bin/python3", python_script("cpu_burn.py")}, /*gated_stdin=*/true);
  std::string ready = w.wait_for_line("READY");
  int pid = field(ready, "pid"), spinner = field(ready, "spinner"), main_tid = field(ready, "main");
  ASSERT_GT(pid, 0) << ready;
  const double cpu_at_start = cpu_seconds(pid, spinner);
  auto t = start_sampler(pid);
  ASSERT_TRUE(t);
  std::string why = perf_events_missing(*t);
  if (!why.empty()) GTEST_SKIP() << why;
  const double cpu_started = cpu_seconds(pid, spinner);
  CpuSampler::Taken taken = sample_for(*t, 2s);
  const double cpu_end = cpu_seconds(pid, spinner);
  const CpuSamples& s = taken.samples;
  std::cout << describe(s);
  EXPECT_EQ(s.hz, kHz);
  // One thread spinning for 2 s at 99 Hz: ~198 samples on an idle machine.
  ASSERT_TRUE(s.by_tid.count(spinner)) << describe(s);
  uint64_t spinner_samples = total(s.by_tid.at(spinner)), in_spin = 0;
  for (const auto& [stack, n] : s.by_tid.at(spinner)) {
    // Outermost first: the thread's bootstrap, then spinner_main, then spin_here.
    bool leaf = stack.size() >= 10 && stack.compare(stack.size() - 10, 10, " spin_here") == 0;
    if (leaf && stack.find("cpu_burn.py:") != std::string::npos &&
        stack.find(" spinner_main;") != std::string::npos)
      in_spin += n;
  }
  expect_samples_follow_cpu_time(spinner_samples, cpu_end - cpu_started, cpu_end - cpu_at_start, describe(s));
  EXPECT_GE(in_spin * 10, spinner_samples * 9) << describe(s);
  uint64_t main_samples = s.by_tid.count(main_tid) ? total(s.by_tid.at(main_tid)) : 0;
  EXPECT_LE(main_samples, 2u) << describe(s);
  EXPECT_LE(s.unreadable * 10, s.samples) << describe(s);
  for (const auto& n : taken.native) EXPECT_NE(n.tid, spinner) << "the spinner fell back to native stacks";
}

TEST(LiveCpuSamples, NativeBurnerIsSampledInItsFunctionAndTheBlockedMainThreadIsNot) {
  HANGTRACE_REQUIRE_BPF();
  std::string exe = repro_path("repro_cpu_burn");
  Workload w({exe}, /*gated_stdin=*/true);
  std::string ready = w.wait_for_line("READY");
  auto fields = line_fields(ready);
  int pid = field_int(fields, "pid"), burner = field_int(fields, "burner"),
      main_tid = field_int(fields, "main");
  ASSERT_GT(pid, 0) << ready;
  uint64_t burn = std::stoull(fields["burn"], nullptr, 16);
  auto elf = elf::ElfFile::open(exe);
  ASSERT_TRUE(elf) << elf.error();
  auto syms = elf->find_symbols(elf::Tables::Both, {"burn_cpu_here"},
                                [](const elf::Symbol& s) { return s.size > 0; });
  ASSERT_TRUE(syms.count("burn_cpu_here"));
  uint64_t burn_end = burn + syms.at("burn_cpu_here").size;

  const double cpu_at_start = cpu_seconds(pid, burner);
  auto t = start_sampler(pid);
  ASSERT_TRUE(t);
  std::string why = perf_events_missing(*t);
  if (!why.empty()) GTEST_SKIP() << why;
  const double cpu_started = cpu_seconds(pid, burner);
  CpuSampler::Taken taken = sample_for(*t, 2s);
  const double cpu_end = cpu_seconds(pid, burner);
  std::cout << describe(taken.samples);
  EXPECT_EQ(taken.samples.hz, kHz);
  EXPECT_TRUE(taken.samples.by_tid.empty()) << "no Python here: " << describe(taken.samples);
  uint64_t burner_samples = 0, in_burn = 0, main_samples = 0;
  for (const auto& n : taken.native) {
    EXPECT_EQ(n.tgid, pid);
    if (n.tid == main_tid) main_samples += n.count;
    if (n.tid != burner) continue;
    burner_samples += n.count;
    if (!n.ustack.empty() && n.ustack[0] >= burn && n.ustack[0] < burn_end) in_burn += n.count;
  }
  std::cout << "burner " << burner_samples << " in burn_cpu_here " << in_burn << " main " << main_samples
            << "\n";
  expect_samples_follow_cpu_time(burner_samples, cpu_end - cpu_started, cpu_end - cpu_at_start,
                                 "the burner's native samples");
  EXPECT_GE(in_burn * 10, burner_samples * 9);
  EXPECT_LE(main_samples, 2u);
}

TEST(LiveCpuSamples, OffWhenNotAsked) {
  HANGTRACE_REQUIRE_BPF();
  Workload w({repro_path("repro_cpu_burn")}, /*gated_stdin=*/true);
  int pid = field(w.wait_for_line("READY"), "pid");
  ASSERT_GT(pid, 0);
  auto t = start_sampler(pid, 0);
  ASSERT_TRUE(t);
  std::optional<HookStatus> h = sampler_hook(*t);
  ASSERT_TRUE(h);
  EXPECT_FALSE(h->active);
  EXPECT_EQ(h->reason.rfind("not needed", 0), 0u) << h->reason;
  CpuSampler::Taken taken = sample_for(*t, 300ms);
  EXPECT_EQ(taken.samples.hz, 0u);
  EXPECT_EQ(taken.samples.samples, 0u);
}

// The CLI end to end: the named stacks reach the report's live block.
TEST(LiveCpuSamples, CliReportsTheSamplesOfALiveWindow) {
  HANGTRACE_REQUIRE_BPF();
  Workload w({repro_path("repro_cpu_burn")}, /*gated_stdin=*/true);
  int pid = field(w.wait_for_line("READY"), "pid");
  ASSERT_GT(pid, 0);
  HangtraceRun r = run_hangtrace(pid, {"--duration", "2", "--sample-hz", "49"});
  ASSERT_TRUE(r.report.is_object()) << r.dump();
  const auto& cs = r.report["live"]["cpu_samples"];
  ASSERT_TRUE(cs.is_object()) << r.dump();
  bool active = false;
  for (const auto& h : r.report["live"]["hooks"])
    if (h["concern"] == "cpu_samples") active = h["active"].get<bool>();
  if (!active) GTEST_SKIP() << "no perf events here";
  EXPECT_EQ(cs["hz"], 49);
  EXPECT_GE(cs["samples"].get<uint64_t>(), 30u) << cs.dump();
  EXPECT_LE(cs["unreadable"].get<uint64_t>() * 10, cs["samples"].get<uint64_t>()) << cs.dump();
}

}  // namespace
}  // namespace hangtrace::testing
