// asyncio-cycle, asyncio-orphan-future and asyncio-loop-blocked on
// hand-built snapshots of a CPython 3.14 process, and threads parked on one
// PyMutex meeting in one lock node of the wait-for graph.
#include <gtest/gtest.h>

#include "frames.h"
#include "hangtrace/analysis.h"
#include "hangtrace/snapshot_json.h"
#include "snapshot_builder.h"

namespace hangtrace {
namespace {

using testing::of_kind;
using testing::py;
using testing::SnapshotBuilder;

AsyncioTask task(uint64_t address, const std::string& name, uint64_t awaits, std::vector<uint64_t> awaited_by,
                 int line) {
  AsyncioTask t;
  t.address = address;
  t.name = name;
  t.tid = 300;
  t.awaits = awaits;
  t.awaits_type = "_asyncio.Task";
  t.awaited_by = std::move(awaited_by);
  t.coroutine_stack = {py(name, "/w/tasks.py", line)};
  return t;
}

// Python 300, its one thread idle in the loop's epoll_wait.
SnapshotBuilder idle_loop() {
  SnapshotBuilder b(300);
  ProcessInfo& p = b.proc(300, 1, ProcessRole::Target);
  p.is_python = true;
  p.python_interpreter = "CPython 3.14.7";
  ThreadInfo& t = b.thread(300, 300, 'S', 30.0);
  testing::in_syscall(t, HT_NR_epoll_wait, {4, 0x7f0000, 1, 3600000});
  t.asyncio_loop = 0x7000;
  return b;
}

TEST(AsyncioRules, TasksAwaitingEachOtherThroughAGatherAreACycle) {
  SnapshotBuilder b = idle_loop();
  ProcessInfo& p = *b.find(300);
  // a awaits gather future G of child c; c awaits a. 3.14 records a as c's awaiter.
  AsyncioTask a = task(0xa0, "alpha", 0x90, {}, 10);
  a.awaits_type = "_GatheringFuture";
  AsyncioTask c = task(0xc0, "child", 0xa0, {0xa0}, 20);
  p.asyncio_tasks = {a, c, task(0xd0, "bystander", 0, {}, 30)};
  Diagnosis d = diagnose(b.s);
  auto cycles = of_kind(d, FindingKind::AsyncioCycle);
  ASSERT_EQ(cycles.size(), 1u);
  EXPECT_EQ(cycles[0]->severity, Severity::Critical);
  EXPECT_NE(cycles[0]->summary.find("task alpha (0xa0) -> task child (0xc0) -> task alpha (0xa0)"),
            std::string::npos)
      << cycles[0]->summary;
  EXPECT_EQ(cycles[0]->tids, std::vector<int>{300});
  EXPECT_EQ(d.verdict.status, "hang");
  // The way to see the same graph: from outside on 3.14+, in the process before.
  EXPECT_NE(cycles[0]->advice.back().find("-m asyncio pstree PID` prints"), std::string::npos);
  p.python_interpreter = "CPython 3.12.1";
  Diagnosis d312 = diagnose(b.s);  // of_kind points into it: kept alive
  auto on_312 = of_kind(d312, FindingKind::AsyncioCycle);
  ASSERT_EQ(on_312.size(), 1u);
  EXPECT_NE(on_312[0]->advice.back().find("asyncio.all_tasks()"), std::string::npos);
  // Through the snapshot's JSON and back, the same.
  auto reloaded = snapshot_from_json(snapshot_to_json(b.s));
  ASSERT_TRUE(reloaded.ok()) << reloaded.error();
  EXPECT_EQ(of_kind(diagnose(*reloaded), FindingKind::AsyncioCycle).size(), 1u);
}

// A single-threaded process reading one end of a socketpair whose other end
// it holds itself: a dead peer "held only by the waiting process itself";
// unless the thread runs an asyncio loop, for which that socketpair is its
// own wake-up channel (call_soon_threadsafe, signals), not a peer.
TEST(AsyncioRules, ALoopsOwnWakeUpSocketpairIsNoDeadPeer) {
  auto reading_own_socketpair = [](bool runs_loop) {
    SnapshotBuilder b(300);
    b.proc(300, 1, ProcessRole::Target);
    ThreadInfo& t = b.thread(300, 300, 'S', 30.0);
    testing::in_syscall(t, HT_NR_recvfrom, {4, 0x7f0000, 4096});
    if (runs_loop) t.asyncio_loop = 0x7000;
    b.fd(300, 4, FdKind::Socket, 61);
    b.fd(300, 5, FdKind::Socket, 62);
    b.s.sockets.push_back({61, 0, "unix", "CONNECTED", "", "", 0, 0, 62, true});
    b.s.sockets.push_back({62, 0, "unix", "CONNECTED", "", "", 0, 0, 61, true});
    return diagnose(b.s);
  };
  Diagnosis plain = reading_own_socketpair(false);
  auto dead = of_kind(plain, FindingKind::DeadPeer);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_NE(dead[0]->summary.find("held only by the waiting process itself"), std::string::npos)
      << dead[0]->summary;
  EXPECT_TRUE(of_kind(reading_own_socketpair(true), FindingKind::DeadPeer).empty());
}

TEST(AsyncioRules, AFutureOnlyItsAwaiterRefersToIsOrphaned) {
  SnapshotBuilder b = idle_loop();
  ProcessInfo& p = *b.find(300);
  AsyncioTask lost = task(0xa0, "lost", 0xf0, {}, 10);
  lost.awaits_type = "_asyncio.Future";
  lost.awaits_refcount = 3;
  lost.awaits_own_refs = 3;
  AsyncioTask kept = task(0xb0, "kept", 0xf8, {}, 20);
  kept.awaits_type = "_asyncio.Future";
  kept.awaits_refcount = 4;  // a list elsewhere holds it
  kept.awaits_own_refs = 3;
  p.asyncio_tasks = {lost, kept};
  Diagnosis d = diagnose(b.s);
  auto orphans = of_kind(d, FindingKind::AsyncioOrphanFuture);
  ASSERT_EQ(orphans.size(), 1u);
  EXPECT_NE(orphans[0]->summary.find("task lost (0xa0)"), std::string::npos) << orphans[0]->summary;
  EXPECT_TRUE(of_kind(d, FindingKind::AsyncioCycle).empty());
}

TEST(AsyncioRules, ALoopBlockedInsideARunningTaskPastStallAfter) {
  SnapshotBuilder b = idle_loop();
  ProcessInfo& p = *b.find(300);
  ThreadInfo& t = p.threads.front();
  testing::in_syscall(t, HT_NR_clock_nanosleep, {1, 0, 0x7ffe0000, 0});
  t.asyncio_running_task = 0xa0;
  p.asyncio_tasks = {task(0xa0, "Task-1", 0, {}, 5), task(0xb0, "worker", 0, {}, 6)};
  AnalysisOptions opt;
  opt.stall_after_s = 10;
  Diagnosis d = diagnose(b.s, opt);  // of_kind points into it: kept alive
  auto blocked = of_kind(d, FindingKind::AsyncioLoopBlocked);
  ASSERT_EQ(blocked.size(), 1u);
  EXPECT_NE(blocked[0]->summary.find("inside task Task-1 (0xa0), so none of the loop's 1 other task can run"),
            std::string::npos)
      << blocked[0]->summary;
  // Not yet past --stall-after: no finding.
  opt.stall_after_s = 60;
  EXPECT_TRUE(of_kind(diagnose(b.s, opt), FindingKind::AsyncioLoopBlocked).empty());
}

TEST(PythonLocks, WaitersOfOnePyMutexMeetInOneLockNode) {
  SnapshotBuilder b(400);
  ProcessInfo& p = b.proc(400, 1, ProcessRole::Target);
  p.is_python = true;
  // Each waiter sleeps on a semaphore of its own, on its own stack.
  for (int tid : {401, 402}) {
    ThreadInfo& t = b.futex_wait(400, tid, 0x7ffd0000ull + static_cast<uint64_t>(tid) * 0x1000, false);
    PythonLockWait lock;
    lock.mutex = 0x7f0010;
    lock.kind = "threading.Lock";
    lock.object = 0x7f0000;
    lock.object_type = "_thread.lock";
    t.python_lock = lock;
  }
  WaitGraph g = build_wait_graph(b.s);
  const std::string id = "pylock:400:0x7f0010";
  ASSERT_TRUE(g.objects.count(id));
  const WaitObject& o = g.objects.at(id);
  EXPECT_EQ(o.label, "threading.Lock 0x7f0000 in 400 (" + p.comm + ")");
  EXPECT_EQ(o.waiters.size(), 2u);
  EXPECT_EQ(g.threads.at(401).summary, "waits on " + o.label);
}

}  // namespace
}  // namespace hangtrace
