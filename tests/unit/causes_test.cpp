// Findings grouped by cause (rules/causes.cpp) and the in-process knots of
// rules/pool.cpp and rules/terminal.cpp, on hand-built snapshots: a stopped
// rank explains the peer's socket waits; a thread pool waiting on itself is
// pool-self-wait with every stuck thread, not a fork-inherited lock.
#include <gtest/gtest.h>

#include <algorithm>

#include "hangtrace/analysis.h"
#include "hangtrace/report.h"
#include "frames.h"
#include "snapshot_builder.h"

namespace hangtrace {
namespace {

using testing::in_syscall;
using testing::of_kind;
using testing::py;
using testing::SnapshotBuilder;

// Rank 0 (the target, pid 100) waits in recvfrom on two sockets, one per
// thread, whose other ends rank 1 (pid 200) holds; rank 1's threads are in
// `rank1_state` ('T': stopped by a signal).
SnapshotBuilder rank_waits_on_peer(char rank1_state) {
  SnapshotBuilder b(100);
  ProcessInfo& r0 = b.proc(100, 1, ProcessRole::Target);
  r0.rank = 0;
  r0.world_size = 2;
  ProcessInfo& r1 = b.proc(200, 1, ProcessRole::Descendant);
  r1.rank = 1;
  r1.world_size = 2;
  for (int tid : {100, 101}) {
    ThreadInfo& t = b.thread(100, tid, 'S', 30.0);
    in_syscall(t, HT_NR_recvfrom, {static_cast<uint64_t>(tid - 91), 0, 1024});  // fds 9 and 10
    b.fd(100, tid - 91, FdKind::Socket, 5000 + static_cast<uint64_t>(tid - 100));
  }
  for (int tid : {200, 201}) b.thread(200, tid, rank1_state, 30.0);
  for (uint64_t i = 0; i < 2; ++i) {
    b.fd(200, static_cast<int>(20 + i), FdKind::Socket, 6000 + i);
    b.tcp_pair(5000 + i, static_cast<int>(40000 + i), 6000 + i, 29500);
  }
  return b;
}

TEST(Causes, AStoppedRankExplainsThePeersSocketWaits) {
  AnalysisOptions opt;
  opt.stall_after_s = 10;
  Diagnosis d = diagnose(rank_waits_on_peer('T').s, opt);
  ASSERT_GE(d.findings.size(), 2u);
  const Finding& root = d.findings.front();
  EXPECT_EQ(root.kind, FindingKind::Stopped);
  EXPECT_EQ(root.id, "F1");
  EXPECT_TRUE(root.caused_by.empty());
  auto waits = of_kind(d, FindingKind::NetworkWait);
  ASSERT_FALSE(waits.empty());
  for (const Finding* f : waits) EXPECT_EQ(f->caused_by, "F1") << f->summary;
  EXPECT_EQ(d.verdict.status, "hang");
  EXPECT_NE(d.verdict.summary.find("HANG (stopped"), std::string::npos) << d.verdict.summary;
  // Every finding after the root is explained by it, and ids follow the order.
  for (size_t i = 1; i < d.findings.size(); ++i) {
    EXPECT_EQ(d.findings[i].id, "F" + std::to_string(i + 1));
    EXPECT_EQ(d.findings[i].caused_by, "F1") << d.findings[i].summary;
  }
  // The stopped rank's waiting threads are the peer's two socket waits.
  EXPECT_EQ(root.details["waiting_tids"], nlohmann::json::array({100, 101}));

  // The text report says so under the verdict and collapses the group.
  Snapshot snap = rank_waits_on_peer('T').s;
  std::string text = render_text(snap, d, ReportOptions{});
  EXPECT_NE(text.find("caused by this: "), std::string::npos) << text;
  EXPECT_EQ(text.find("| caused by F1"), std::string::npos) << text;
  ReportOptions verbose;
  verbose.verbosity = 1;
  EXPECT_NE(render_text(snap, d, verbose).find("| caused by F1"), std::string::npos);
  // And JSON carries caused_by, null for the root.
  nlohmann::json j = render_json(snap, d);
  EXPECT_TRUE(j["findings"][0]["caused_by"].is_null());
  EXPECT_EQ(j["findings"][1]["caused_by"], "F1");
}

TEST(Causes, UnrelatedFindingsStayRoots) {
  // Rank 1 runs: the socket waits are findings of their own, nothing
  // explains them, and a stopped helper nobody waits on explains nothing.
  SnapshotBuilder b = rank_waits_on_peer('S');
  for (auto& t : b.find(200)->threads) t.cpu_ns_end = 50'000'000;  // runs between the samples
  b.proc(300, 100, ProcessRole::Descendant, "helper");
  b.thread(300, 300, 'T');
  Diagnosis d = diagnose(b.s);
  for (const auto& f : d.findings) EXPECT_TRUE(f.caused_by.empty()) << f.id << " " << f.summary;
  ASSERT_FALSE(of_kind(d, FindingKind::Stopped).empty());
  EXPECT_TRUE(of_kind(d, FindingKind::Stopped).front()->details["waiting_tids"].empty());
}

// A Python process whose pool threads (101..103) each run load(), which
// waits on a future of the same ThreadPoolExecutor; main (100) waits on the
// outer futures. Every wait is on a private semaphore with no owner.
SnapshotBuilder pool_waiting_on_itself(bool one_thread_idle) {
  SnapshotBuilder b(100);
  ProcessInfo& p = b.proc(100, 1, ProcessRole::Target);
  p.is_python = true;
  p.cmdline = "python3 train.py";
  const std::string base = "/usr/lib/python3.11/concurrent/futures/_base.py";
  const std::string pool = "/usr/lib/python3.11/concurrent/futures/thread.py";
  const std::string threading = "/usr/lib/python3.11/threading.py";
  ThreadInfo& main = b.futex_wait(100, 100, 0x7f0000001000, false, testing::sem_bytes(1, 128));
  main.python_stack = {py("Condition.wait", threading, 320), py("Future.result", base, 451),
                       py("<module>", "/srv/train.py", 40)};
  for (int tid : {101, 102, 103}) {
    ThreadInfo& t = b.futex_wait(100, tid, 0x7f0000002000 + 0x100 * static_cast<uint64_t>(tid - 100), false,
                                 testing::sem_bytes(1, 128));
    if (one_thread_idle && tid == 103)
      t.python_stack = {py("_worker", pool, 81), py("Thread.run", threading, 975)};
    else
      t.python_stack = {py("Condition.wait", threading, 320),
                        py("Future.result", base, 451),
                        py("load", "/srv/pipeline.py", 41),
                        py("_WorkItem.run", pool, 58),
                        py("_worker", pool, 83),
                        py("Thread.run", threading, 975)};
  }
  return b;
}

TEST(PoolRule, APoolWaitingOnItselfNamesEveryStuckThread) {
  Diagnosis d = diagnose(pool_waiting_on_itself(false).s);
  auto found = of_kind(d, FindingKind::PoolSelfWait);
  ASSERT_EQ(found.size(), 1u);
  const Finding& f = *found.front();
  EXPECT_EQ(d.findings.front().kind, FindingKind::PoolSelfWait);
  EXPECT_EQ(f.severity, Severity::Critical);
  EXPECT_EQ(f.confidence, Confidence::Certain);
  EXPECT_EQ(f.tids, (std::vector<int>{101, 102, 103, 100}));
  EXPECT_EQ(f.details["pool"], "concurrent.futures.ThreadPoolExecutor");
  EXPECT_NE(f.summary.find("all 3 threads of a concurrent.futures.ThreadPoolExecutor"), std::string::npos)
      << f.summary;
  EXPECT_NE(f.summary.find("load (pipeline.py:41)"), std::string::npos) << f.summary;
  for (const auto& a : f.advice) EXPECT_EQ(a.find("spawn"), std::string::npos) << a;
  // Not also an orphaned lock with the fork advice.
  EXPECT_TRUE(of_kind(d, FindingKind::OrphanedLock).empty());
  EXPECT_EQ(exit_status_for(d), 2);
}

TEST(PoolRule, AnIdlePoolThreadIsNoSelfWaitAndNoForkAdvice) {
  // One pool thread idles in the loop (waits for work): the pool is not
  // starved of threads. Every thread still waits on the others (a knot in
  // one process): orphaned-lock, naming all of them, with in-process advice.
  Diagnosis d = diagnose(pool_waiting_on_itself(true).s);
  EXPECT_TRUE(of_kind(d, FindingKind::PoolSelfWait).empty());
  auto orphaned = of_kind(d, FindingKind::OrphanedLock);
  ASSERT_EQ(orphaned.size(), 1u);
  std::vector<int> tids = orphaned.front()->tids;
  std::sort(tids.begin(), tids.end());
  EXPECT_EQ(tids, (std::vector<int>{100, 101, 102, 103}));
  EXPECT_FALSE(orphaned.front()->details["across_fork"].get<bool>());
  for (const auto& a : orphaned.front()->advice) EXPECT_EQ(a.find("spawn"), std::string::npos) << a;
}

TEST(PoolRule, AForkedChildsInheritedLockKeepsTheForkAdvice) {
  // A DataLoader worker (a fork of main: same command line) with one
  // thread, waiting on a private lock nobody in it holds.
  SnapshotBuilder b(100);
  ProcessInfo& main = b.proc(100, 1, ProcessRole::Target);
  main.cmdline = "python3 train.py";
  b.running(100, 100);
  ProcessInfo& worker = b.proc(200, 100, ProcessRole::Descendant);
  worker.cmdline = "python3 train.py";
  b.futex_wait(200, 200, 0x7f0000003000, false, testing::sem_bytes(1, 128));
  Diagnosis d = diagnose(b.s);
  auto orphaned = of_kind(d, FindingKind::OrphanedLock);
  ASSERT_EQ(orphaned.size(), 1u);
  EXPECT_TRUE(orphaned.front()->details["across_fork"].get<bool>());
  EXPECT_NE(orphaned.front()->advice.front().find("spawn"), std::string::npos);

  // The same worker with a helper thread it started after the fork, parked
  // on its own event: a closed process, still the fork's lock.
  b.futex_wait(200, 201, 0x7f0000004000, false, testing::sem_bytes(1, 128));
  Diagnosis closed = diagnose(b.s);
  orphaned = of_kind(closed, FindingKind::OrphanedLock);
  ASSERT_FALSE(orphaned.empty());
  for (const Finding* f : orphaned) {
    EXPECT_TRUE(f->details["across_fork"].get<bool>()) << f->summary;
    EXPECT_NE(f->advice.front().find("spawn"), std::string::npos);
  }
}

}  // namespace
}  // namespace hangtrace
