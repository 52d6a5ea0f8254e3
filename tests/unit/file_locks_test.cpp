// File locks: /proc/locks and fdinfo "lock:" lines parsed, which locks stand
// in each other's way, and a thread waiting to lock a file in the wait-for
// graph -- released by the holder /proc/locks names, by whoever holds an OFD
// lock through an fd, or by nobody anyone can see (unknown, never free).
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/file.h>

#include "hangtrace/analysis.h"
#include "hangtrace/procfs.h"
#include "snapshot_builder.h"

namespace hangtrace {
namespace {

using testing::of_kind;
using testing::SnapshotBuilder;

TEST(FileLocks, ProcLocksLinesParse) {
  auto locks = procfs::parse_locks(
      "1: OFDLCK ADVISORY  WRITE -1 fe:00:10953065 0 EOF\n"
      "1: -> OFDLCK ADVISORY  WRITE -1 fe:00:10953065 0 EOF\n"
      "2: POSIX  ADVISORY  READ  18748 08:01:10953036 100 199\n"
      "3: FLOCK  ADVISORY  WRITE 18748 fe:00:10953002 0 EOF\n"
      "3: -> FLOCK  ADVISORY  WRITE 18792 fe:00:10953002 0 EOF\n");
  ASSERT_TRUE(locks.ok()) << locks.error();
  ASSERT_EQ(locks->size(), 5u);
  const FileLock& ofd = (*locks)[0];
  EXPECT_EQ(ofd.type, "OFDLCK");
  EXPECT_EQ(ofd.pid, -1);
  EXPECT_EQ(ofd.dev_major, 0xfeu);
  EXPECT_EQ(ofd.inode, 10953065u);
  EXPECT_FALSE(ofd.end.has_value());
  EXPECT_FALSE(ofd.waiting);
  EXPECT_TRUE((*locks)[1].waiting);
  const FileLock& posix = (*locks)[2];
  EXPECT_EQ(posix.mode, "READ");
  EXPECT_EQ(posix.dev_major, 8u);
  EXPECT_EQ(posix.dev_minor, 1u);
  EXPECT_EQ(posix.start, 100u);
  EXPECT_EQ(posix.end, 199u);
  EXPECT_EQ((*locks)[4].pid, 18792);
  EXPECT_EQ((*locks)[4].id, 3);
}

TEST(FileLocks, BadLinesAreOneError) {
  for (const char* bad :
       {"1: FLOCK ADVISORY WRITE", "x: FLOCK ADVISORY WRITE 1 fe:00:1 0 EOF",
        "1: FLOCK ADVISORY WRITE pid fe:00:1 0 EOF", "1: FLOCK ADVISORY WRITE 1 fe001 0 EOF",
        "1: POSIX ADVISORY WRITE 1 fe:00:1 0 end"}) {
    auto l = procfs::parse_lock_line(bad);
    EXPECT_FALSE(l.ok()) << bad;
    if (!l.ok()) {
      EXPECT_NE(l.error().find("lock line"), std::string::npos) << l.error();
    }
  }
}

TEST(FileLocks, FdinfoLockLinesAreTheLocksHeldThroughTheFd) {
  auto info = procfs::parse_fdinfo(
      "pos:\t0\nflags:\t02100002\nmnt_id:\t27\nino:\t10953065\n"
      "lock:\t1: OFDLCK ADVISORY  WRITE -1 fe:00:10953065 0 EOF\nlock:\tnot a lock line\n");
  ASSERT_TRUE(info.ok()) << info.error();
  ASSERT_EQ(info->locks.size(), 1u);  // the bad one left out, not an error
  EXPECT_EQ(info->locks[0].type, "OFDLCK");
}

TEST(FileLocks, WhichLocksConflict) {
  auto lock = [](const char* type, const char* mode, uint64_t start, std::optional<uint64_t> end) {
    FileLock l = SnapshotBuilder::file_lock(1, type, 10, 77, false, mode);
    l.start = start;
    l.end = end;
    return l;
  };
  EXPECT_TRUE(procfs::locks_conflict(lock("FLOCK", "WRITE", 0, {}), lock("FLOCK", "READ", 0, {})));
  EXPECT_FALSE(procfs::locks_conflict(lock("FLOCK", "READ", 0, {}), lock("FLOCK", "READ", 0, {})));
  // flock and byte-range locks do not see each other.
  EXPECT_FALSE(procfs::locks_conflict(lock("FLOCK", "WRITE", 0, {}), lock("POSIX", "WRITE", 0, {})));
  EXPECT_TRUE(procfs::locks_conflict(lock("POSIX", "WRITE", 0, 99), lock("OFDLCK", "WRITE", 50, {})));
  EXPECT_FALSE(procfs::locks_conflict(lock("POSIX", "WRITE", 0, 99), lock("POSIX", "WRITE", 100, 120)));
  FileLock other_file = lock("FLOCK", "WRITE", 0, {});
  other_file.inode = 78;
  EXPECT_FALSE(procfs::locks_conflict(other_file, lock("FLOCK", "WRITE", 0, {})));
}

// main 100 waits in flock(3, LOCK_EX) on /data/cache.lock, which process 300
// outside the job holds; 300 itself sleeps in read() on its terminal.
SnapshotBuilder flock_held_by(int holder_pid, bool holder_in_snapshot) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  ThreadInfo& t = b.thread(100, 100, 'S', 42.0);
  testing::in_syscall(t, HT_NR_flock, {3, LOCK_EX});
  b.file_fd(100, 3, "/data/cache.lock", 77);
  b.s.file_locks = {SnapshotBuilder::file_lock(1, "FLOCK", holder_pid, 77),
                    SnapshotBuilder::file_lock(1, "FLOCK", 100, 77, true)};
  if (holder_in_snapshot) {
    b.proc(300, 1, ProcessRole::Peer, "datasets-prep");
    ThreadInfo& h = b.thread(300, 300, 'S', 120.0);
    testing::in_syscall(h, HT_NR_read, {0, 0, 1});
    FdEntry& tty = b.file_fd(300, 0, "/dev/pts/3", 5);
    tty.kind = FdKind::Device;
    b.file_fd(300, 4, "/data/cache.lock", 77).locks = {SnapshotBuilder::file_lock(1, "FLOCK", 300, 77)};
  }
  return b;
}

TEST(FileLocks, AFlockHeldOutsideTheJobNamesItsHolderAndWhatItDoes) {
  Diagnosis d = diagnose(flock_held_by(300, true).s);
  const ThreadWait& w = d.graph.threads.at(100);
  EXPECT_EQ(w.activity, Activity::Blocked);
  ASSERT_EQ(w.objects.size(), 1u);
  const WaitObject& o = d.graph.objects.at(w.objects[0]);
  EXPECT_EQ(o.kind, ObjectKind::FileLock);
  EXPECT_EQ(o.label, "flock lock on /data/cache.lock");
  EXPECT_TRUE(o.releasers_certain);
  EXPECT_EQ(o.holder_pids, (std::vector<int>{300}));
  EXPECT_NE(w.summary.find("waits to lock flock lock on /data/cache.lock"), std::string::npos) << w.summary;
  auto found = of_kind(d, FindingKind::NoProgress);
  ASSERT_EQ(found.size(), 1u) << d.verdict.summary;
  const Finding& f = *found.front();
  EXPECT_EQ(f.severity, Severity::Critical);
  EXPECT_NE(f.summary.find("has not moved for 42.0 s"), std::string::npos) << f.summary;
  EXPECT_NE(f.summary.find("peer 300 (datasets-prep)"), std::string::npos) << f.summary;
  EXPECT_EQ(f.details["releasers"][0]["pid"], 300);
  EXPECT_EQ(exit_status_for(d), 2);
  EXPECT_EQ(d.verdict.status, "hang");
}

// The launcher's way (torch.multiprocessing.spawn): main 100 polls the
// sentinel pipe of its child 200, which waits for the lock peer 300 holds.
// The fix is at the end of the chain (the lock's holder), not "drain the
// pipe": a sentinel is written by no one, it ends when the child exits.
TEST(FileLocks, AChildWaitingForTheLockGivesTheAdviceFromTheEndOfTheChain) {
  SnapshotBuilder b = flock_held_by(300, true);
  ProcessInfo& child = b.proc(200, 100, ProcessRole::Descendant);
  child.threads = b.find(100)->threads;
  child.threads[0].tid = 200;
  child.fds = b.find(100)->fds;
  b.s.file_locks[1].pid = 200;
  b.fd(200, 6, FdKind::Pipe, 900, O_WRONLY);
  ThreadInfo& main = b.find(100)->threads[0];
  testing::in_syscall(main, HT_NR_poll, {0x7000, 1, static_cast<uint64_t>(-1)});
  main.memory.poll_fds = {{5, POLLIN}};
  b.find(100)->fds.clear();
  b.fd(100, 5, FdKind::Pipe, 900, O_RDONLY, 0);
  Diagnosis d = diagnose(b.s);
  auto found = of_kind(d, FindingKind::NoProgress);
  ASSERT_EQ(found.size(), 1u) << d.verdict.summary;
  std::string advice;
  for (const auto& a : found.front()->advice) advice += a + "\n";
  EXPECT_NE(advice.find("kill 300"), std::string::npos) << advice;
  EXPECT_EQ(advice.find("drain"), std::string::npos) << advice;
}

TEST(FileLocks, AnOfdLockIsHeldByWhoeverHoldsItThroughAnFd) {
  SnapshotBuilder b = flock_held_by(-1, true);
  ThreadInfo& t = b.find(100)->threads[0];
  testing::in_syscall(t, HT_NR_fcntl, {3, F_OFD_SETLKW, 0x7000});
  b.s.file_locks = {SnapshotBuilder::file_lock(1, "OFDLCK", -1, 77),
                    SnapshotBuilder::file_lock(1, "OFDLCK", -1, 77, true)};
  b.find(300)->fds.back().locks = {SnapshotBuilder::file_lock(1, "OFDLCK", -1, 77)};
  Diagnosis d = diagnose(b.s);
  const WaitObject& o = d.graph.objects.at(d.graph.threads.at(100).objects.at(0));
  EXPECT_EQ(o.label, "OFD (fcntl F_OFD_SETLK) lock on /data/cache.lock, whole file");
  EXPECT_EQ(o.holder_pids, (std::vector<int>{300}));
  EXPECT_EQ(exit_status_for(d), 2);
}

TEST(FileLocks, AHolderNobodyCanSeeIsUnknownNotFree) {
  Diagnosis d = diagnose(flock_held_by(-1, false).s);
  const WaitObject& o = d.graph.objects.at(d.graph.threads.at(100).objects.at(0));
  EXPECT_TRUE(o.holder_pids.empty());
  EXPECT_FALSE(o.releasers_certain);
  auto found = of_kind(d, FindingKind::NoProgress);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found.front()->severity, Severity::Critical);
  EXPECT_NE(found.front()->summary.find("unknown"), std::string::npos) << found.front()->summary;
  EXPECT_FALSE(found.front()->details["unknown"].empty());
}

TEST(FileLocks, AnFcntlThatDoesNotWaitIsNotALockWait) {
  SnapshotBuilder b = flock_held_by(300, true);
  testing::in_syscall(b.find(100)->threads[0], HT_NR_fcntl, {3, F_GETFL});
  Diagnosis d = diagnose(b.s);
  EXPECT_TRUE(d.graph.threads.at(100).objects.empty());
  EXPECT_NE(d.graph.threads.at(100).activity, Activity::Blocked);
}

}  // namespace
}  // namespace hangtrace
