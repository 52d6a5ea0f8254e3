// The fix comes from the edges of the chain, and each process is named for
// what it is: a parent wait()ing on a subprocess that blocks writing the pipe
// only the parent reads is told communicate(); a Queue.get() whose producer
// died is told a timeout, not "close the unused end after fork"; children
// are a "subprocess", a "multiprocessing child", a "DataLoader worker".
#include <gtest/gtest.h>

#include "hangtrace/analysis.h"
#include "snapshot_builder.h"

namespace hangtrace {
namespace {

using testing::of_kind;
using testing::SnapshotBuilder;

constexpr uint64_t kPipe = 5000;

UserFrame py(const std::string& function, const std::string& file, int line) {
  return {UserFrame::Kind::Python, function, file, line};
}

// main 100 (python3 train.py) in Popen.wait() -> wait4(200); its child 200
// (tar, exec'd) blocks writing its stdout, a pipe whose read end only 100 holds.
SnapshotBuilder popen_wait() {
  SnapshotBuilder b(100);
  ProcessInfo& main = b.proc(100, 1, ProcessRole::Target);
  main.cmdline = "python3 train.py";
  main.exe = "/usr/bin/python3.11";
  ThreadInfo& t = b.thread(100, 100, 'S', 30.0);
  testing::in_syscall(t, HT_NR_wait4, {200, 0, 0, 0});
  t.python_stack = {py("Popen._try_wait", "/usr/lib/python3.11/subprocess.py", 1959),
                    py("Popen._wait", "/usr/lib/python3.11/subprocess.py", 2002),
                    py("Popen.wait", "/usr/lib/python3.11/subprocess.py", 1264),
                    py("<module>", "train.py", 7)};
  b.fd(100, 5, FdKind::Pipe, kPipe, O_RDONLY, 65536);
  ProcessInfo& child = b.proc(200, 100, ProcessRole::Descendant, "tar");
  child.cmdline = "tar cf - /data";
  child.exe = "/usr/bin/tar";
  ThreadInfo& c = b.thread(200, 200, 'S', 30.0);
  testing::in_syscall(c, HT_NR_write, {1, 0, 65536});
  b.fd(200, 1, FdKind::Pipe, kPipe, O_WRONLY, 65536);
  return b;
}

TEST(ChainFixes, PopenWaitOnAChildThatFillsItsPipeIsToldCommunicate) {
  Diagnosis d = diagnose(popen_wait().s);
  auto found = of_kind(d, FindingKind::DeadlockCycle);
  ASSERT_EQ(found.size(), 1u) << d.verdict.summary;
  const Finding& f = *found.front();
  EXPECT_EQ(f.confidence, Confidence::Certain);
  EXPECT_NE(f.summary.find("subprocess 200 (tar)"), std::string::npos) << f.summary;
  ASSERT_FALSE(f.advice.empty());
  EXPECT_NE(f.advice.front().find("communicate()"), std::string::npos) << f.advice.front();
  for (const auto& a : f.advice) EXPECT_EQ(a.find("never hold a lock"), std::string::npos) << a;
}

TEST(ChainFixes, AChildIsNamedForWhatItIs) {
  SnapshotBuilder b = popen_wait();
  EXPECT_EQ(job_role_text(b.s, b.find(200)), "subprocess");
  EXPECT_EQ(job_role_label(b.s, b.find(200)), "worker");  // metrics keep the coarse label
  ProcessInfo& forked = b.proc(201, 100, ProcessRole::Descendant);
  forked.cmdline = "python3 train.py";
  forked.exe = "/usr/bin/python3.11";
  b.thread(201, 201).python_stack = {
      py("_worker_loop", "/usr/lib/python3/dist-packages/torch/utils/data/_utils/worker.py", 308),
      py("BaseProcess._bootstrap", "/usr/lib/python3.11/multiprocessing/process.py", 314)};
  EXPECT_EQ(job_role_text(b.s, b.find(201)), "DataLoader worker");
  ProcessInfo& mp = b.proc(202, 100, ProcessRole::Descendant);
  mp.cmdline = "python3 train.py";
  mp.exe = "/usr/bin/python3.11";
  b.thread(202, 202).python_stack = {
      py("BaseProcess._bootstrap", "/usr/lib/python3.11/multiprocessing/process.py", 314)};
  EXPECT_EQ(job_role_text(b.s, b.find(202)), "multiprocessing child");
  ProcessInfo& spawned = b.proc(203, 100, ProcessRole::Descendant);
  spawned.cmdline =
      "python3 -c from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5, pipe_handle=7) "
      "--multiprocessing-fork";
  b.thread(203, 203);
  EXPECT_EQ(job_role_text(b.s, b.find(203)), "multiprocessing child");
  ProcessInfo& plain = b.proc(204, 100, ProcessRole::Descendant);  // a fork copy with no Python read
  plain.cmdline = "python3 train.py";
  plain.exe = "/usr/bin/python3.11";
  b.thread(204, 204);
  EXPECT_EQ(job_role_text(b.s, b.find(204)), "worker");
  EXPECT_EQ(job_role_text(b.s, b.find(100)), "main");
}

// main 100 in Queue.get() reads pipe 5000 (fd 3) and holds its write end
// (fd 4) as every mp.Queue does; the producer 200 has exited.
TEST(ChainFixes, AQueueGetWhoseProducerDiedIsToldATimeoutNotToCloseEnds) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target).cmdline = "python3 train.py";
  ThreadInfo& t = b.thread(100, 100, 'S', 30.0);
  testing::in_syscall(t, HT_NR_read, {3, 0, 4});
  t.python_stack = {py("Connection._recv", "/usr/lib/python3.11/multiprocessing/connection.py", 395),
                    py("Queue.get", "/usr/lib/python3.11/multiprocessing/queues.py", 103),
                    py("<module>", "train.py", 9)};
  b.fd(100, 3, FdKind::Pipe, kPipe, O_RDONLY, 0);
  b.fd(100, 4, FdKind::Pipe, kPipe, O_WRONLY, 0);
  ProcessInfo& dead = b.proc(200, 100, ProcessRole::Descendant);
  dead.state = 'Z';
  dead.cmdline = "";
  Diagnosis d = diagnose(b.s);
  auto found = of_kind(d, FindingKind::DeadPeer);
  ASSERT_EQ(found.size(), 1u) << d.verdict.summary;
  const Finding& f = *found.front();
  ASSERT_FALSE(f.advice.empty());
  EXPECT_NE(f.advice.front().find("get(timeout=...)"), std::string::npos) << f.advice.front();
  EXPECT_NE(f.advice.front().find("is_alive()"), std::string::npos) << f.advice.front();
  for (const auto& a : f.advice) EXPECT_EQ(a.find("Close the unused end"), std::string::npos) << a;
  EXPECT_TRUE(f.details["multiprocessing"].get<bool>());
}

TEST(ChainFixes, ARawPipeWhoseWriterDiedKeepsTheCloseTheUnusedEndAdvice) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  testing::in_syscall(b.thread(100, 100, 'S', 30.0), HT_NR_read, {3, 0, 4});
  b.fd(100, 3, FdKind::Pipe, kPipe, O_RDONLY, 0);
  b.fd(100, 4, FdKind::Pipe, kPipe, O_WRONLY, 0);
  Diagnosis d = diagnose(b.s);
  auto found = of_kind(d, FindingKind::DeadPeer);
  ASSERT_EQ(found.size(), 1u) << d.verdict.summary;
  EXPECT_NE(found.front()->advice.front().find("Close the unused end"), std::string::npos);
}

}  // namespace
}  // namespace hangtrace
