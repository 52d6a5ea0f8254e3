// Waits on a process's exit (a pidfd, waitid(P_PIDFD)), on a signal (a
// signalfd) and on a FIFO (a named pipe, whose fd links to its path): each is
// an object with the process that can end it, or its releaser unknown --
// never "can move on".
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "hangtrace/analysis.h"
#include "hangtrace/procfs.h"
#include "hangtrace/text.h"
#include "snapshot_builder.h"
#include "temp_dir.h"

namespace hangtrace {
namespace {

using testing::of_kind;
using testing::SnapshotBuilder;

constexpr uint64_t kPidfdIdType = 3;  // waitid's P_PIDFD

bool any_advice_has(const Finding& f, const std::string& words) {
  for (const auto& a : f.advice)
    if (a.find(words) != std::string::npos) return true;
  return false;
}

TEST(ExitSignalFifoWaits, FdinfoOfAPidfdAndASignalfd) {
  auto pidfd =
      procfs::parse_fdinfo("pos:\t0\nflags:\t02000002\nmnt_id:\t4\nino:\t362977\nPid:\t5952\nNSpid:\t5952\n");
  ASSERT_TRUE(pidfd.ok()) << pidfd.error();
  EXPECT_EQ(pidfd->pidfd_pid, 5952);
  auto gone = procfs::parse_fdinfo("pos:\t0\nflags:\t02000002\nPid:\t-1\n");
  ASSERT_TRUE(gone.ok()) << gone.error();
  EXPECT_EQ(gone->pidfd_pid, -1);
  auto sigfd =
      procfs::parse_fdinfo("pos:\t0\nflags:\t02\nmnt_id:\t17\nino:\t1039\nsigmask:\t0000000000004200\n");
  ASSERT_TRUE(sigfd.ok()) << sigfd.error();
  EXPECT_EQ(sigfd->signalfd_mask, (uint64_t{1} << (SIGUSR1 - 1)) | (uint64_t{1} << (SIGTERM - 1)));
  EXPECT_EQ(signal_set_text(*sigfd->signalfd_mask), "SIGUSR1, SIGTERM");
  EXPECT_EQ(signal_set_text(uint64_t{1} << 39), "signal 40");
  EXPECT_EQ(signal_set_text(0), "no signal");
}

TEST(ExitSignalFifoWaits, StatTellsAFifoFromAFile) {
  hangtrace::testing::TempDir dir("ht-fifo");
  const std::string fifo = dir.file("q.fifo"), file = dir.file("plain");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  { std::ofstream(file) << "x"; }
  auto a = procfs::examine_file(fifo), b = procfs::examine_file(file);
  ASSERT_TRUE(a.ok()) << a.error();
  ASSERT_TRUE(b.ok()) << b.error();
  EXPECT_TRUE(a->fifo);
  EXPECT_FALSE(b->fifo);
}

// main 100 poll()s on fd 5, a pidfd of process 300 -- outside the job,
// asleep (or, with `exited`, gone).
SnapshotBuilder polls_a_pidfd(std::optional<int> pidfd_pid, bool releaser_runs = false) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  ThreadInfo& t = b.thread(100, 100, 'S', 60.0);
  testing::in_syscall(t, HT_NR_poll, {0x7000, 1, static_cast<uint64_t>(-1)});
  t.memory.poll_fds = {{5, POLLIN}};
  FdEntry f;
  f.fd = 5;
  f.kind = FdKind::PidFd;
  f.link = "anon_inode:[pidfd]";
  f.pidfd_pid = pidfd_pid;
  b.find(100)->fds.push_back(f);
  b.proc(300, 1, ProcessRole::Peer, "prep-server");
  if (releaser_runs)
    b.running(300, 300);
  else
    testing::in_syscall(b.thread(300, 300, 'S', 120.0), HT_NR_read, {0});
  return b;
}

TEST(ExitSignalFifoWaits, APidfdWaitsForItsProcessToExitAndSaysWhatItDoesInstead) {
  Diagnosis d = diagnose(polls_a_pidfd(300).s);
  const ThreadWait& w = d.graph.threads.at(100);
  ASSERT_EQ(w.objects.size(), 1u);
  const WaitObject& o = d.graph.objects.at(w.objects[0]);
  EXPECT_EQ(o.label, "the exit of process 300 (pidfd)");
  EXPECT_EQ(o.kind, ObjectKind::Child);
  EXPECT_TRUE(o.releasers_certain);
  EXPECT_EQ(releasers_of(d.graph, o), (std::vector<int>{300}));
  auto found = of_kind(d, FindingKind::NoProgress);
  ASSERT_EQ(found.size(), 1u) << d.verdict.summary;
  EXPECT_EQ(found[0]->severity, Severity::Critical);
  EXPECT_NE(found[0]->summary.find("peer 300 (prep-server)"), std::string::npos) << found[0]->summary;
  EXPECT_EQ(exit_status_for(d), 2);
}

TEST(ExitSignalFifoWaits, APidfdWhoseProcessWorksOrHasExitedIsNoStall) {
  EXPECT_TRUE(
      of_kind(diagnose(polls_a_pidfd(300, /*releaser_runs=*/true).s), FindingKind::NoProgress).empty());
  Diagnosis gone = diagnose(polls_a_pidfd(-1).s);
  EXPECT_TRUE(gone.graph.objects.at(gone.graph.threads.at(100).objects[0]).ready);
  EXPECT_TRUE(of_kind(gone, FindingKind::NoProgress).empty()) << gone.verdict.summary;
}

TEST(ExitSignalFifoWaits, APidfdWhoseProcessCannotBeReadIsUnknownNotFree) {
  SnapshotBuilder b = polls_a_pidfd(300);
  b.s.processes.pop_back();  // process 300 vanished from the snapshot
  Diagnosis d = diagnose(b.s);
  const WaitObject& o = d.graph.objects.at(d.graph.threads.at(100).objects[0]);
  EXPECT_TRUE(o.external);
  auto found = of_kind(d, FindingKind::NoProgress);
  ASSERT_EQ(found.size(), 1u) << d.verdict.summary;
  EXPECT_NE(found[0]->summary.find("unknown"), std::string::npos) << found[0]->summary;
}

TEST(ExitSignalFifoWaits, WaitidOnAPidfdWaitsForThatChild) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  testing::in_syscall(b.thread(100, 100, 'S', 60.0), HT_NR_waitid, {kPidfdIdType, 7, 0, WEXITED});
  FdEntry f;
  f.fd = 7;
  f.kind = FdKind::PidFd;
  f.pidfd_pid = 200;
  b.find(100)->fds.push_back(f);
  b.proc(200, 100, ProcessRole::Descendant, "tokenize");
  b.proc(201, 100, ProcessRole::Descendant, "other");
  testing::in_syscall(b.thread(200, 200, 'S', 60.0), HT_NR_pause, {});
  b.running(201, 201);
  Diagnosis d = diagnose(b.s);
  const WaitObject& o = d.graph.objects.at(d.graph.threads.at(100).objects[0]);
  EXPECT_EQ(o.label, "child process 200");
  EXPECT_EQ(releasers_of(d.graph, o), (std::vector<int>{200}));  // not the other child, which runs
}

TEST(ExitSignalFifoWaits, ASignalfdNamesItsSignalsAndItsSenderIsUnknown) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  testing::in_syscall(b.thread(100, 100, 'S', 60.0), HT_NR_read, {4, 0x7000, 128});
  FdEntry f;
  f.fd = 4;
  f.kind = FdKind::SignalFd;
  f.link = "anon_inode:[signalfd]";
  f.signal_mask = uint64_t{1} << (SIGUSR1 - 1);
  b.find(100)->fds.push_back(f);
  Diagnosis d = diagnose(b.s);
  const ThreadWait& w = d.graph.threads.at(100);
  EXPECT_EQ(w.summary, "reads on signalfd for SIGUSR1");
  EXPECT_EQ(d.graph.objects.at(w.objects[0]).kind, ObjectKind::Signal);
  auto found = of_kind(d, FindingKind::NoProgress);
  ASSERT_EQ(found.size(), 1u) << d.verdict.summary;
  EXPECT_EQ(found[0]->severity, Severity::Critical);
  EXPECT_NE(found[0]->summary.find("not known until it is sent"), std::string::npos) << found[0]->summary;
  EXPECT_TRUE(any_advice_has(*found[0], "waits for a signal"));
}

// main 100 reads fd 3, the FIFO /run/q.fifo (0:50 inode 9); peer 300 holds
// it open for writing and sleeps. Process 400 holds an unnamed pipe whose
// pipefs inode number is the same 9: not a holder of the FIFO.
TEST(ExitSignalFifoWaits, AFifoIsAPipeKeyedByItsFileAndNamedByItsPath) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  testing::in_syscall(b.thread(100, 100, 'S', 60.0), HT_NR_read, {3, 0x7000, 4096});
  auto fifo_fd = [&](int pid, int fd, uint32_t flags) {
    FdEntry& f = b.file_fd(pid, fd, "/run/q.fifo", 9, flags);
    f.kind = FdKind::Pipe;
    f.dev_minor = 50;
    f.queued_bytes = 0;
  };
  fifo_fd(100, 3, O_RDONLY);
  b.proc(300, 1, ProcessRole::Peer, "feeder");
  testing::in_syscall(b.thread(300, 300, 'S', 120.0), HT_NR_clock_nanosleep, {1, 0, 0x7000, 0});
  b.find(300)->threads.back().memory.timeout_s = 3600;
  fifo_fd(300, 5, O_WRONLY);
  b.proc(400, 1, ProcessRole::Peer, "unrelated");
  b.thread(400, 400, 'S', 120.0);
  b.fd(400, 6, FdKind::Pipe, 9, O_WRONLY);
  Diagnosis d = diagnose(b.s);
  const ThreadWait& w = d.graph.threads.at(100);
  ASSERT_EQ(w.objects.size(), 1u);
  const WaitObject& o = d.graph.objects.at(w.objects[0]);
  EXPECT_EQ(o.label, "FIFO /run/q.fifo (read end)");
  EXPECT_EQ(releasers_of(d.graph, o), (std::vector<int>{300}));
  auto found = of_kind(d, FindingKind::NoProgress);
  ASSERT_EQ(found.size(), 1u) << d.verdict.summary;
  EXPECT_EQ(found[0]->severity, Severity::Critical);
  EXPECT_NE(found[0]->summary.find("peer 300 (feeder)"), std::string::npos) << found[0]->summary;
  EXPECT_EQ(found[0]->summary.find("400"), std::string::npos) << found[0]->summary;
}

}  // namespace
}  // namespace hangtrace
