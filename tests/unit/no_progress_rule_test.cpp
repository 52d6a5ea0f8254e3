// The floor under the rules (no-progress): a job whose main thread has not
// moved for --stall-after is never called healthy; what the releasers of its
// wait do decides how sure that is -- and a wait on something moving, or a
// main thread that ran recently, is progress, which the verdict says.
#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>

#include "hangtrace/analysis.h"
#include "snapshot_builder.h"

namespace hangtrace {
namespace {

using testing::of_kind;
using testing::SnapshotBuilder;

constexpr uint64_t kPipe = 5000;

// main 100 blocked `blocked_s` in write(1) on a full pipe whose read end only
// peer 300 (the log shipper) holds; 300's thread is in `state`, doing
// `reader_nr` (a read of the pipe itself, or something else).
SnapshotBuilder stdout_pipe(double blocked_s, char state, int64_t reader_nr,
                            std::initializer_list<uint64_t> args, double reader_blocked_s = 120.0) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  ThreadInfo& t = b.thread(100, 100, 'S', blocked_s);
  testing::in_syscall(t, HT_NR_write, {1, 0, 65536});
  b.fd(100, 1, FdKind::Pipe, kPipe, O_WRONLY, 65536);
  b.proc(300, 1, ProcessRole::Peer, "log-shipper");
  ThreadInfo& r = b.thread(300, 300, state, reader_blocked_s);
  if (reader_nr >= 0) testing::in_syscall(r, reader_nr, args);
  b.fd(300, 0, FdKind::Pipe, kPipe, O_RDONLY, 65536);
  return b;
}

TEST(NoProgress, AReaderAsleepElsewhereDoesNotReadTheFullPipe) {
  Diagnosis d = diagnose(stdout_pipe(42.0, 'S', HT_NR_clock_nanosleep, {0, 0, 0x7000, 0}).s);
  auto found = of_kind(d, FindingKind::NoProgress);
  ASSERT_EQ(found.size(), 1u) << d.verdict.summary;
  const Finding& f = *found.front();
  EXPECT_EQ(f.severity, Severity::Critical);
  EXPECT_EQ(f.confidence, Confidence::Probable);
  EXPECT_NE(f.summary.find("main 100 (python3) has not moved for 42.0 s"), std::string::npos) << f.summary;
  EXPECT_NE(f.summary.find("writes on stdout (pipe:[5000]"), std::string::npos) << f.summary;
  EXPECT_NE(f.summary.find("peer 300 (log-shipper) does not read or write it"), std::string::npos)
      << f.summary;
  EXPECT_FALSE(f.details["releasers"][0]["attending"].get<bool>());
  EXPECT_EQ(d.verdict.status, "hang");
  EXPECT_EQ(exit_status_for(d), 2);
}

TEST(NoProgress, AStoppedReaderOutsideTheJobIsTheStoppedFinding) {
  Diagnosis d = diagnose(stdout_pipe(42.0, 'T', -1, {}).s);
  ASSERT_FALSE(d.findings.empty());
  const Finding& f = d.findings.front();
  EXPECT_EQ(f.kind, FindingKind::Stopped) << d.verdict.summary;
  EXPECT_EQ(f.pids, (std::vector<int>{300}));
  EXPECT_NE(f.summary.find("peer 300 (log-shipper)"), std::string::npos) << f.summary;
  EXPECT_NE(f.advice.front().find("kill -CONT 300"), std::string::npos);
  // Covered by it: no second finding for the same wait.
  EXPECT_TRUE(of_kind(d, FindingKind::NoProgress).empty());
  EXPECT_EQ(exit_status_for(d), 2);
}

TEST(NoProgress, AStoppedPeerTheJobDoesNotWaitOnIsNotAFinding) {
  SnapshotBuilder b = stdout_pipe(0.2, 'T', -1, {});
  Diagnosis d = diagnose(b.s);
  EXPECT_TRUE(of_kind(d, FindingKind::Stopped).empty()) << d.verdict.summary;
}

TEST(NoProgress, AReaderReadingThePipeIsProgressWhenMainRanRecently) {
  Diagnosis d = diagnose(stdout_pipe(0.3, 'S', HT_NR_clock_nanosleep, {0, 0, 0x7000, 0}, 0.7).s);
  EXPECT_TRUE(d.findings.empty()) << d.verdict.summary;
  EXPECT_EQ(d.verdict.status, "ok");
  EXPECT_NE(d.verdict.summary.find("main 100 (python3) last ran 300 ms ago"), std::string::npos)
      << d.verdict.summary;
}

TEST(NoProgress, WaitingOnWorkThatMovesIsProgress) {
  SnapshotBuilder b = stdout_pipe(42.0, 'R', -1, {});
  b.find(300)->threads[0].cpu_ns_end = 500'000'000;
  Diagnosis d = diagnose(b.s);
  EXPECT_TRUE(of_kind(d, FindingKind::NoProgress).empty()) << d.verdict.summary;
  EXPECT_EQ(d.verdict.status, "ok");
  EXPECT_NE(d.verdict.summary.find("on work that is moving"), std::string::npos) << d.verdict.summary;
}

TEST(NoProgress, AMainThreadThatOnlySleepsIsAWarning) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  ThreadInfo& t = b.thread(100, 100, 'S', 30.0);
  testing::in_syscall(t, HT_NR_clock_nanosleep, {0, 0, 0x7000, 0});
  t.memory.timeout_s = 600;
  Diagnosis d = diagnose(b.s);
  auto found = of_kind(d, FindingKind::NoProgress);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found.front()->severity, Severity::Warning);
  EXPECT_EQ(d.verdict.status, "suspect");
  EXPECT_EQ(exit_status_for(d), 0);
}

// Whether the child's sleep leads to its exit nobody can tell: the main
// thread has not moved, and the chain says what the child does instead.
TEST(NoProgress, AChildThatSleepsIsWhatTheWaitIsStuckOn) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  ThreadInfo& t = b.thread(100, 100, 'S', 30.0);
  testing::in_syscall(t, HT_NR_wait4, {200, 0, 0, 0});
  b.proc(200, 100, ProcessRole::Descendant, "sleep");
  ThreadInfo& c = b.thread(200, 200, 'S', 30.0);
  testing::in_syscall(c, HT_NR_clock_nanosleep, {0, 0, 0x7000, 0});
  Diagnosis d = diagnose(b.s);
  auto found = of_kind(d, FindingKind::NoProgress);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found.front()->severity, Severity::Critical) << found.front()->summary;
  EXPECT_NE(found.front()->summary.find("worker 200 (sleep) sleeps"), std::string::npos)
      << found.front()->summary;
}

// A main thread reading its terminal waits for a person: waits-for-input
// says so (the floor leaves a thread another finding covers).
TEST(NoProgress, AMainThreadReadingItsTerminalWaitsForAPerson) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  ThreadInfo& t = b.thread(100, 100, 'S', 30.0);
  testing::in_syscall(t, HT_NR_read, {0, 0, 1024});
  FdEntry& tty = b.file_fd(100, 0, "/dev/pts/3", 5);
  tty.kind = FdKind::Device;
  Diagnosis d = diagnose(b.s);
  EXPECT_TRUE(of_kind(d, FindingKind::NoProgress).empty());
  auto found = of_kind(d, FindingKind::WaitsForInput);
  ASSERT_EQ(found.size(), 1u) << d.verdict.summary;
  EXPECT_EQ(found.front()->severity, Severity::Critical);
  EXPECT_EQ(found.front()->confidence, Confidence::Certain);
  EXPECT_NE(
      found.front()->summary.find("waits for a person: it waits for a line to be typed on stdin, which is a "
                                  "terminal (/dev/pts/3)"),
      std::string::npos)
      << found.front()->summary;
  EXPECT_TRUE(found.front()->details["terminal"].get<bool>());
  EXPECT_TRUE(found.front()->details["debugger"].is_null());
  EXPECT_EQ(d.verdict.status, "hang");
}

TEST(NoProgress, AWaitNothingModelsIsUnknownAndStillNotHealthy) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  ThreadInfo& t = b.thread(100, 100, 'S', 30.0);
  testing::in_syscall(t, HT_NR_msgrcv, {5, 0, 64, 0, 0});
  Diagnosis d = diagnose(b.s);
  auto found = of_kind(d, FindingKind::NoProgress);
  ASSERT_EQ(found.size(), 1u) << d.verdict.summary;
  EXPECT_NE(found.front()->summary.find("unknown"), std::string::npos) << found.front()->summary;
  EXPECT_NE(d.verdict.status, "ok");
}

// `timeout 3600 python3 train.py`: timeout (100) waits in sigsuspend for
// SIGCHLD (it has a handler and the suspend mask lets it through, or
// `blocks_sigchld`); its child 200 reads a pipe whose writer, peer 300,
// sleeps.
SnapshotBuilder under_timeout(bool blocks_sigchld) {
  SnapshotBuilder b(100);
  ProcessInfo& w = b.proc(100, 1, ProcessRole::Target, "timeout");
  const uint64_t sigchld = uint64_t{1} << (SIGCHLD - 1), sigalrm = uint64_t{1} << (SIGALRM - 1);
  w.signals_caught = sigchld | sigalrm;
  w.main_signals_blocked = blocks_sigchld ? sigchld : 0;
  ThreadInfo& t = b.thread(100, 100, 'S', 50.0);
  testing::in_syscall(t, HT_NR_rt_sigsuspend, {0x7000, 8});
  b.proc(200, 100, ProcessRole::Descendant);
  ThreadInfo& m = b.thread(200, 200, 'S', 50.0);
  testing::in_syscall(m, HT_NR_read, {3, 0, 4096});
  b.fd(200, 3, FdKind::Pipe, kPipe, O_RDONLY);
  b.proc(300, 1, ProcessRole::Peer, "producer");
  ThreadInfo& r = b.thread(300, 300, 'S', 120.0);
  testing::in_syscall(r, HT_NR_clock_nanosleep, {1, 0, 0x7000, 0});
  r.memory.timeout_s = 3600;
  b.fd(300, 4, FdKind::Pipe, kPipe, O_WRONLY);
  return b;
}

TEST(NoProgress, AWrapperWaitingForItsChildHandsTheJobToIt) {
  Diagnosis d = diagnose(under_timeout(false).s);
  auto found = of_kind(d, FindingKind::NoProgress);
  ASSERT_EQ(found.size(), 1u) << d.verdict.summary;
  // The child's main thread is judged: its read on the pipe, the sleeping
  // writer -- not timeout's wait for a signal.
  EXPECT_EQ(found.front()->tids, (std::vector<int>{200})) << found.front()->summary;
  EXPECT_NE(found.front()->summary.find("peer 300 (producer)"), std::string::npos) << found.front()->summary;
  EXPECT_EQ(d.graph.threads.at(100).summary, "waits for a signal: a child's exit (SIGCHLD) or another");
  EXPECT_NE(std::find(d.graph.threads.at(100).objects.begin(), d.graph.threads.at(100).objects.end(),
                      "child-exit:100"),
            d.graph.threads.at(100).objects.end());
}

TEST(NoProgress, AWrapperThatBlocksSigchldWaitsForASignalNobodyIsKnownToSend) {
  Diagnosis d = diagnose(under_timeout(true).s);
  EXPECT_EQ(d.graph.threads.at(100).summary, "waits for a signal");
  auto found = of_kind(d, FindingKind::NoProgress);
  ASSERT_EQ(found.size(), 1u) << d.verdict.summary;
  EXPECT_EQ(found.front()->tids, (std::vector<int>{100})) << found.front()->summary;
  // Nor is a trainer in Popen.wait() a wrapper: its own wait is the job's.
  SnapshotBuilder trainer = under_timeout(false);
  trainer.s.processes[0].comm = "python3";
  Diagnosis own = diagnose(trainer.s);
  found = of_kind(own, FindingKind::NoProgress);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found.front()->tids, (std::vector<int>{100})) << found.front()->summary;
}

TEST(NoProgress, UnderALauncherEachRanksMainThreadIsJudged) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target, "torchrun");
  ThreadInfo& l = b.thread(100, 100, 'S', 50.0);
  testing::in_syscall(l, HT_NR_clock_nanosleep, {0, 0, 0x7000, 0});
  for (int r = 0; r < 2; ++r) {
    ProcessInfo& p = b.proc(101 + r, 100, ProcessRole::Descendant);
    p.rank = r;
    p.world_size = 2;
  }
  b.running(101, 101);
  ThreadInfo& stuck = b.thread(102, 102, 'S', 50.0);
  testing::in_syscall(stuck, HT_NR_msgrcv, {5, 0, 64, 0, 0});
  Diagnosis d = diagnose(b.s);
  auto found = of_kind(d, FindingKind::NoProgress);
  ASSERT_EQ(found.size(), 1u) << d.verdict.summary;
  EXPECT_EQ(found.front()->tids, (std::vector<int>{102}));
}

// main 100 waits on a POSIX semaphore in /dev/shm that peer 300 -- outside
// the job, asleep -- also maps. The word records no owner: 300 is who could
// post it, and which process holds it is said to be unknown.
TEST(NoProgress, ASemaphoreSharedWithAProcessOutsideTheJobMayBeHeldThere) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  b.futex_wait(100, 100, 0x7f0000001000, /*shared=*/true, testing::sem_bytes(1, 0));
  b.shared_map(100, 0x7f0000001000, 4242, "/dev/shm/sem.cache");
  b.proc(300, 1, ProcessRole::Peer, "prep-daemon");
  ThreadInfo& h = b.thread(300, 300, 'S', 120.0);
  testing::in_syscall(h, HT_NR_clock_nanosleep, {1, 0, 0x7000, 0});
  h.memory.timeout_s = 3600;
  b.shared_map(300, 0x7f5500000000, 4242, "/dev/shm/sem.cache");
  Diagnosis d = diagnose(b.s);
  EXPECT_TRUE(of_kind(d, FindingKind::OrphanedLock).empty()) << d.verdict.summary;
  auto found = of_kind(d, FindingKind::NoProgress);
  ASSERT_EQ(found.size(), 1u) << d.verdict.summary;
  const Finding& f = *found.front();
  EXPECT_EQ(f.severity, Severity::Critical);
  EXPECT_NE(f.summary.find("peer 300 (prep-daemon)"), std::string::npos) << f.summary;
  EXPECT_NE(f.summary.find("records no owner"), std::string::npos) << f.summary;
  bool kill_advice = false;
  for (const auto& a : f.advice)
    kill_advice |=
        a.find("may be the one holding it") != std::string::npos && a.find("kill 300") != std::string::npos;
  EXPECT_TRUE(kill_advice);
}

}  // namespace
}  // namespace hangtrace
