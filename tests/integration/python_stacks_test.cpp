// Python stacks read with process_vm_readv from every real interpreter found
// (Debian's /usr/bin/python3 and pyenv's 3.8-3.13) running
// tests/integration/python/blocked_threads.py, and none for a process that is
// not Python. Needs root to read another process's memory.
#include "collector.h"

#include <glob.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <ostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support.h"

namespace hangtrace::testing {
namespace {

using namespace std::chrono_literals;

// An interpreter to test: `path` is "" when none is installed.
struct Interpreter {
  std::string name;    // test name suffix
  std::string wanted;  // what was looked for, for the skip message
  std::string path;
};

std::string first_match(const std::string& pattern) {
  glob_t g{};
  std::string out;
  if (glob(pattern.c_str(), 0, nullptr, &g) == 0 && g.gl_pathc > 0) out = g.gl_pathv[0];
  globfree(&g);
  return out;
}

std::vector<Interpreter> interpreters() {
  std::vector<Interpreter> out;
  out.push_back(
      {"system", "/usr/bin/python3", access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : ""});
  for (int minor : {8, 9, 10, 11, 12, 13}) {
    std::string pattern =
        "/root/.pyenv/versions/3." + std::to_string(minor) + ".*/bin/python3." + std::to_string(minor);
    out.push_back({"pyenv3" + std::to_string(minor), pattern, first_match(pattern)});
  }
  return out;
}

void PrintTo(const Interpreter& i, std::ostream* os) { *os << i.name << " (" << i.wanted << ")"; }

std::string script_path(const std::string& name) {
  return (std::filesystem::path(HANGTRACE_TEST_PYTHON_DIR) / name).string();
}

CollectOptions fast_options() {
  CollectOptions o;
  o.use_bpf = false;
  o.min_progress_window_s = 0.05;
  return o;
}

std::string describe(const ThreadInfo& t) {
  std::string out =
      "tid " + std::to_string(t.tid) + (t.holds_gil ? " (GIL)" : "") + " " + t.python_stack_error + "\n";
  for (const auto& f : t.python_stack)
    out += "  " + f.file + ":" + std::to_string(f.line) + " " + f.function +
           (f.python_entry ? " [entry]" : "") + "\n";
  return out;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

class PythonStacks : public ::testing::TestWithParam<Interpreter> {
 protected:
  void SetUp() override {
    if (GetParam().path.empty()) GTEST_SKIP() << "python not installed at " << GetParam().wanted;
  }
};

TEST_P(PythonStacks, ThreadsBlockedAtKnownLines) {
  HANGTRACE_REQUIRE_BPF();
  Workload w({GetParam().path, "-u", script_path("blocked_threads.py")});
  auto f = numeric_fields<int>(w.wait_for_line("READY"));
  ASSERT_EQ(f["pid"], w.pid()) << "no READY line";
  const int main_tid = f["main_tid"], worker_tid = f["worker_tid"];
  ASSERT_EQ(main_tid, w.pid());
  ASSERT_GT(worker_tid, 0);
  const int minor = f["py_minor"];
  ASSERT_GE(minor, 8);
  // Until 3.10 every frame runs in its own C call of the eval loop; from 3.11
  // a Python-to-Python call stays in the caller's.
  const bool every_frame_entry = minor <= 10;
  ASSERT_EQ(wait_until_blocked(w.pid()), "");

  auto t0 = std::chrono::steady_clock::now();
  auto snap = collect_snapshot(w.pid(), fast_options());
  auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(snap.ok()) << snap.error();
  const ProcessInfo* p = snap->process(w.pid());
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->is_python);
  EXPECT_LT(took, 5s);

  const ThreadInfo* main = p->thread(main_tid);
  ASSERT_TRUE(main);
  EXPECT_EQ(main->python_stack_error, "");
  ASSERT_GE(main->python_stack.size(), 3u) << describe(*main);
  const UserFrame& inner = main->python_stack[0];
  EXPECT_EQ(inner.kind, UserFrame::Kind::Python);
  EXPECT_EQ(inner.function, "inner") << describe(*main);
  EXPECT_TRUE(ends_with(inner.file, "/blocked_threads.py")) << inner.file;
  EXPECT_EQ(inner.line, f["main_line"]) << describe(*main);
  EXPECT_EQ(main->python_stack[1].function, "outer") << describe(*main);
  EXPECT_EQ(main->python_stack[1].line, f["outer_line"]) << describe(*main);
  EXPECT_EQ(main->python_stack[2].function, "<module>") << describe(*main);
  EXPECT_EQ(main->python_stack[2].line, f["main_call_line"]) << describe(*main);
  EXPECT_EQ(main->python_stack.size(), 3u) << describe(*main);
  EXPECT_EQ(inner.python_entry, every_frame_entry) << describe(*main);
  EXPECT_EQ(main->python_stack[1].python_entry, every_frame_entry) << describe(*main);
  // <module> is run from C (PyEval_EvalCode) on every version.
  EXPECT_TRUE(main->python_stack[2].python_entry) << describe(*main);

  const ThreadInfo* worker = p->thread(worker_tid);
  ASSERT_TRUE(worker);
  EXPECT_EQ(worker->python_stack_error, "");
  bool found = false;
  for (const auto& frame : worker->python_stack) {
    if (frame.function != "consume") continue;
    found = true;
    EXPECT_TRUE(ends_with(frame.file, "/blocked_threads.py")) << frame.file;
    EXPECT_EQ(frame.line, f["worker_line"]) << describe(*worker);
  }
  EXPECT_TRUE(found) << describe(*worker);
  // Innermost: the Condition.wait that queue.get() sleeps in (threading.py);
  // names are qualified from 3.11 (co_qualname).
  ASSERT_GE(worker->python_stack.size(), 2u) << describe(*worker);
  EXPECT_EQ(worker->python_stack[0].function, minor >= 11 ? "Condition.wait" : "wait") << describe(*worker);
  EXPECT_TRUE(ends_with(worker->python_stack[0].file, "/threading.py")) << describe(*worker);
  EXPECT_EQ(worker->python_stack[1].function, minor >= 11 ? "Queue.get" : "get") << describe(*worker);
  EXPECT_EQ(worker->python_stack[0].python_entry, every_frame_entry) << describe(*worker);
  // The thread's first frame (Thread._bootstrap) is called from C.
  EXPECT_EQ(worker->python_stack.back().function, minor >= 11 ? "Thread._bootstrap" : "_bootstrap")
      << describe(*worker);
  EXPECT_TRUE(worker->python_stack.back().python_entry) << describe(*worker);
  if (every_frame_entry) {
    for (const auto& frame : worker->python_stack) EXPECT_TRUE(frame.python_entry) << describe(*worker);
  }

  // Both threads sleep in a lock wait, which releases the GIL: nobody holds it.
  for (const auto& t : p->threads) EXPECT_FALSE(t.holds_gil) << describe(t);
}

TEST_P(PythonStacks, SpinningThreadHoldsTheGil) {
  HANGTRACE_REQUIRE_BPF();
  Workload w({GetParam().path, "-u", script_path("blocked_threads.py"), "--spin"});
  auto f = numeric_fields<int>(w.wait_for_line("READY"));
  ASSERT_EQ(f["pid"], w.pid()) << "no READY line";
  const int spin_tid = f["spin_tid"];
  ASSERT_GT(spin_tid, 0);
  // Wait until main and the queue consumer sleep in a syscall (so they have
  // released the GIL); the spinner is then the only thread that wants it.
  auto others_blocked = [&] {
    int blocked = 0;
    for (const auto& t : ::hangtrace::testing::thread_states(w.pid()))
      if ((t.tid == f["main_tid"] || t.tid == f["worker_tid"]) && t.state == 'S' && t.syscall_nr >= 0)
        ++blocked;
    return blocked == 2;
  };
  auto deadline = std::chrono::steady_clock::now() + 20s;
  int in_a_row = 0;
  while (in_a_row < 2 && std::chrono::steady_clock::now() < deadline) {
    in_a_row = others_blocked() ? in_a_row + 1 : 0;
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_EQ(in_a_row, 2) << ::hangtrace::testing::describe_threads(w.pid());

  auto snap = collect_snapshot(w.pid(), fast_options());
  ASSERT_TRUE(snap.ok()) << snap.error();
  const ProcessInfo* p = snap->process(w.pid());
  ASSERT_TRUE(p);
  const ThreadInfo* spinner = p->thread(spin_tid);
  ASSERT_TRUE(spinner);
  EXPECT_TRUE(spinner->holds_gil) << describe(*spinner);
  ASSERT_FALSE(spinner->python_stack.empty()) << describe(*spinner);
  EXPECT_EQ(spinner->python_stack[0].function, "spin") << describe(*spinner);
  // The loop body, or the `while True:` jump back to it.
  EXPECT_GE(spinner->python_stack[0].line, f["spin_line"] - 1) << describe(*spinner);
  EXPECT_LE(spinner->python_stack[0].line, f["spin_line"]) << describe(*spinner);
  int holders = 0;
  for (const auto& t : p->threads) holders += t.holds_gil;
  EXPECT_EQ(holders, 1);
}

// A stripped or statically linked interpreter may have no _PyRuntime symbol:
// 3.12+ are found by their .PyRuntime section (`strip` keeps section
// headers), 3.8-3.11 by scanning the interpreter's data for a
// self-consistent interpreter list; the stacks come out the same.
TEST_P(PythonStacks, FoundWithoutSymbolsByScanningItsData) {
  HANGTRACE_REQUIRE_BPF();
  Workload w({GetParam().path, "-u", script_path("blocked_threads.py")});
  auto f = numeric_fields<int>(w.wait_for_line("READY"));
  ASSERT_EQ(f["pid"], w.pid()) << "no READY line";
  ASSERT_EQ(wait_until_blocked(w.pid()), "");
  auto with = collect_snapshot(w.pid(), fast_options());
  CollectOptions scan = fast_options();
  scan.python_symbols = false;
  auto without = collect_snapshot(w.pid(), scan);
  ASSERT_TRUE(with.ok()) << with.error();
  ASSERT_TRUE(without.ok()) << without.error();
  for (int tid : {static_cast<int>(f["main_tid"]), static_cast<int>(f["worker_tid"])}) {
    const ThreadInfo* a = with->process(w.pid())->thread(tid);
    const ThreadInfo* b = without->process(w.pid())->thread(tid);
    ASSERT_TRUE(a && b);
    EXPECT_EQ(b->python_stack_error, "");
    ASSERT_GE(b->python_stack.size(), 3u) << describe(*b);
    ASSERT_EQ(a->python_stack.size(), b->python_stack.size()) << describe(*a) << "\n" << describe(*b);
    for (size_t i = 0; i < a->python_stack.size(); ++i) {
      EXPECT_EQ(a->python_stack[i].function, b->python_stack[i].function);
      EXPECT_EQ(a->python_stack[i].line, b->python_stack[i].line);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Interpreters, PythonStacks, ::testing::ValuesIn(interpreters()),
                         [](const ::testing::TestParamInfo<Interpreter>& info) { return info.param.name; });

TEST(PythonStacksNotPython, NoStackNoError) {
  HANGTRACE_REQUIRE_BPF();
  Workload w({repro_path("repro_collector_pipe")});
  ASSERT_NE(w.wait_for_line("READY"), "");
  ASSERT_EQ(wait_until_blocked(w.pid()), "");
  auto snap = collect_snapshot(w.pid(), fast_options());
  ASSERT_TRUE(snap.ok()) << snap.error();
  ASSERT_FALSE(snap->processes.empty());
  for (const auto& p : snap->processes) {
    EXPECT_FALSE(p.is_python) << p.pid;
    for (const auto& t : p.threads) {
      EXPECT_TRUE(t.python_stack.empty()) << t.tid;
      EXPECT_EQ(t.python_stack_error, "") << t.tid;
      EXPECT_FALSE(t.holds_gil) << t.tid;
    }
  }
  for (const auto& l : snap->limitations) EXPECT_EQ(l.find("Python"), std::string::npos) << l;
}

}  // namespace
}  // namespace hangtrace::testing
