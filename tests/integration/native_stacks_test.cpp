// Native user stacks unwound from the BPF-saved registers with libdw:
// a C++ chain built without frame pointers (repro_native_nofp), and the
// interpreter frames under a blocked /usr/bin/python3. Needs root and BTF.
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "collector.h"
#include "hangtrace/snapshot_json.h"
#include "native_stacks.h"
#include "support.h"

namespace hangtrace::testing {
namespace {

using namespace std::chrono_literals;

CollectOptions native_options(NativeStackCache* cache) {
  CollectOptions o;
  o.min_progress_window_s = 0.05;
  o.include_peers = false;
  o.probe_readiness = false;
  o.native_cache = cache;
  return o;
}

std::string describe(const ThreadInfo& t) {
  std::string out = "tid " + std::to_string(t.tid) + " error '" + t.native_stack_error + "'\n";
  for (const auto& f : t.native_stack)
    out += fmt::format("  {:#x} {} ({} +{:#x} {})\n", f.addr, f.function.empty() ? "?" : f.function, f.file,
                       f.module_offset, f.build_id);
  return out;
}

// Index of the first frame at or after `from` whose function contains `name`.
size_t find_frame(const std::vector<UserFrame>& stack, const std::string& name, size_t from = 0) {
  for (size_t i = from; i < stack.size(); ++i)
    if (stack[i].function.find(name) != std::string::npos) return i;
  return std::string::npos;
}

TEST(NativeStacks, UnwindsCodeWithoutFramePointers) {
  HANGTRACE_REQUIRE_BPF();
  Workload w({repro_path("repro_native_nofp")});
  ASSERT_NE(w.wait_for_line("READY"), "");
  ASSERT_EQ(wait_until_blocked(w.pid()), "");

  NativeStackCache cache;
  auto snap = collect_snapshot(w.pid(), native_options(&cache));
  ASSERT_TRUE(snap.ok()) << snap.error();
  const ProcessInfo* p = snap->process(w.pid());
  ASSERT_TRUE(p);
  const ThreadInfo* t = p->thread(w.pid());
  ASSERT_TRUE(t);
  ASSERT_TRUE(t->kernel && t->kernel->has_user_regs);
  EXPECT_EQ(t->native_stack_error, "");
  const auto& stack = t->native_stack;
  if (std::getenv("HANGTRACE_TEST_VERBOSE")) std::fputs(describe(*t).c_str(), stdout);
  ASSERT_GE(stack.size(), 5u) << describe(*t);

  // Innermost: libc's read (the syscall wrapper), then the chain in order.
  EXPECT_TRUE(stack[0].function == "read" || stack[0].function == "__libc_read" ||
              stack[0].function == "__GI___libc_read")
      << describe(*t);
  EXPECT_NE(stack[0].file.find("libc"), std::string::npos) << describe(*t);
  size_t inner = find_frame(stack, "nofp::inner_blocks_on_pipe");
  ASSERT_NE(inner, std::string::npos) << describe(*t);
  size_t middle = find_frame(stack, "nofp::middle", inner + 1);
  ASSERT_NE(middle, std::string::npos) << describe(*t);
  size_t outer = find_frame(stack, "nofp::outer", middle + 1);
  ASSERT_NE(outer, std::string::npos) << describe(*t);
  size_t main_frame = std::string::npos;
  for (size_t i = outer + 1; i < stack.size(); ++i)
    if (stack[i].function == "main") main_frame = i;
  ASSERT_NE(main_frame, std::string::npos) << describe(*t);
  EXPECT_EQ(middle, inner + 1) << describe(*t);
  EXPECT_EQ(outer, middle + 1) << describe(*t);
  EXPECT_EQ(main_frame, outer + 1) << describe(*t);

  const std::string exe = std::filesystem::canonical(repro_path("repro_native_nofp")).string();
  for (size_t i : {inner, middle, outer, main_frame}) {
    EXPECT_EQ(stack[i].kind, UserFrame::Kind::Native);
    EXPECT_EQ(stack[i].file, exe) << describe(*t);
    EXPECT_FALSE(stack[i].build_id.empty()) << describe(*t);
    EXPECT_NE(stack[i].addr, 0u);
    // A PIE: the offset is small, the address is not.
    EXPECT_LT(stack[i].module_offset, stack[i].addr) << describe(*t);
  }
  EXPECT_FALSE(stack[0].build_id.empty()) << describe(*t);

  // A second capture with the same cache reuses the Dwfl and symbols and
  // gives the same stack.
  auto again = collect_snapshot(w.pid(), native_options(&cache));
  ASSERT_TRUE(again.ok()) << again.error();
  const ThreadInfo* t2 = again->process(w.pid())->thread(w.pid());
  ASSERT_TRUE(t2);
  ASSERT_EQ(t2->native_stack.size(), stack.size()) << describe(*t2);
  for (size_t i = 0; i < stack.size(); ++i) EXPECT_EQ(t2->native_stack[i].function, stack[i].function);
  NativeStackStats st = cache.stats();
  EXPECT_EQ(st.dwfl_created, 1u);
  EXPECT_GE(st.dwfl_reused, 1u);
  EXPECT_GT(st.symbol_cache_hits, 0u);

  // The frames survive a save/load round trip.
  auto loaded = snapshot_from_json(snapshot_to_json(*snap));
  ASSERT_TRUE(loaded.ok()) << loaded.error();
  const ThreadInfo* t3 = loaded->process(w.pid())->thread(w.pid());
  ASSERT_TRUE(t3);
  ASSERT_EQ(t3->native_stack.size(), stack.size());
  EXPECT_EQ(t3->native_stack[inner].build_id, stack[inner].build_id);
  EXPECT_EQ(t3->native_stack[inner].module_offset, stack[inner].module_offset);
}

TEST(NativeStacks, PythonInterpreterFrames) {
  HANGTRACE_REQUIRE_BPF();
  const char* python = "/usr/bin/python3";
  if (access(python, X_OK) != 0) GTEST_SKIP() << "needs " << python;
  auto script = std::filesystem::path(HANGTRACE_TEST_PYTHON_DIR) / "blocked_threads.py";
  Workload w({python, "-u", script.string()});
  ASSERT_NE(w.wait_for_line("READY"), "");
  ASSERT_EQ(wait_until_blocked(w.pid()), "");

  auto snap = collect_snapshot(w.pid(), native_options(nullptr));
  ASSERT_TRUE(snap.ok()) << snap.error();
  const ProcessInfo* p = snap->process(w.pid());
  ASSERT_TRUE(p);
  const ThreadInfo* t = p->thread(w.pid());
  ASSERT_TRUE(t);
  EXPECT_EQ(t->native_stack_error, "");
  if (std::getenv("HANGTRACE_TEST_VERBOSE"))
    for (const auto& th : p->threads) std::fputs(describe(th).c_str(), stdout);
  size_t eval = find_frame(t->native_stack, "_PyEval_EvalFrameDefault");
  ASSERT_NE(eval, std::string::npos) << describe(*t);
  const std::string& module = t->native_stack[eval].file;
  EXPECT_TRUE(module.find("python3") != std::string::npos || module.find("libpython") != std::string::npos)
      << module;
  // Every blocked thread got a stack.
  for (const auto& th : p->threads) {
    if (!th.kernel || th.kernel->on_cpu) continue;
    EXPECT_FALSE(th.native_stack.empty()) << describe(th);
  }
}

TEST(NativeStacks, NotPythonNoError) {
  HANGTRACE_REQUIRE_BPF();
  Workload w({repro_path("repro_collector_pipe")});
  ASSERT_NE(w.wait_for_line("READY"), "");
  ASSERT_EQ(wait_until_blocked(w.pid()), "");
  auto snap = collect_snapshot(w.pid(), native_options(nullptr));
  ASSERT_TRUE(snap.ok()) << snap.error();
  ASSERT_EQ(snap->processes.size(), 2u);
  for (const auto& p : snap->processes) {
    EXPECT_FALSE(p.is_python);
    for (const auto& t : p.threads) {
      EXPECT_EQ(t.native_stack_error, "") << t.tid;
      EXPECT_FALSE(t.native_stack.empty()) << describe(t);
    }
  }
  for (const auto& l : snap->limitations) EXPECT_EQ(l.find("native"), std::string::npos) << l;
}

}  // namespace
}  // namespace hangtrace::testing
