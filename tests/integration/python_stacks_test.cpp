// Python stacks read with process_vm_readv from every real interpreter found
// (Debian's /usr/bin/python3*, every pyenv version, HANGTRACE_TEST_PYTHONS)
// running tests/integration/python/blocked_threads.py (a stripped copy too),
// the locks threads park on (lock_waits.py) and asyncio tasks stuck on each
// other (asyncio_tasks.py), and none for a process that is not Python. Needs
// root to read another process's memory. Each interpreter is a test
// parameter: the list says which ran and which were skipped, and why.
#include "collector.h"
#include "hangtrace/collectives.h"

#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "support.h"

namespace hangtrace::testing {
namespace {

using namespace std::chrono_literals;

// An interpreter to test: `skip` says why it is not run ("" when it is).
struct Interpreter {
  std::string name;  // test name suffix: letters, digits, underscores
  std::string path;
  std::string skip;
};

std::vector<std::string> glob_all(const std::string& pattern) {
  glob_t g{};
  std::vector<std::string> out;
  if (glob(pattern.c_str(), 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.push_back(g.gl_pathv[i]);
  globfree(&g);
  return out;
}

// Every interpreter on the machine: /usr/bin/python3 and /usr/bin/python3.*,
// each pyenv version's python3.X (and python3.Xt, a free-threaded build),
// and the colon-separated paths of HANGTRACE_TEST_PYTHONS (hand-built ones).
// The same binary found twice runs once. Python 2 and 3.7 and older are
// listed as skipped.
std::vector<Interpreter> interpreters() {
  std::vector<std::string> candidates = {"/usr/bin/python3"};
  for (const auto& p : glob_all("/usr/bin/python3.*")) candidates.push_back(p);
  for (const auto& p : glob_all("/root/.pyenv/versions/*/bin/python[0-9].*")) candidates.push_back(p);
  if (const char* extra = std::getenv("HANGTRACE_TEST_PYTHONS")) {
    std::stringstream ss(extra);
    for (std::string p; std::getline(ss, p, ':');)
      if (!p.empty()) candidates.push_back(p);
  }
  std::vector<Interpreter> out;
  std::set<std::string> seen;
  for (const auto& path : candidates) {
    const std::string base = std::filesystem::path(path).filename().string();
    // python3.11-config and the like are scripts, not interpreters.
    if (base.find('-') != std::string::npos) continue;
    // One file under several names (a symlink, python3.7m hard-linked to python3.7) runs once.
    struct stat st {};
    std::string key =
        stat(path.c_str(), &st) == 0 ? std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) : path;
    if (!seen.insert(key).second) continue;
    Interpreter i;
    i.path = path;
    for (char c : path) i.name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    int major = 0, minor = 0;
    if (access(path.c_str(), X_OK) != 0) {
      i.skip = "not executable";
    } else if (std::sscanf(base.c_str(), "python%d.%d", &major, &minor) == 2 && (major < 3 || minor < 8)) {
      i.skip = "hangtrace reads CPython 3.8 and later";
    }
    out.push_back(std::move(i));
  }
  return out;
}

void PrintTo(const Interpreter& i, std::ostream* os) { *os << i.path; }

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
    if (!GetParam().skip.empty()) GTEST_SKIP() << GetParam().path << ": " << GetParam().skip;
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
  // A free-threaded build running without the GIL: nobody holds one.
  const bool gil = f["gil"] != 0;
  EXPECT_EQ(spinner->holds_gil, gil) << describe(*spinner);
  if (!gil) {
    EXPECT_TRUE(p->python_gils.empty());
  }
  ASSERT_FALSE(spinner->python_stack.empty()) << describe(*spinner);
  EXPECT_EQ(spinner->python_stack[0].function, "spin") << describe(*spinner);
  // The loop body, or the `while True:` jump back to it.
  EXPECT_GE(spinner->python_stack[0].line, f["spin_line"] - 1) << describe(*spinner);
  EXPECT_LE(spinner->python_stack[0].line, f["spin_line"]) << describe(*spinner);
  int holders = 0;
  for (const auto& t : p->threads) holders += t.holds_gil;
  EXPECT_EQ(holders, gil ? 1 : 0);
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

// A copy of the interpreter with every symbol stripped (`strip --strip-all`
// keeps the section headers) -- and of the libpython it runs from, when it
// has one, loaded in its place through LD_LIBRARY_PATH: found through
// .PyRuntime (3.12+) or by scanning its data (3.8-3.11), with the same
// stacks as the original.
TEST_P(PythonStacks, AStrippedCopyGivesTheSameStacks) {
  HANGTRACE_REQUIRE_BPF();
  CommandResult prefix = run_command({GetParam().path, "-c", "import sys; print(sys.prefix)"});
  ASSERT_EQ(prefix.exit_code, 0) << prefix.err;
  std::string home = prefix.out.substr(0, prefix.out.find('\n'));
  char dir_template[] = "/tmp/hangtrace-stripped-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::filesystem::path dir = dir_template;
  const std::string copy = (dir / std::filesystem::path(GetParam().path).filename()).string();
  std::filesystem::copy_file(GetParam().path, copy);
  std::vector<std::string> stripped_files = {copy};
  // "libpython3.12.so.1.0 => /root/.pyenv/versions/3.12.1/lib/libpython3.12.so.1.0 (0x...)"
  CommandResult deps = run_command({"/usr/bin/ldd", GetParam().path});
  std::istringstream lines(deps.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("libpython") == std::string::npos) continue;
    size_t arrow = line.find("=> ");
    ASSERT_NE(arrow, std::string::npos) << line;
    std::string lib = line.substr(arrow + 3, line.find(" (") - arrow - 3);
    std::string lib_copy = (dir / std::filesystem::path(lib).filename()).string();
    std::filesystem::copy_file(lib, lib_copy);
    stripped_files.push_back(lib_copy);
  }
  for (const auto& file : stripped_files) {
    CommandResult strip = run_command({"strip", "--strip-all", file});
    ASSERT_EQ(strip.exit_code, 0) << strip.err;
  }
  for (const auto& file : stripped_files) {
    CommandResult symbols = run_command({"nm", file});
    EXPECT_EQ(symbols.out.find("_PyRuntime"), std::string::npos) << file << " still has symbols";
  }
  {
    Workload stripped({"/usr/bin/env", "PYTHONHOME=" + home, "LD_LIBRARY_PATH=" + dir.string(), copy, "-u",
                       script_path("blocked_threads.py")});
    Workload original({GetParam().path, "-u", script_path("blocked_threads.py")});
    auto fs = numeric_fields<int>(stripped.wait_for_line("READY"));
    auto fo = numeric_fields<int>(original.wait_for_line("READY"));
    ASSERT_EQ(fs["pid"], stripped.pid()) << "no READY line from the stripped copy";
    ASSERT_EQ(fo["pid"], original.pid()) << "no READY line";
    ASSERT_EQ(wait_until_blocked(stripped.pid()), "");
    ASSERT_EQ(wait_until_blocked(original.pid()), "");
    // The stripped copies are what runs, not the originals.
    const std::string maps = read_text_file("/proc/" + std::to_string(stripped.pid()) + "/maps");
    for (const auto& file : stripped_files)
      EXPECT_NE(maps.find(file), std::string::npos) << file << " not mapped";
    auto a = collect_snapshot(original.pid(), fast_options());
    auto b = collect_snapshot(stripped.pid(), fast_options());
    ASSERT_TRUE(a.ok()) << a.error();
    ASSERT_TRUE(b.ok()) << b.error();
    const ThreadInfo* ta = a->process(original.pid())->thread(fo["main_tid"]);
    const ThreadInfo* tb = b->process(stripped.pid())->thread(fs["main_tid"]);
    ASSERT_TRUE(ta && tb);
    EXPECT_EQ(tb->python_stack_error, "");
    ASSERT_GE(tb->python_stack.size(), 3u) << describe(*tb);
    ASSERT_EQ(ta->python_stack.size(), tb->python_stack.size()) << describe(*ta) << "\n" << describe(*tb);
    for (size_t i = 0; i < ta->python_stack.size(); ++i) {
      EXPECT_EQ(ta->python_stack[i].function, tb->python_stack[i].function);
      EXPECT_EQ(ta->python_stack[i].line, tb->python_stack[i].line);
    }
  }
  std::filesystem::remove_all(dir);
}

// From 3.14 threading.Lock and RLock are PyMutexes: a waiter parks on a
// semaphore of its own, and the lock is read from the interpreter's wait
// entry beside it; an RLock names its owner. Before 3.14 there is none.
TEST_P(PythonStacks, ThreadsParkedOnALockNameIt) {
  HANGTRACE_REQUIRE_BPF();
  Workload w({GetParam().path, "-u", script_path("lock_waits.py")});
  auto f = numeric_fields<uint64_t>(w.wait_for_line("READY"));
  ASSERT_EQ(static_cast<int>(f["pid"]), w.pid()) << "no READY line";
  ASSERT_EQ(wait_until_blocked(w.pid()), "");
  auto snap = collect_snapshot(w.pid(), fast_options());
  ASSERT_TRUE(snap.ok()) << snap.error();
  const ProcessInfo* p = snap->process(w.pid());
  ASSERT_TRUE(p);
  const ThreadInfo* lock_waiter = p->thread(static_cast<int>(f["lock_tid"]));
  const ThreadInfo* rlock_waiter = p->thread(static_cast<int>(f["rlock_tid"]));
  ASSERT_TRUE(lock_waiter && rlock_waiter);
  if (f["py_minor"] < 14) {
    EXPECT_FALSE(lock_waiter->python_lock);
    EXPECT_FALSE(rlock_waiter->python_lock);
    return;
  }
  ASSERT_TRUE(lock_waiter->python_lock) << describe(*lock_waiter);
  EXPECT_EQ(lock_waiter->python_lock->kind, "threading.Lock");
  EXPECT_EQ(lock_waiter->python_lock->object, f["lock_id"]);
  EXPECT_EQ(lock_waiter->python_lock->owner_tid, 0);
  ASSERT_TRUE(rlock_waiter->python_lock) << describe(*rlock_waiter);
  EXPECT_EQ(rlock_waiter->python_lock->kind, "threading.RLock");
  EXPECT_EQ(rlock_waiter->python_lock->object, f["rlock_id"]);
  EXPECT_EQ(rlock_waiter->python_lock->owner_tid, static_cast<int>(f["main_tid"]));
  // In the report each waits on its lock, the RLock held by the main thread.
  HangtraceRun run = run_hangtrace(w.pid());
  ASSERT_FALSE(run.report.is_null()) << run.dump();
  const std::string text = run.report.dump();
  EXPECT_NE(text.find(fmt::format("threading.Lock {:#x}", f["lock_id"])), std::string::npos) << run.dump();
  EXPECT_NE(text.find(fmt::format("threading.RLock {:#x}", f["rlock_id"])), std::string::npos) << run.dump();
  EXPECT_NE(text.find(fmt::format("held by TID {}", f["main_tid"])), std::string::npos) << run.dump();
}

// The asyncio tasks of asyncio_tasks.py read from outside (3.11+: 3.14's
// own table, the asyncio module's registries before): names, coroutine
// frames at known lines, the awaited-by graph; and the report names the
// cycle alpha -> beta -> alpha and the future nothing refers to, not the one
// a global keeps, and no dead peer for the loop's own wake-up socketpair.
// Before 3.11: no tasks, no asyncio finding.
TEST_P(PythonStacks, AsyncioTasksStuckOnEachOtherAreNamed) {
  HANGTRACE_REQUIRE_BPF();
  Workload w({GetParam().path, "-u", script_path("asyncio_tasks.py")});
  auto f = numeric_fields<int>(w.wait_for_line("READY"));
  ASSERT_EQ(f["pid"], w.pid()) << "no READY line";
  ASSERT_EQ(wait_until_blocked(w.pid()), "");
  auto snap = collect_snapshot(w.pid(), fast_options());
  ASSERT_TRUE(snap.ok()) << snap.error();
  const ProcessInfo* p = snap->process(w.pid());
  ASSERT_TRUE(p);
  HangtraceRun run = run_hangtrace(w.pid());
  ASSERT_FALSE(run.report.is_null()) << run.dump();
  if (f["py_minor"] < 11) {
    EXPECT_TRUE(p->asyncio_tasks.empty());
    EXPECT_TRUE(run.findings("asyncio-cycle").empty()) << run.dump();
    return;
  }
  EXPECT_EQ(p->asyncio_error, "");
  EXPECT_EQ(p->asyncio_tasks.size(), static_cast<size_t>(f["tasks"]));
  std::map<std::string, const AsyncioTask*> by_name;
  for (const auto& t : p->asyncio_tasks) by_name[t.name] = &t;
  for (const char* name :
       {"alpha", "beta", "orphan", "held", "parent", "child-1", "child-2", "group", "member-1", "member-2"})
    ASSERT_TRUE(by_name.count(name)) << name << " not among " << p->asyncio_tasks.size() << " tasks";
  const AsyncioTask& alpha = *by_name["alpha"];
  const AsyncioTask& beta = *by_name["beta"];
  EXPECT_EQ(alpha.tid, f["tid"]);
  ASSERT_FALSE(alpha.coroutine_stack.empty());
  EXPECT_EQ(alpha.coroutine_stack[0].function, "alpha");
  EXPECT_EQ(alpha.coroutine_stack[0].line, f["alpha_line"]);
  EXPECT_EQ(alpha.awaits, beta.address);
  EXPECT_EQ(beta.awaits, alpha.address);
  EXPECT_NE(std::find(alpha.awaited_by.begin(), alpha.awaited_by.end(), beta.address),
            alpha.awaited_by.end());
  const AsyncioTask& orphan = *by_name["orphan"];
  ASSERT_FALSE(orphan.coroutine_stack.empty());
  EXPECT_EQ(orphan.coroutine_stack[0].line, f["orphan_line"]);
  EXPECT_EQ(orphan.awaits_type, "_asyncio.Future");
  // fut_waiter, the FutureIter on the stack, the local `fut`; the held one
  // has a fourth, the global list's.
  EXPECT_EQ(orphan.awaits_refcount, 3);
  EXPECT_EQ(orphan.awaits_own_refs, 3);
  EXPECT_EQ(by_name["held"]->awaits_refcount, 4);
  EXPECT_EQ(by_name["held"]->awaits_own_refs, 3);
  // The parent awaits the gather's future; 3.14 records the parent task as
  // each child's awaiter.
  EXPECT_EQ(by_name["parent"]->awaits_type, "_GatheringFuture");
  EXPECT_EQ(by_name["child-1"]->awaited_by, std::vector<uint64_t>{by_name["parent"]->address});
  // A TaskGroup's tasks are awaited by the task the group belongs to.
  EXPECT_EQ(by_name["member-2"]->awaited_by, std::vector<uint64_t>{by_name["group"]->address});
  for (const auto& t : p->asyncio_tasks) EXPECT_EQ(t.tid, f["tid"]) << t.name;
  const ThreadInfo* loop = p->thread(f["tid"]);
  ASSERT_TRUE(loop);
  EXPECT_NE(loop->asyncio_loop, 0u);
  EXPECT_EQ(loop->asyncio_running_task, 0u);  // idle in its selector
  EXPECT_TRUE(run.findings("dead-peer").empty()) << run.dump();

  auto cycles = run.findings("asyncio-cycle");
  ASSERT_EQ(cycles.size(), 1u) << run.dump();
  const std::string cycle = cycles[0]["summary"].get<std::string>();
  EXPECT_NE(cycle.find("task alpha"), std::string::npos) << cycle;
  EXPECT_NE(cycle.find("task beta"), std::string::npos) << cycle;
  auto orphans = run.findings("asyncio-orphan-future");
  ASSERT_EQ(orphans.size(), 1u) << run.dump();
  EXPECT_NE(orphans[0]["summary"].get<std::string>().find("task orphan"), std::string::npos) << run.dump();
}

// A coroutine that makes a blocking call holds the loop: the loop's thread
// sleeps inside a running task, and no other task runs.
TEST_P(PythonStacks, AnEventLoopBlockedInASynchronousCallIsNamed) {
  HANGTRACE_REQUIRE_BPF();
  Workload w({GetParam().path, "-u", script_path("asyncio_tasks.py"), "--block"});
  auto f = numeric_fields<int>(w.wait_for_line("READY"));
  ASSERT_EQ(f["pid"], w.pid()) << "no READY line";
  if (f["py_minor"] < 11) GTEST_SKIP() << "asyncio tasks are read from CPython 3.11";
  ASSERT_EQ(wait_until_blocked(w.pid()), "");
  // The loop's thread must have slept past --stall-after: each run reads
  // how long it has, until one says so (bounded).
  std::vector<nlohmann::json> blocked;
  HangtraceRun run;
  for (int attempt = 0; attempt < 20 && blocked.empty(); ++attempt) {
    run = run_hangtrace(w.pid(), {"--stall-after", "0.2"});
    blocked = run.findings("asyncio-loop-blocked");
  }
  ASSERT_EQ(blocked.size(), 1u) << run.dump();
  const std::string summary = blocked[0]["summary"].get<std::string>();
  EXPECT_NE(summary.find("inside task Task-1"), std::string::npos) << summary;
  EXPECT_NE(summary.find(fmt::format("{} other tasks", f["tasks"] - 1)), std::string::npos) << summary;
}

// torch.multiprocessing.spawn's child index, the `i` of _wrap(fn, i, ...),
// read from the frame's locals (spawn_index.py: a module of spawn.py's path
// and signature, called in two threads), and the process numbered by it.
TEST_P(PythonStacks, TheSpawnIndexIsReadFromTheWrapFrame) {
  HANGTRACE_REQUIRE_BPF();
  Workload w({GetParam().path, "-u", script_path("spawn_index.py")});
  auto f = numeric_fields<int>(w.wait_for_line("READY"));
  ASSERT_EQ(f["pid"], w.pid()) << "no READY line";
  ASSERT_EQ(wait_until_blocked(w.pid()), "");
  auto snap = collect_snapshot(w.pid(), fast_options());
  ASSERT_TRUE(snap.ok()) << snap.error();
  const ProcessInfo* p = snap->process(w.pid());
  ASSERT_TRUE(p);
  auto wrap_argument = [](const ThreadInfo& t) -> std::optional<int64_t> {
    std::optional<int64_t> found;
    int wraps = 0;
    for (const auto& frame : t.python_stack) {
      if (frame.function == "_wrap" && ends_with(frame.file, "/torch/multiprocessing/spawn.py")) {
        ++wraps;
        found = frame.argument;
      } else {
        EXPECT_FALSE(frame.argument) << frame.function << " has no argument read\n" << describe(t);
      }
    }
    EXPECT_EQ(wraps, 1) << describe(t);
    return found;
  };
  const ThreadInfo* main = p->thread(f["main_tid"]);
  const ThreadInfo* other = p->thread(f["thread_tid"]);
  ASSERT_TRUE(main && other);
  EXPECT_EQ(wrap_argument(*main), 3) << describe(*main);
  EXPECT_EQ(wrap_argument(*other), (int64_t{1} << 40) + 3) << describe(*other);
  // No TCP connection leaves the host: the index is its rank too. The
  // other thread's index does not fit a rank.
  EXPECT_EQ(p->rank, 3);
  EXPECT_EQ(p->local_rank, 3);
  EXPECT_EQ(p->rank_source, kSpawnIndexSource);
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
