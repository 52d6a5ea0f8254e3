// The GIL as a wait object and the gil-held rule on hand-built snapshots: a
// thread blocked in read() on a pipe while it holds the GIL, the main thread
// and another thread waiting for the GIL (take_gil's 5 ms condition waits);
// a healthy job handing the GIL around; and GIL waits recognised from the
// native stack when the snapshot has no GIL addresses.
#include <gtest/gtest.h>

#include "frames.h"
#include "hangtrace/analysis.h"
#include "hangtrace/snapshot_json.h"
#include "snapshot_builder.h"

namespace hangtrace {
namespace {

using testing::native;
using testing::of_kind;
using testing::py;
using testing::SnapshotBuilder;

constexpr uint64_t kGil = 0xa5b740;       // _PyRuntime.ceval.gil
constexpr uint64_t kGilCond = kGil + 48;  // the futex word of gil->cond
constexpr uint64_t kPipe = 7000;
constexpr const char* kPython = "/usr/bin/python3.11";

// A thread in take_gil: a condition wait on gil->cond with the 5 ms interval.
ThreadInfo& gil_waiter(SnapshotBuilder& b, int pid, int tid) {
  return b.futex_wait(pid, tid, kGilCond, false, {}, 0.005, 0.004);
}

// Python 200 (its GIL state at kGil) whose main thread 200 and thread 201
// wait for the GIL.
SnapshotBuilder python_with_gil_waiters() {
  SnapshotBuilder b(200);
  ProcessInfo& p = b.proc(200, 1, ProcessRole::Target);
  p.is_python = true;
  p.python_gils = {kGil};
  gil_waiter(b, 200, 200);
  gil_waiter(b, 200, 201);
  return b;
}

// python_with_gil_waiters, and thread 202 holds the GIL and reads
// pipe:[7000] for `held_s`. The write end is held by a `sleep` child 210
// (`writer_is_child`) or only by process 200 itself.
SnapshotBuilder gil_held(double held_s, bool writer_is_child = true) {
  SnapshotBuilder b = python_with_gil_waiters();
  ThreadInfo& h = b.thread(200, 202, 'S', held_s);
  testing::in_syscall(h, HT_NR_read, {3, 0x7f0000, 1});
  h.holds_gil = true;
  h.python_stack = {py("holder", "/w/gil_held_read.py", 61),
                    py("Thread.run", "/usr/lib/python3.11/threading.py", 975)};
  h.native_stack = {native("read", "/lib/x86_64-linux-gnu/libc.so.6", 0x7f01, 0x101, ""),
                    native("ffi_call", "/lib/x86_64-linux-gnu/libffi.so.8", 0x7f02, 0x202, ""),
                    native("_PyEval_EvalFrameDefault", kPython, 0x52b9e0, 0x12b9e0, "")};
  b.fd(200, 3, FdKind::Pipe, kPipe, O_RDONLY);
  if (writer_is_child) {
    b.proc(210, 200, ProcessRole::Descendant, "sleep");
    b.thread(210, 210, 'S');
    testing::in_syscall(b.find(210)->threads.back(), HT_NR_clock_nanosleep, {0, 0, 0x7ffd0000, 0});
    b.fd(210, 1, FdKind::Pipe, kPipe, O_WRONLY);
  } else {
    b.fd(200, 4, FdKind::Pipe, kPipe, O_WRONLY);
  }
  return b;
}

bool chain_has(const Finding& f, const std::string& from_part, const std::string& edge,
               const std::string& to_part) {
  for (const auto& s : f.chain)
    if (s.edge == edge && s.from.find(from_part) != std::string::npos &&
        s.to.find(to_part) != std::string::npos)
      return true;
  return false;
}

std::string chain_text(const Finding& f) {
  std::string out;
  for (const auto& s : f.chain) out += s.from + " --" + s.edge + "--> " + s.to + "\n";
  return out;
}

TEST(GilGraph, GilWaitersWaitOnTheGilReleasedByItsHolder) {
  Diagnosis d = diagnose(gil_held(30).s);
  const WaitObject& gil = d.graph.objects.at("gil:200");
  EXPECT_EQ(gil.kind, ObjectKind::Gil);
  EXPECT_EQ(gil.label, "GIL of 200 (python3)");
  EXPECT_EQ(gil.waiters, (std::vector<int>{200, 201}));
  EXPECT_EQ(gil.releasers, (std::vector<int>{202}));
  EXPECT_EQ(gil.owner_tid, 202);
  EXPECT_FALSE(gil.ready);
  // The 5 ms timeout is take_gil's retry, not a wait that may end by itself.
  for (int tid : {200, 201}) {
    const ThreadWait& w = d.graph.threads.at(tid);
    EXPECT_EQ(w.activity, Activity::Blocked) << tid;
    EXPECT_EQ(w.objects, (std::vector<std::string>{"gil:200"}));
    EXPECT_NE(w.summary.find("held by TID 202"), std::string::npos) << w.summary;
    EXPECT_NE(w.summary.find("take_gil"), std::string::npos) << w.summary;
  }
  EXPECT_EQ(d.graph.depends_on(200), (std::vector<int>{202}));
}

TEST(GilHeldRule, AHolderBlockedOnAPipePastTheStallThresholdIsCritical) {
  Diagnosis d = diagnose(gil_held(30).s);
  auto found = of_kind(d, FindingKind::GilHeld);
  ASSERT_EQ(found.size(), 1u);
  const Finding& f = *found.front();
  EXPECT_EQ(f.severity, Severity::Critical);
  EXPECT_EQ(f.pids, (std::vector<int>{200}));
  EXPECT_EQ(f.tids, (std::vector<int>{202, 200, 201}));
  EXPECT_EQ(f.details["holder_tid"], 202);
  EXPECT_EQ(f.details["waiter_tids"], (std::vector<int>{200, 201}));
  EXPECT_TRUE(f.details["holder_wait_can_end"].get<bool>());
  // main -> GIL -> holder -> pipe -> the writer.
  EXPECT_TRUE(chain_has(f, "main 200", "waits on", "GIL of 200")) << chain_text(f);
  EXPECT_TRUE(chain_has(f, "GIL of 200", "can be released by", "thread 202")) << chain_text(f);
  EXPECT_TRUE(chain_has(f, "thread 202", "waits on", "pipe:[7000]")) << chain_text(f);
  EXPECT_TRUE(chain_has(f, "pipe:[7000]", "can be released by", "210 (sleep)")) << chain_text(f);
  ASSERT_FALSE(f.chain.empty());
  EXPECT_EQ(f.chain.front().from, "main 200 (python3)");
  bool python = false, native_stack = false;
  for (const auto& e : f.evidence) {
    python =
        python || e.find("Python stack of the holder: holder (gil_held_read.py:61)") != std::string::npos;
    native_stack =
        native_stack || e.find("native stack of the holder: read <- ffi_call") != std::string::npos;
  }
  EXPECT_TRUE(python);
  EXPECT_TRUE(native_stack);
  std::string advice;
  for (const auto& a : f.advice) advice += a + "\n";
  EXPECT_NE(advice.find("Py_BEGIN_ALLOW_THREADS"), std::string::npos);
  EXPECT_NE(advice.find("ctypes.CDLL"), std::string::npos);
  EXPECT_NE(advice.find("process"), std::string::npos);
  EXPECT_EQ(d.findings.front().kind, FindingKind::GilHeld);
  EXPECT_EQ(d.verdict.status, "hang");
  EXPECT_NE(d.verdict.summary.find("gil-held"), std::string::npos) << d.verdict.summary;
  EXPECT_NE(d.verdict.summary.find("thread 202"), std::string::npos) << d.verdict.summary;
  EXPECT_EQ(exit_status_for(d), 2);
  // Progress stopped when the holder blocked, not at the waiters' last 5 ms retry.
  ASSERT_TRUE(d.progress_stopped);
  EXPECT_EQ(d.progress_stopped->tid, 202);
  EXPECT_NEAR(d.progress_stopped->ago_s, 30, 0.01);
}

// The gil-held finding names holder 202 and both waiters, 201 on the GIL.
void expect_both_waiters_of_the_holder(const Snapshot& s) {
  Diagnosis d = diagnose(s);
  auto held = of_kind(d, FindingKind::GilHeld);
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0]->tids, (std::vector<int>{202, 200, 201}));
  EXPECT_EQ(d.graph.threads.at(201).objects, std::vector<std::string>{"gil:200"});
}

// A waiter caught between two of take_gil's 5 ms waits (its timeout just ran
// out: runnable, the futex still its syscall) still waits for the holder.
TEST(GilHeldRule, AWaiterWokenByItsIntervalIsStillAWaiter) {
  SnapshotBuilder b = gil_held(30.0);
  ThreadInfo& woken = b.find(200)->threads[1];  // 201
  woken.state = 'R';
  woken.memory.timeout_s = -0.00025;
  expect_both_waiters_of_the_holder(b.s);
}

// /proc caught a waiter running between two waits (R, no syscall); the task
// iterator, a moment later, found it back asleep in take_gil's futex. Its
// stacks are of that instant, and so is its wait: it waits for the holder.
TEST(GilHeldRule, AWaiterProcSawRunningAndTheIteratorAsleepIsAWaiter) {
  SnapshotBuilder b = gil_held(30.0);
  ThreadInfo& caught = b.find(200)->threads[1];  // 201
  const SyscallState in_futex = caught.syscall;
  caught.state = 'R';
  caught.syscall = SyscallState{};
  caught.syscall.mode = SyscallState::Mode::Running;
  caught.memory = WaitMemory{};
  caught.cpu_ns_end = 50'000'000;  // it ran between the samples: it may be running, for all /proc says
  const Diagnosis before = diagnose(b.s);
  EXPECT_EQ(of_kind(before, FindingKind::GilHeld).front()->tids, (std::vector<int>{202, 200}));

  KernelTaskView iterator;
  iterator.state = HT_TASK_STATE_INTERRUPTIBLE;
  ASSERT_TRUE(adopt_iterator_syscall(caught, iterator, in_futex.nr, in_futex.args));
  EXPECT_EQ(caught.state, 'S');
  expect_both_waiters_of_the_holder(b.s);
}

// Under load a waiter whose timed wait ran out waits in the run queue: /proc
// reads it R, in no syscall, and the iterator too found it runnable. With no
// CPU used over the window and the holder blocked in a syscall, it can run
// neither Python nor C code: it waits for the GIL.
TEST(GilHeldRule, AWaiterQueuedForACpuUsingNoCpuIsAWaiter) {
  SnapshotBuilder b = gil_held(30.0);
  ThreadInfo& queued = b.find(200)->threads[1];  // 201
  queued.state = 'R';
  queued.syscall = SyscallState{};
  queued.syscall.mode = SyscallState::Mode::Running;
  queued.memory = WaitMemory{};
  expect_both_waiters_of_the_holder(b.s);
  EXPECT_EQ(diagnose(b.s).graph.threads.at(201).activity, Activity::Blocked);
  // One that used CPU may be computing without the GIL: running.
  queued.cpu_ns_end = 50'000'000;
  EXPECT_EQ(diagnose(b.s).graph.threads.at(201).activity, Activity::Running);
}

// GIL waiters wake every switch interval by design: having run after their
// wait was read does not make them able to move on.
TEST(GilHeldRule, WaitersWokenByTheirIntervalStillCannotMoveOn) {
  SnapshotBuilder b = gil_held(2, false);
  for (auto& t : b.find(200)->threads)
    if (!t.holds_gil) {
      t.runs_at_read = 100;
      t.runs_end = 140;
    }
  Diagnosis d = diagnose(b.s);
  auto found = of_kind(d, FindingKind::GilHeld);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found.front()->confidence, Confidence::Certain);
  EXPECT_TRUE(d.graph.threads.at(200).woke);
}

// /proc's reading stands when the iterator saw nothing else: the thread on a
// CPU or runnable, no syscall, or /proc already saw it in one.
TEST(GilHeldRule, ProcsReadingStandsUnlessTheIteratorFoundTheThreadAsleep) {
  const uint64_t args[6] = {kGilCond, 0x189, 0, 0, 0, 0};
  ThreadInfo running;
  running.state = 'R';
  running.syscall.mode = SyscallState::Mode::Running;
  KernelTaskView on_cpu;
  on_cpu.on_cpu = true;
  on_cpu.state = HT_TASK_STATE_INTERRUPTIBLE;
  EXPECT_FALSE(adopt_iterator_syscall(running, on_cpu, HT_NR_futex, args));
  KernelTaskView runnable;  // TASK_RUNNING, off CPU: preempted
  EXPECT_FALSE(adopt_iterator_syscall(running, runnable, HT_NR_futex, args));
  KernelTaskView asleep;
  asleep.state = HT_TASK_STATE_UNINTERRUPTIBLE;
  EXPECT_FALSE(adopt_iterator_syscall(running, asleep, -1, args));
  EXPECT_EQ(running.state, 'R');
  EXPECT_EQ(running.syscall.mode, SyscallState::Mode::Running);

  ThreadInfo reading;  // /proc: in read(); the iterator's futex is a later wait it need not take
  reading.state = 'S';
  testing::in_syscall(reading, HT_NR_read, {3, 0x7f0000, 1});
  EXPECT_FALSE(adopt_iterator_syscall(reading, asleep, HT_NR_futex, args));
  EXPECT_EQ(reading.syscall.nr, HT_NR_read);

  ThreadInfo unreadable;  // /proc said nothing: the registers are all there is
  unreadable.state = 'S';
  EXPECT_TRUE(adopt_iterator_syscall(unreadable, runnable, HT_NR_futex, args));
  EXPECT_EQ(unreadable.syscall.nr, HT_NR_futex);
  EXPECT_EQ(unreadable.state, 'S');

  EXPECT_TRUE(adopt_iterator_syscall(running, asleep, HT_NR_futex, args));
  EXPECT_EQ(running.state, 'D');
  EXPECT_EQ(running.syscall.args[0], kGilCond);
}

TEST(GilHeldRule, AHolderWhoseWaitCanNeverEndIsCriticalAndCertainAtOnce) {
  // Nobody but the GIL waiters could write: they cannot run without the GIL.
  Diagnosis d = diagnose(gil_held(2, false).s);
  auto found = of_kind(d, FindingKind::GilHeld);
  ASSERT_EQ(found.size(), 1u);
  const Finding& f = *found.front();
  EXPECT_EQ(f.severity, Severity::Critical);
  EXPECT_EQ(f.confidence, Confidence::Certain);
  EXPECT_FALSE(f.details["holder_wait_can_end"].get<bool>());
  EXPECT_NE(f.summary.find("can never end"), std::string::npos) << f.summary;
  EXPECT_EQ(d.findings.front().kind, FindingKind::GilHeld) << d.verdict.summary;
  EXPECT_EQ(exit_status_for(d), 2);
}

TEST(GilHeldRule, AShortHolderWaitIsAWarning) {
  Diagnosis d = diagnose(gil_held(3).s);
  auto found = of_kind(d, FindingKind::GilHeld);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found.front()->severity, Severity::Warning);
  EXPECT_EQ(exit_status_for(d), 0);
  AnalysisOptions quick;
  quick.stall_after_s = 2;
  EXPECT_EQ(exit_status_for(diagnose(gil_held(3).s, quick)), 2);
}

TEST(GilHeldRule, AHealthyJobHandingTheGilAroundHasNoFinding) {
  // The holder computes; the others wait their turn in take_gil.
  SnapshotBuilder b = python_with_gil_waiters();
  b.running(200, 202).holds_gil = true;
  Diagnosis d = diagnose(b.s);
  EXPECT_TRUE(d.findings.empty()) << d.findings.front().summary;
  EXPECT_EQ(d.verdict.status, "ok");
  EXPECT_EQ(exit_status_for(d), 0);
  // A holder in a short call (a write, a page fault) is no finding either.
  Diagnosis brief = diagnose(gil_held(0.2).s);
  EXPECT_TRUE(of_kind(brief, FindingKind::GilHeld).empty());
  EXPECT_EQ(exit_status_for(brief), 0);
}

TEST(GilHeldRule, AFreeGilIsReady) {
  // Nobody held it when it was read: the next waiter takes it.
  SnapshotBuilder b = gil_held(30);
  b.find(200)->threads.back().holds_gil = false;
  Diagnosis d = diagnose(b.s);
  EXPECT_TRUE(d.graph.objects.at("gil:200").ready);
  EXPECT_TRUE(of_kind(d, FindingKind::GilHeld).empty());
}

// Native stacks as unwound from a stripped /usr/bin/python3 (take_gil has no
// name) and from builds with symbols.
std::vector<UserFrame> cond_wait_under(std::vector<UserFrame> outer) {
  std::vector<UserFrame> s = {native("__futex_abstimed_wait_common", "/lib/libc.so.6", 1, 1, ""),
                              native("___pthread_cond_timedwait64", "/lib/libc.so.6", 2, 2, "")};
  s.insert(s.end(), outer.begin(), outer.end());
  return s;
}

bool recognised(std::vector<UserFrame> native_stack) {
  SnapshotBuilder b(200);
  ProcessInfo& p = b.proc(200, 1, ProcessRole::Target);
  p.is_python = true;  // no python_gils: the stacks decide
  gil_waiter(b, 200, 200).native_stack = std::move(native_stack);
  return build_wait_graph(b.s).threads.at(200).objects == std::vector<std::string>{"gil:200"};
}

TEST(GilGraph, GilWaitsAreRecognisedFromNativeStacksWithoutGilAddresses) {
  EXPECT_TRUE(recognised(cond_wait_under({native("take_gil", kPython, 3, 3, "")})));
  EXPECT_TRUE(recognised(cond_wait_under({native("drop_gil", kPython, 3, 3, "")})));
  // Stripped take_gil, called from the eval loop's drop request handling or
  // from PyEval_RestoreThread.
  EXPECT_TRUE(recognised(cond_wait_under(
      {native("", kPython, 3, 3, ""), native("_PyEval_EvalFrameDefault", kPython, 4, 4, "")})));
  EXPECT_TRUE(recognised(
      cond_wait_under({native("", kPython, 3, 3, ""), native("PyEval_RestoreThread", kPython, 4, 4, "")})));
  // take_gil inlined into its caller (3.13's _PyThreadState_Attach).
  EXPECT_TRUE(
      recognised(cond_wait_under({native("_PyThreadState_Attach", "/lib/libpython3.13.so", 3, 3, "")})));
  // The lock-based GIL of old interpreters.
  EXPECT_TRUE(recognised({native("sem_wait", "/lib/libc.so.6", 1, 1, ""),
                          native("PyThread_acquire_lock", kPython, 2, 2, ""),
                          native("PyEval_RestoreThread", kPython, 3, 3, "")}));

  // threading.Lock.acquire: PyThread_acquire_lock_timed from _thread's frames.
  EXPECT_FALSE(
      recognised({native("do_futex_wait", "/lib/libc.so.6", 1, 1, ""),
                  native("__new_sem_wait_slow64", "/lib/libc.so.6", 2, 2, ""),
                  native("PyThread_acquire_lock_timed", kPython, 3, 3, ""), native("", kPython, 4, 4, ""),
                  native("", kPython, 5, 5, ""), native("_PyEval_EvalFrameDefault", kPython, 6, 6, "")}));
  // A C extension's own condition wait, called straight from the eval loop.
  EXPECT_FALSE(recognised(cond_wait_under({native("", "/site-packages/ext.so", 3, 3, ""),
                                           native("_PyEval_EvalFrameDefault", kPython, 4, 4, "")})));
  EXPECT_FALSE(recognised(cond_wait_under({native("worker_loop", "/site-packages/ext.so", 3, 3, "")})));
  EXPECT_FALSE(recognised({}));
}

TEST(GilGraph, OnlyFutexesInsideTheGilStateAreGilWaits) {
  SnapshotBuilder b = gil_held(30);
  b.futex_wait(200, 203, kGil + 4096, false, {}, 0.005);  // some other condition
  WaitGraph g = build_wait_graph(b.s);
  EXPECT_NE(g.threads.at(203).objects.front(), "gil:200");
  EXPECT_EQ(g.threads.at(203).activity, Activity::TimedWait);
}

TEST(GilSnapshot, GilAddressesRoundTrip) {
  Snapshot s = gil_held(30).s;
  auto back = snapshot_from_json(snapshot_to_json(s));
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(back->processes.at(0).python_gils, (std::vector<uint64_t>{kGil}));
  EXPECT_TRUE(back->process(210)->python_gils.empty());
}

}  // namespace
}  // namespace hangtrace
