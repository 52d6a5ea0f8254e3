#include <gtest/gtest.h>

#include "hangtrace/snapshot_json.h"
#include "hangtrace/syscall_nr.h"

namespace hangtrace {
namespace {

Snapshot sample() {
  Snapshot s;
  s.target_pid = 10;
  s.hostname = "node-1";
  s.limitations = {"no BPF"};
  ProcessInfo p;
  p.pid = 10;
  p.comm = "python3";
  p.state = 'S';
  p.role = ProcessRole::Target;
  p.exit_signal = 9;
  ThreadInfo t;
  t.tid = 10;
  t.state = 'S';
  t.syscall.mode = SyscallState::Mode::InSyscall;
  t.syscall.nr = HT_NR_futex;
  t.syscall.args[0] = 0x7fff00001000;
  t.memory.futex_word = 2;
  t.memory.futex_bytes = {2, 0, 0, 0};
  t.memory.poll_fds = {{3, 1}};
  t.memory.timeout_s = 5;
  KernelTaskView k;
  k.off_cpu_ns = 123;
  k.stack = {{0xffffffff81000000, "futex_wait_queue+0x5f/0x90"}};
  t.kernel = k;
  p.threads.push_back(t);
  FdEntry f;
  f.fd = 3;
  f.kind = FdKind::Pipe;
  f.inode = 77;
  f.epoll = {{4, 1, 99}};
  f.eventfd_id = 5;
  p.fds.push_back(f);
  FdEntry pidfd;  // a pidfd and a signalfd: what they refer to survives the round trip
  pidfd.fd = 6;
  pidfd.kind = FdKind::PidFd;
  pidfd.pidfd_pid = 4242;
  p.fds.push_back(pidfd);
  FdEntry sigfd;
  sigfd.fd = 7;
  sigfd.kind = FdKind::SignalFd;
  sigfd.signal_mask = 0x200;
  p.fds.push_back(sigfd);
  p.maps.push_back({0x1000, 0x2000, 0, "rw-s", 0, 26, 55, "/dev/shm/x (deleted)"});
  s.processes.push_back(p);
  s.sockets.push_back({88, 1, "tcp", "ESTABLISHED", "127.0.0.1:1", "127.0.0.1:2", 0, 0, 89, true});
  s.shm.available = true;
  s.shm.size_bytes = 64;
  s.shm.largest.push_back({"seg", 1, 2, {10}});
  return s;
}

TEST(SnapshotJson, RoundTrips) {
  Snapshot s = sample();
  auto back = snapshot_from_json_text(snapshot_to_json(s).dump());
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(snapshot_to_json(*back), snapshot_to_json(s));
  EXPECT_EQ(back->processes[0].threads[0].kernel->stack[0].symbol, "futex_wait_queue+0x5f/0x90");
  EXPECT_EQ(back->processes[0].exit_signal, 9);
  EXPECT_EQ(back->processes[0].fds[1].pidfd_pid, 4242);
  EXPECT_EQ(back->processes[0].fds[2].signal_mask, 0x200u);
}

TEST(SnapshotJson, CorruptInputIsAnErrorNotACrash) {
  std::string good = snapshot_to_json(sample()).dump();
  EXPECT_FALSE(snapshot_from_json_text("").ok());
  EXPECT_FALSE(snapshot_from_json_text(good.substr(0, good.size() / 2)).ok());
  EXPECT_FALSE(snapshot_from_json_text("{\"schema\": \"something else\"}").ok());
  EXPECT_FALSE(snapshot_from_json_text("[1,2,3]").ok());
  auto wrong_type = snapshot_to_json(sample());
  wrong_type["processes"][0]["pid"] = "ten";
  auto r = snapshot_from_json(wrong_type);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("malformed snapshot"), std::string::npos);
  auto no_target = snapshot_to_json(sample());
  no_target["target_pid"] = 11;
  EXPECT_FALSE(snapshot_from_json(no_target).ok());
}

}  // namespace
}  // namespace hangtrace
