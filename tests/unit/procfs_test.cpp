// The /proc parsers, fed with text copied from a real machine (kernel 6.18):
// short files inline, longer ones under fixtures/procfs/.
#include "hangtrace/procfs.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "fixture_file.h"
#include "temp_dir.h"

using namespace hangtrace;
using namespace hangtrace::procfs;

namespace {

std::string fixture(const std::string& name) { return hangtrace::testing::fixture_file("procfs/" + name); }

// Every prefix of a valid text must parse or fail cleanly, never crash; the
// ones cut before the required parts must fail.
template <class Parse>
void for_each_truncation(const std::string& text, Parse parse) {
  for (size_t n = 0; n < text.size(); ++n) parse(std::string_view(text).substr(0, n));
}

}  // namespace

// ---- stat -------------------------------------------------------------------

TEST(ProcfsStat, ParsesPythonProcess) {
  auto st = parse_stat(fixture("stat_python"));
  ASSERT_TRUE(st.ok()) << st.error();
  EXPECT_EQ(st->pid, 6968);
  EXPECT_EQ(st->comm, "python3");
  EXPECT_EQ(st->state, 'R');
  EXPECT_EQ(st->ppid, 6962);
  EXPECT_EQ(st->pgrp, 6962);
  EXPECT_EQ(st->flags, 4194304u);
  EXPECT_FALSE(st->is_kernel_thread());
  EXPECT_EQ(st->num_threads, 1);
  EXPECT_EQ(st->start_time_ticks, 44377u);
  EXPECT_EQ(st->exit_signal, 17);
  EXPECT_EQ(st->exit_code, 0);
}

TEST(ProcfsStat, CommWithSpacesAndParentheses) {
  // prctl(PR_SET_NAME, "w) (x y:z") on a thread.
  auto st = parse_stat(fixture("stat_thread_weird_comm"));
  ASSERT_TRUE(st.ok()) << st.error();
  EXPECT_EQ(st->pid, 7693);
  EXPECT_EQ(st->comm, "w) (x y:z");
  EXPECT_EQ(st->state, 'S');
  EXPECT_EQ(st->ppid, 7649);
  EXPECT_EQ(st->num_threads, 2);
  EXPECT_EQ(st->exit_signal, -1);  // threads do not signal the parent
}

TEST(ProcfsStat, ZombieKeepsItsWaitStatus) {
  auto st = parse_stat(fixture("stat_zombie"));
  ASSERT_TRUE(st.ok()) << st.error();
  EXPECT_EQ(st->state, 'Z');
  EXPECT_EQ(st->ppid, 6968);
  EXPECT_EQ(st->exit_code, 3 << 8);  // _exit(3)
}

TEST(ProcfsStat, KernelThreadHasPfKthread) {
  auto st = parse_stat(fixture("stat_kthreadd"));
  ASSERT_TRUE(st.ok()) << st.error();
  EXPECT_EQ(st->pid, 2);
  EXPECT_EQ(st->comm, "kthreadd");
  EXPECT_EQ(st->ppid, 0);
  EXPECT_TRUE(st->is_kernel_thread());
}

TEST(ProcfsStat, CommWithNewline) {
  std::string text = "12 (a\nb) S 1 12 12 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 99 0 0";
  auto st = parse_stat(text);
  ASSERT_TRUE(st.ok()) << st.error();
  EXPECT_EQ(st->comm, "a\nb");
  EXPECT_EQ(st->start_time_ticks, 99u);
  EXPECT_FALSE(st->exit_code.has_value());  // old-kernel length: no field 52
}

TEST(ProcfsStat, MalformedInputFails) {
  EXPECT_FALSE(parse_stat("").ok());
  EXPECT_FALSE(parse_stat("garbage").ok());
  EXPECT_FALSE(parse_stat("12 (x").ok());
  EXPECT_FALSE(parse_stat("12 (x) S 1 2").ok());
  EXPECT_FALSE(parse_stat("x (y) S 1 12 12 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 99").ok());
  EXPECT_FALSE(parse_stat("12 (y) SS 1 12 12 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 99").ok());
  EXPECT_FALSE(parse_stat("12 (y) S 1 12 12 0 -1 0x40 0 0 0 0 0 0 0 0 20 0 1 0 99").ok());
  std::string text = fixture("stat_python");
  // Cut inside the comm or before the start time: must fail.
  for (size_t n = 0; n < text.find("44377"); ++n) {
    EXPECT_FALSE(parse_stat(std::string_view(text).substr(0, n)).ok()) << n;
  }
  for_each_truncation(text, [](std::string_view t) { (void)parse_stat(t); });
}

// ---- status -------------------------------------------------------------------

TEST(ProcfsStatus, ParsesPythonProcess) {
  auto st = parse_status(fixture("status_python"));
  ASSERT_TRUE(st.ok()) << st.error();
  EXPECT_EQ(st->name, "python3");
  EXPECT_EQ(st->state, 'R');
  EXPECT_EQ(st->tgid, 6968);
  EXPECT_EQ(st->pid, 6968);
  EXPECT_EQ(st->ppid, 6962);
  EXPECT_EQ(st->threads, 1);
}

TEST(ProcfsStatus, ThreadWithColonInName) {
  auto st = parse_status(fixture("status_thread_weird_comm"));
  ASSERT_TRUE(st.ok()) << st.error();
  EXPECT_EQ(st->name, "w) (x y:z");
  EXPECT_EQ(st->tgid, 7652);
  EXPECT_EQ(st->pid, 7693);
  EXPECT_EQ(st->ppid, 7649);
}

TEST(ProcfsStatus, ContextSwitches) {
  auto st = parse_status(fixture("status_kthreadd"));
  ASSERT_TRUE(st.ok()) << st.error();
  EXPECT_EQ(st->name, "kthreadd");
  EXPECT_EQ(st->voluntary_ctxt_switches, 66u);
  EXPECT_EQ(st->nonvoluntary_ctxt_switches, 0u);
  auto zombie = parse_status(fixture("status_zombie"));
  ASSERT_TRUE(zombie.ok()) << zombie.error();
  EXPECT_EQ(zombie->state, 'Z');
  EXPECT_EQ(zombie->voluntary_ctxt_switches, 1u);
}

TEST(ProcfsStatus, MalformedInputFails) {
  EXPECT_FALSE(parse_status("").ok());
  EXPECT_FALSE(parse_status("Name:\tx\n").ok());
  EXPECT_FALSE(parse_status("Name:\tx\nTgid:\tabc\nPPid:\t1\n").ok());
  EXPECT_FALSE(parse_status("Name:\tx\nTgid:\t5\nPPid:\t1\nvoluntary_ctxt_switches:\t12x\n").ok());
  std::string text = fixture("status_python");
  for (size_t n = 0; n < text.find("PPid:"); ++n) {
    EXPECT_FALSE(parse_status(std::string_view(text).substr(0, n)).ok()) << n;
  }
  for_each_truncation(text, [](std::string_view t) { (void)parse_status(t); });
}

// ---- syscall -------------------------------------------------------------------

TEST(ProcfsSyscall, InSyscall) {
  // A thread in futex(FUTEX_WAIT_BITSET|FUTEX_PRIVATE|FUTEX_CLOCK_REALTIME).
  auto sc = parse_syscall("202 0x7f26d0000ba0 0x189 0x0 0x0 0x0 0xffffffff 0x7f26d7cb8950 0x7f26d82a3f16\n");
  ASSERT_TRUE(sc.ok()) << sc.error();
  EXPECT_EQ(sc->mode, SyscallState::Mode::InSyscall);
  EXPECT_EQ(sc->nr, 202);
  EXPECT_EQ(sc->args[0], 0x7f26d0000ba0u);
  EXPECT_EQ(sc->args[1], 0x189u);
  EXPECT_EQ(sc->args[5], 0xffffffffu);
  EXPECT_EQ(sc->sp, 0x7f26d7cb8950u);
  EXPECT_EQ(sc->pc, 0x7f26d82a3f16u);
}

TEST(ProcfsSyscall, RunningAndUserMode) {
  auto running = parse_syscall("running\n");
  ASSERT_TRUE(running.ok());
  EXPECT_EQ(running->mode, SyscallState::Mode::Running);
  // A SIGSTOPped busy loop: not in a syscall.
  auto user = parse_syscall("-1 0x7ffca1e7ea00 0x7f58a32fcc62\n");
  ASSERT_TRUE(user.ok()) << user.error();
  EXPECT_EQ(user->mode, SyscallState::Mode::User);
  EXPECT_EQ(user->nr, -1);
  EXPECT_EQ(user->sp, 0x7ffca1e7ea00u);
  EXPECT_EQ(user->pc, 0x7f58a32fcc62u);
}

TEST(ProcfsSyscall, MalformedInputFails) {
  EXPECT_FALSE(parse_syscall("").ok());
  EXPECT_FALSE(parse_syscall("runn").ok());
  EXPECT_FALSE(parse_syscall("-1 0x7ffca1e7ea00").ok());
  EXPECT_FALSE(parse_syscall("202 0x1 0x2").ok());
  EXPECT_FALSE(parse_syscall("202 0x1 0x2 0x3 0x4 0x5 0xzz 0x7 0x8").ok());
  EXPECT_FALSE(parse_syscall("abc 0x1 0x2 0x3 0x4 0x5 0x6 0x7 0x8").ok());
  std::string text = "230 0x1 0x1 0x7fffeba26340 0x0 0x0 0x0 0x7fffeba26328 0x7f37274ed503";
  for (size_t n = 0; n + 1 < text.rfind(' '); ++n) {
    EXPECT_FALSE(parse_syscall(std::string_view(text).substr(0, n)).ok()) << n;
  }
}

// ---- fd links -----------------------------------------------------------------

TEST(ProcfsFdLink, Classifies) {
  auto pipe = classify_fd_link("pipe:[8712]");
  EXPECT_EQ(pipe.kind, FdKind::Pipe);
  EXPECT_EQ(pipe.inode, 8712u);
  auto sock = classify_fd_link("socket:[8713]");
  EXPECT_EQ(sock.kind, FdKind::Socket);
  EXPECT_EQ(sock.inode, 8713u);
  EXPECT_EQ(classify_fd_link("anon_inode:[eventfd]").kind, FdKind::EventFd);
  EXPECT_EQ(classify_fd_link("anon_inode:[eventpoll]").kind, FdKind::Epoll);
  EXPECT_EQ(classify_fd_link("anon_inode:[timerfd]").kind, FdKind::TimerFd);
  EXPECT_EQ(classify_fd_link("anon_inode:[signalfd]").kind, FdKind::SignalFd);
  EXPECT_EQ(classify_fd_link("anon_inode:[pidfd]").kind, FdKind::PidFd);
  auto uring = classify_fd_link("anon_inode:[io_uring]");
  EXPECT_EQ(uring.kind, FdKind::OtherAnon);
  EXPECT_EQ(uring.anon_type, "io_uring");
  EXPECT_EQ(classify_fd_link("anon_inode:inotify").kind, FdKind::OtherAnon);
  auto shm = classify_fd_link("/dev/shm/torch_123_456");
  EXPECT_EQ(shm.kind, FdKind::ShmFile);
  EXPECT_FALSE(shm.deleted);
  auto shm_deleted = classify_fd_link("/dev/shm/torch_deleted (deleted)");
  EXPECT_EQ(shm_deleted.kind, FdKind::ShmFile);
  EXPECT_TRUE(shm_deleted.deleted);
  EXPECT_EQ(shm_deleted.path, "/dev/shm/torch_deleted");
  EXPECT_EQ(classify_fd_link("/dev/null").kind, FdKind::Device);
  auto file = classify_fd_link("/tmp/fx/a file with spaces.txt (deleted)");
  EXPECT_EQ(file.kind, FdKind::File);
  EXPECT_TRUE(file.deleted);
  EXPECT_EQ(file.path, "/tmp/fx/a file with spaces.txt");
  EXPECT_EQ(classify_fd_link("net:[4026531840]").kind, FdKind::Unknown);
}

TEST(ProcfsFdLink, MalformedIsUnknown) {
  EXPECT_EQ(classify_fd_link("").kind, FdKind::Unknown);
  EXPECT_EQ(classify_fd_link("pipe:[").kind, FdKind::Unknown);
  EXPECT_EQ(classify_fd_link("pipe:[12").kind, FdKind::Unknown);
  EXPECT_EQ(classify_fd_link("pipe:[abc]").kind, FdKind::Unknown);
  EXPECT_EQ(classify_fd_link("socket:[]").kind, FdKind::Unknown);
}

// ---- fdinfo -------------------------------------------------------------------

TEST(ProcfsFdinfo, Pipe) {
  auto info = parse_fdinfo("pos:\t0\nflags:\t02000001\nmnt_id:\t16\nino:\t8712\n");
  ASSERT_TRUE(info.ok()) << info.error();
  EXPECT_EQ(info->pos, 0u);
  EXPECT_EQ(info->flags, 02000001u);  // O_CLOEXEC|O_WRONLY
  EXPECT_EQ(info->mnt_id, 16);
  EXPECT_EQ(info->inode, 8712u);
  EXPECT_TRUE(info->epoll.empty());
}

TEST(ProcfsFdinfo, EventFd) {
  auto info = parse_fdinfo(fixture("fdinfo_eventfd"));
  ASSERT_TRUE(info.ok()) << info.error();
  EXPECT_EQ(info->flags, 02000002u);
  EXPECT_EQ(info->eventfd_id, 1u);
  EXPECT_EQ(info->eventfd_count, 3u);
}

TEST(ProcfsFdinfo, Epoll) {
  auto info = parse_fdinfo(fixture("fdinfo_epoll"));
  ASSERT_TRUE(info.ok()) << info.error();
  ASSERT_EQ(info->epoll.size(), 2u);
  EXPECT_EQ(info->epoll[0].target_fd, 3);
  EXPECT_EQ(info->epoll[0].events, 0x19u);
  EXPECT_EQ(info->epoll[0].inode, 0x2208u);  // 8712, the pipe
  EXPECT_EQ(info->epoll[1].target_fd, 5);
  EXPECT_EQ(info->epoll[1].events, 0x1du);
  EXPECT_EQ(info->epoll[1].inode, 0x40eu);
}

TEST(ProcfsFdinfo, TimerfdAndPidfd) {
  auto timer = parse_fdinfo(fixture("fdinfo_timerfd"));
  ASSERT_TRUE(timer.ok()) << timer.error();
  EXPECT_EQ(timer->flags, 02u);
  auto pidfd = parse_fdinfo(fixture("fdinfo_pidfd"));
  ASSERT_TRUE(pidfd.ok()) << pidfd.error();
  EXPECT_EQ(pidfd->inode, 6969u);
}

TEST(ProcfsFdinfo, MalformedInputFails) {
  EXPECT_FALSE(parse_fdinfo("").ok());
  EXPECT_FALSE(parse_fdinfo("pos:\t0\n").ok());
  EXPECT_FALSE(parse_fdinfo("pos:\t0\nflags:\t0999\n").ok());  // not octal
  EXPECT_FALSE(parse_fdinfo("pos:\tx\nflags:\t02\n").ok());
  EXPECT_FALSE(parse_fdinfo("pos:\t0\nflags:\t02\ntfd:        3 events:\n").ok());
  EXPECT_FALSE(parse_fdinfo("pos:\t0\nflags:\t02\ntfd: zz events: 19 data: 3\n").ok());
  std::string text = fixture("fdinfo_epoll");
  for_each_truncation(text, [](std::string_view t) { (void)parse_fdinfo(t); });
  // A "tfd:" line cut in the middle is an error, not a watch with a wrong mask.
  size_t second = text.rfind("tfd:");
  size_t events = text.find("events:", second);
  for (size_t n = second + 4; n < events + 9; ++n) {
    EXPECT_FALSE(parse_fdinfo(std::string_view(text).substr(0, n)).ok()) << n;
  }
}

// ---- maps -----------------------------------------------------------------------

TEST(ProcfsMaps, PythonWithShm) {
  auto maps = parse_maps(fixture("maps_python_shm"));
  ASSERT_TRUE(maps.ok()) << maps.error();
  EXPECT_EQ(maps->size(), 145u);
  const Mapping& first = (*maps)[0];
  EXPECT_EQ(first.start, 0x55c685e28000u);
  EXPECT_EQ(first.end, 0x55c685e29000u);
  EXPECT_EQ(first.perms, "r--p");
  EXPECT_EQ(first.dev_major, 0xfeu);
  EXPECT_EQ(first.dev_minor, 0u);
  EXPECT_EQ(first.inode, 18624u);
  EXPECT_EQ(first.path, "/root/.pyenv/versions/3.11.7/bin/python3.11");
  EXPECT_FALSE(first.shared());
  const Mapping& deleted = (*maps)[17];
  EXPECT_TRUE(deleted.shared());
  EXPECT_EQ(deleted.path, "/dev/shm/torch_deleted (deleted)");
  EXPECT_EQ(deleted.dev_major, 0u);
  EXPECT_EQ(deleted.dev_minor, 0x1bu);
  EXPECT_EQ(deleted.inode, 3u);
  EXPECT_EQ(deleted.end - deleted.start, 65536u);
  EXPECT_EQ((*maps)[18].path, "/dev/shm/torch_123_456");
  EXPECT_EQ((*maps)[5].path, "[heap]");
  int shared = 0;
  for (const auto& m : *maps) shared += m.shared();
  EXPECT_EQ(shared, 4);  // two shm segments, an anonymous MAP_SHARED, gconv's cache
}

TEST(ProcfsMaps, PathsWithSpaces) {
  auto maps = parse_maps(fixture("maps_spaces"));
  ASSERT_TRUE(maps.ok()) << maps.error();
  bool found_space = false, found_deleted = false;
  for (const auto& m : *maps) {
    if (m.path == "/tmp/fx/lib with space.so") found_space = true;
    if (m.path == "/tmp/fx/gone.bin (deleted)") found_deleted = m.shared();
  }
  EXPECT_TRUE(found_space);
  EXPECT_TRUE(found_deleted);
  auto anon = parse_maps_line("7ffd5a1f0000-7ffd5a211000 rw-p 00000000 00:00 0");
  ASSERT_TRUE(anon.ok()) << anon.error();
  EXPECT_EQ(anon->path, "");
}

TEST(ProcfsMaps, MalformedInputFails) {
  EXPECT_FALSE(parse_maps_line("").ok());
  EXPECT_FALSE(parse_maps_line("7f00-7f10 rw-p 00000000 00:00").ok());
  EXPECT_FALSE(parse_maps_line("7f00 rw-p 00000000 00:00 0").ok());
  EXPECT_FALSE(parse_maps_line("7f10-7f00 rw-p 00000000 00:00 0").ok());  // end < start
  EXPECT_FALSE(parse_maps_line("7f00-7f10 rw 00000000 00:00 0").ok());
  EXPECT_FALSE(parse_maps_line("7f00-7f10 rw-p 00000000 0000 0").ok());
  EXPECT_FALSE(parse_maps("7f00-7f10 rw-p 00000000 00:00 0\nbroken line\n").ok());
  std::string text = fixture("maps_spaces");
  for_each_truncation(text.substr(0, 600), [](std::string_view t) { (void)parse_maps(t); });
}

// ---- net tables ------------------------------------------------------------------

TEST(ProcfsNet, Tcp) {
  auto socks = parse_inet_sockets(fixture("net_tcp"), "tcp");
  ASSERT_TRUE(socks.ok()) << socks.error();
  ASSERT_EQ(socks->size(), 4u);
  const auto& listen = (*socks)[1];
  EXPECT_EQ(listen.info.local, "127.0.0.1:5000");
  EXPECT_EQ(listen.info.remote, "0.0.0.0:0");
  EXPECT_EQ(listen.info.state, "LISTEN");
  EXPECT_EQ(listen.info.inode, 8715u);
  EXPECT_EQ(listen.info.family, "tcp");
  const auto& server_side = (*socks)[2];
  EXPECT_EQ(server_side.info.state, "ESTABLISHED");
  EXPECT_EQ(server_side.local_ip, "127.0.0.1");
  EXPECT_EQ(server_side.local_port, 5000);
  EXPECT_EQ(server_side.info.remote, "127.0.0.1:60196");
  EXPECT_EQ(server_side.info.rx_queue, 7u);  // "abcdefg" not yet read
  EXPECT_EQ(server_side.info.tx_queue, 0u);
  EXPECT_EQ((*socks)[0].info.local, "0.0.0.0:2024");
  EXPECT_EQ((*socks)[3].info.local, "127.0.0.1:60196");
}

TEST(ProcfsNet, Tcp6) {
  auto socks = parse_inet_sockets(fixture("net_tcp6"), "tcp6");
  ASSERT_TRUE(socks.ok()) << socks.error();
  ASSERT_EQ(socks->size(), 3u);
  EXPECT_EQ((*socks)[0].info.local, "[::1]:5001");
  EXPECT_EQ((*socks)[0].info.remote, "[::]:0");
  EXPECT_EQ((*socks)[0].info.state, "LISTEN");
  EXPECT_EQ((*socks)[1].info.remote, "[::1]:49126");
  EXPECT_EQ((*socks)[1].remote_ip, "::1");
  EXPECT_EQ((*socks)[1].info.inode, 8720u);
}

TEST(ProcfsNet, Udp) {
  auto v4 = parse_inet_sockets(fixture("net_udp"), "udp");
  ASSERT_TRUE(v4.ok()) << v4.error();
  ASSERT_EQ(v4->size(), 1u);
  EXPECT_EQ((*v4)[0].info.local, "127.0.0.1:5353");
  EXPECT_EQ((*v4)[0].info.state, "CLOSE");
  EXPECT_EQ((*v4)[0].info.inode, 8721u);
  auto v6 = parse_inet_sockets(fixture("net_udp6"), "udp6");
  ASSERT_TRUE(v6.ok()) << v6.error();
  ASSERT_EQ(v6->size(), 1u);
  EXPECT_EQ((*v6)[0].info.local, "[::1]:5354");
}

TEST(ProcfsNet, IPv4MappedAndLoopback) {
  std::string text =
      "  sl  local_address                         remote_address                        st tx_queue "
      "rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
      "   0: 0000000000000000FFFF00000100007F:1389 0000000000000000FFFF00000200000A:BFE6 01 "
      "00000010:00000000 00:00000000 00000000     0        0 9001 1 0000000000000000 20 0 0 10 -1\n";
  auto socks = parse_inet_sockets(text, "tcp6");
  ASSERT_TRUE(socks.ok()) << socks.error();
  ASSERT_EQ(socks->size(), 1u);
  EXPECT_EQ((*socks)[0].local_ip, "::ffff:127.0.0.1");
  EXPECT_EQ((*socks)[0].remote_ip, "::ffff:10.0.0.2");
  EXPECT_EQ((*socks)[0].info.tx_queue, 16u);
  EXPECT_EQ(unmap_ipv4("::ffff:10.0.0.2"), "10.0.0.2");
  EXPECT_EQ(unmap_ipv4("::1"), "::1");
  EXPECT_TRUE(is_loopback_address("127.0.0.1"));
  EXPECT_TRUE(is_loopback_address("127.3.2.1"));
  EXPECT_TRUE(is_loopback_address("::1"));
  EXPECT_TRUE(is_loopback_address("::ffff:127.0.0.1"));
  EXPECT_FALSE(is_loopback_address("10.0.0.2"));
  EXPECT_FALSE(is_loopback_address("::"));
  EXPECT_FALSE(is_loopback_address("garbage"));
}

TEST(ProcfsNet, StateNames) {
  EXPECT_EQ(tcp_state_name(1), "ESTABLISHED");
  EXPECT_EQ(tcp_state_name(8), "CLOSE_WAIT");
  EXPECT_EQ(tcp_state_name(10), "LISTEN");
  EXPECT_EQ(tcp_state_name(99), "STATE_99");
}

TEST(ProcfsNet, MalformedInputFails) {
  std::string header =
      "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n";
  EXPECT_TRUE(parse_inet_sockets(header, "tcp").ok());  // just the header: no sockets
  EXPECT_FALSE(parse_inet_sockets(header + "   0: 0100007F:1388 00000000:0000 0A\n", "tcp").ok());
  EXPECT_FALSE(
      parse_inet_sockets(
          header + "   0: 0100007:1388 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 8715\n",
          "tcp")
          .ok());
  EXPECT_FALSE(
      parse_inet_sockets(
          header + "   0: 0100007F:1388 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 8715\n",
          "tcp6")
          .ok());
  EXPECT_FALSE(
      parse_inet_sockets(
          header + "   0: 0100007F:1388 00000000:0000 0A 0000000000000000 00:00000000 00000000 0 0 8715\n",
          "tcp")
          .ok());
  EXPECT_FALSE(
      parse_inet_sockets(
          header + "   0: 0100007F:1388 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 87x5\n",
          "tcp")
          .ok());
  std::string text = fixture("net_tcp");
  for_each_truncation(text, [](std::string_view t) { (void)parse_inet_sockets(t, "tcp"); });
  std::string text6 = fixture("net_tcp6");
  for_each_truncation(text6, [](std::string_view t) { (void)parse_inet_sockets(t, "tcp6"); });
}

TEST(ProcfsNet, Unix) {
  auto socks = parse_unix_sockets(fixture("net_unix"));
  ASSERT_TRUE(socks.ok()) << socks.error();
  ASSERT_EQ(socks->size(), 6u);
  EXPECT_EQ((*socks)[0].inode, 1147u);
  EXPECT_EQ((*socks)[0].state, "CONNECTED");
  EXPECT_EQ((*socks)[0].path, "");
  EXPECT_EQ((*socks)[0].type, 1u);
  EXPECT_EQ((*socks)[2].inode, 8723u);
  EXPECT_TRUE((*socks)[2].listening);
  EXPECT_EQ((*socks)[2].state, "LISTEN");
  EXPECT_EQ((*socks)[2].path, "/tmp/fx/my sock");
  EXPECT_EQ((*socks)[5].path, "@abstract-name");
}

TEST(ProcfsNet, UnixMalformedInputFails) {
  std::string header = "Num       RefCount Protocol Flags    Type St Inode Path\n";
  EXPECT_TRUE(parse_unix_sockets(header).ok());
  EXPECT_FALSE(parse_unix_sockets(header + "00000000155fc6c0: 00000003 00000000 00000000 0001 03\n").ok());
  EXPECT_FALSE(
      parse_unix_sockets(header + "00000000155fc6c0: 00000003 00000000 0000000g 0001 03  1147\n").ok());
  EXPECT_FALSE(
      parse_unix_sockets(header + "00000000155fc6c0 00000003 00000000 00000000 0001 03  1147\n").ok());
  std::string text = fixture("net_unix");
  for_each_truncation(text, [](std::string_view t) { (void)parse_unix_sockets(t); });
}

// ---- io, schedstat, cmdline, namespaces -------------------------------------------

TEST(ProcfsIo, Parses) {
  auto io = parse_io(fixture("io_python"));
  ASSERT_TRUE(io.ok()) << io.error();
  EXPECT_GT(io->rchar, 0u);
  auto small = parse_io(
      "rchar: 6976\nwchar: 12\nsyscr: 10\nsyscw: 1\nread_bytes: 12288\nwrite_bytes: "
      "0\ncancelled_write_bytes: 0\n");
  ASSERT_TRUE(small.ok()) << small.error();
  EXPECT_EQ(small->rchar, 6976u);
  EXPECT_EQ(small->wchar, 12u);
  EXPECT_EQ(small->read_bytes, 12288u);
  EXPECT_FALSE(parse_io("").ok());
  EXPECT_FALSE(parse_io("rchar: 6976\n").ok());
  EXPECT_FALSE(parse_io("rchar: 69x\nwchar: 0\n").ok());
}

TEST(ProcfsSchedstat, FirstFieldIsCpuNs) {
  auto ns = parse_schedstat("157812050 8156240 371\n");
  ASSERT_TRUE(ns.ok()) << ns.error();
  EXPECT_EQ(*ns, 157812050u);
  EXPECT_FALSE(parse_schedstat("").ok());
  EXPECT_FALSE(parse_schedstat("157812050").ok());
  EXPECT_FALSE(parse_schedstat("15781x050 1 2").ok());
}

TEST(ProcfsCmdline, NulsBecomeSpaces) {
  std::string text("python3\0train.py\0--arg with space\0", 34);
  EXPECT_EQ(parse_cmdline(text), "python3 train.py --arg with space");
  EXPECT_EQ(parse_cmdline(""), "");
  EXPECT_EQ(parse_cmdline(std::string("\0\0", 2)), "");
  EXPECT_EQ(parse_cmdline("setproctitle style"), "setproctitle style");
}

TEST(ProcfsNamespace, ParsesLink) {
  auto ino = parse_namespace_link("net:[4026531833]");
  ASSERT_TRUE(ino.ok()) << ino.error();
  EXPECT_EQ(*ino, 4026531833u);
  EXPECT_FALSE(parse_namespace_link("net:").ok());
  EXPECT_FALSE(parse_namespace_link("net:[]").ok());
  EXPECT_FALSE(parse_namespace_link("net:[12").ok());
}

TEST(ProcfsStatm, Parses) {
  auto statm = parse_statm(fixture("statm_python"));
  ASSERT_TRUE(statm.ok()) << statm.error();
  EXPECT_EQ(statm->size_pages, 6143u);
  EXPECT_EQ(statm->resident_pages, 4112u);
  EXPECT_FALSE(parse_statm("").ok());
  EXPECT_FALSE(parse_statm("6143").ok());
  EXPECT_FALSE(parse_statm("6143 41x2 2265").ok());
  for_each_truncation(fixture("statm_python"), parse_statm);
}

TEST(ProcfsComm, DropsTheNewline) {
  EXPECT_EQ(parse_comm(fixture("comm_python")), "python3");
  EXPECT_EQ(parse_comm("w) (x y:z\n"), "w) (x y:z");
  EXPECT_EQ(parse_comm("no newline"), "no newline");
  EXPECT_EQ(parse_comm(""), "");
}

// ---- readers over an injected proc root --------------------------------------------

TEST(ProcfsReaders, ReadSelfThroughRealProc) {
  ProcFs proc("/proc");
  int pid = getpid();
  auto st = proc.stat(pid);
  ASSERT_TRUE(st.ok()) << st.error();
  EXPECT_EQ(st->pid, pid);
  auto tids = proc.tids(pid);
  ASSERT_TRUE(tids.ok()) << tids.error();
  EXPECT_FALSE(tids->empty());
  auto sched = proc.thread_schedstat(pid, pid);
  EXPECT_TRUE(sched.ok()) << sched.error();
  int err = 0;
  auto missing = proc.stat(999999999, &err);
  EXPECT_FALSE(missing.ok());
  EXPECT_TRUE(is_gone_errno(err));
  EXPECT_NE(missing.error().find("failed to read"), std::string::npos);
}

TEST(ProcfsReaders, FakeRootWithFixtures) {
  // A proc root laid out by hand: the readers must only join paths.
  std::string root = ::testing::TempDir() + "/fakeproc";
  std::string pid_dir = root + "/6968";
  ASSERT_EQ(
      system(("rm -rf '" + root + "' && mkdir -p '" + pid_dir + "/task/6968' '" + pid_dir + "/net'").c_str()),
      0);
  auto write = [](const std::string& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary);
    out << text;
  };
  write(pid_dir + "/stat", fixture("stat_python"));
  write(pid_dir + "/maps", fixture("maps_python_shm"));
  write(pid_dir + "/net/tcp", fixture("net_tcp"));
  write(pid_dir + "/net/unix", fixture("net_unix"));
  write(pid_dir + "/task/6968/syscall", "running\n");
  write(pid_dir + "/cmdline", std::string("python3\0x.py\0", 13));
  ProcFs proc(root);
  auto st = proc.stat(6968);
  ASSERT_TRUE(st.ok()) << st.error();
  EXPECT_EQ(st->comm, "python3");
  auto maps = proc.maps(6968);
  ASSERT_TRUE(maps.ok()) << maps.error();
  EXPECT_EQ(maps->size(), 145u);
  auto tcp = proc.inet_sockets(6968, "tcp");
  ASSERT_TRUE(tcp.ok()) << tcp.error();
  EXPECT_EQ(tcp->size(), 4u);
  auto unix_socks = proc.unix_sockets(6968);
  ASSERT_TRUE(unix_socks.ok()) << unix_socks.error();
  auto sc = proc.thread_syscall(6968, 6968);
  ASSERT_TRUE(sc.ok()) << sc.error();
  EXPECT_EQ(sc->mode, SyscallState::Mode::Running);
  auto cmd = proc.cmdline(6968);
  ASSERT_TRUE(cmd.ok());
  EXPECT_EQ(*cmd, "python3 x.py");
  auto pids = proc.pids();
  ASSERT_TRUE(pids.ok());
  EXPECT_EQ(*pids, std::vector<int>{6968});
  write(pid_dir + "/status", "Name:\tx\n");  // truncated
  auto status = proc.status(6968);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.error().find("/6968/status"), std::string::npos);
}

TEST(ProcfsReaders, LinksIdentitiesAndPathsUnderAFakeRoot) {
  // ROOT/42 with its links, ROOT/self and ROOT/thread-self, all by hand.
  hangtrace::testing::TempDir dir("ht-procfs-root");
  namespace fs = std::filesystem;
  const fs::path root = dir.path / "proc", pid = root / "42", self = root / "self";
  fs::create_directories(pid / "fd");
  fs::create_directories(pid / "ns");
  fs::create_directories(self);
  fs::create_directories(root / "thread-self" / "ns");
  fs::create_directories(dir.path / "rootfs" / "dev" / "shm");
  const fs::path file = dir.path / "data";
  auto write = [](const fs::path& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary);
    out << text;
  };
  write(file, "x");
  write(pid / "comm", fixture("comm_python"));
  write(pid / "environ", std::string("RANK=3\0WORLD_SIZE=8\0", 21));
  write(pid / "cgroup", "0::/kubepods/pod-a/c1\n");
  write(self / "statm", fixture("statm_python"));
  fs::create_symlink(file, pid / "fd" / "3");
  fs::create_symlink(file, pid / "exe");
  fs::create_symlink(file, self / "exe");
  fs::create_symlink("mnt:[4026531841]", pid / "ns" / "mnt");
  fs::create_symlink("net:[4026531840]", root / "thread-self" / "ns" / "net");
  fs::create_symlink(dir.path / "rootfs", pid / "root");

  ProcFs proc(root.string());
  EXPECT_EQ(proc.root_path(42, "/dev/shm"), root.string() + "/42/root/dev/shm");
  EXPECT_EQ(proc.namespace_path(42, "net"), root.string() + "/42/ns/net");
  auto comm = proc.comm(42);
  ASSERT_TRUE(comm.ok()) << comm.error();
  EXPECT_EQ(*comm, "python3");
  auto env = proc.environ(42);
  ASSERT_TRUE(env.ok()) << env.error();
  EXPECT_EQ(*env, std::string("RANK=3\0WORLD_SIZE=8\0", 21));
  auto cgroup = proc.cgroup(42);
  ASSERT_TRUE(cgroup.ok()) << cgroup.error();
  EXPECT_EQ(*cgroup, "0::/kubepods/pod-a/c1\n");

  auto link = proc.fd_link(42, 3);
  ASSERT_TRUE(link.ok()) << link.error();
  EXPECT_EQ(*link, file.string());
  auto target = proc.fd_file(42, 3), data = stat_file(file.string()), exe = proc.exe_file(42);
  ASSERT_TRUE(target.ok()) << target.error();
  ASSERT_TRUE(data.ok()) << data.error();
  ASSERT_TRUE(exe.ok()) << exe.error();
  EXPECT_EQ(target->inode, data->inode);
  EXPECT_TRUE(*target == *data);
  EXPECT_TRUE(*exe == *data);
  int err = 0;
  auto closed = proc.fd_file(42, 9, &err);
  EXPECT_FALSE(closed.ok());
  EXPECT_TRUE(is_gone_errno(err));
  EXPECT_NE(closed.error().find("failed to examine"), std::string::npos) << closed.error();

  auto self_exe = proc.self_exe();
  ASSERT_TRUE(self_exe.ok()) << self_exe.error();
  EXPECT_EQ(*self_exe, file.string());
  auto self_file = proc.self_exe_file();
  ASSERT_TRUE(self_file.ok()) << self_file.error();
  EXPECT_TRUE(*self_file == *data);
  auto rss = proc.self_rss_bytes();
  ASSERT_TRUE(rss.ok()) << rss.error();
  EXPECT_EQ(*rss, 4112u * static_cast<uint64_t>(sysconf(_SC_PAGESIZE)));
  auto own_net = proc.thread_self_namespace_inode("net");
  ASSERT_TRUE(own_net.ok()) << own_net.error();
  EXPECT_EQ(*own_net, 4026531840u);
  auto mnt = proc.namespace_inode(42, "mnt");
  ASSERT_TRUE(mnt.ok()) << mnt.error();
  EXPECT_EQ(*mnt, 4026531841u);
  auto shm = proc.filesystem_usage(42, "/dev/shm");
  ASSERT_TRUE(shm.ok()) << shm.error();
  EXPECT_GT(shm->size_bytes, 0u);
  EXPECT_LE(shm->used_bytes, shm->size_bytes);
  EXPECT_FALSE(proc.filesystem_usage(42, "/no/such/dir").ok());
}

TEST(ProcfsReaders, SelfAndFdsThroughRealProc) {
  ProcFs proc("/proc");
  auto exe = proc.self_exe();
  ASSERT_TRUE(exe.ok()) << exe.error();
  EXPECT_EQ(exe->find("hangtrace_unit_tests"), exe->size() - std::string("hangtrace_unit_tests").size());
  auto exe_file = proc.self_exe_file(), by_pid = proc.exe_file(getpid());
  ASSERT_TRUE(exe_file.ok()) << exe_file.error();
  ASSERT_TRUE(by_pid.ok()) << by_pid.error();
  EXPECT_TRUE(*exe_file == *by_pid);
  auto rss = proc.self_rss_bytes();
  ASSERT_TRUE(rss.ok()) << rss.error();
  EXPECT_GT(*rss, 0u);
  EXPECT_TRUE(proc.thread_self_namespace_inode("net").ok());
  auto comm = proc.comm(getpid());
  ASSERT_TRUE(comm.ok()) << comm.error();
  EXPECT_EQ(comm->find('\n'), std::string::npos);
  // An open fd: its link and the file it names.
  hangtrace::testing::TempDir dir("ht-procfs-fd");
  const std::string path = dir.file("f");
  std::ofstream(path) << "x";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  auto link = proc.fd_link(getpid(), fd);
  auto file = proc.fd_file(getpid(), fd), direct = stat_file(path);
  ::close(fd);
  ASSERT_TRUE(link.ok()) << link.error();
  EXPECT_EQ(*link, path);
  ASSERT_TRUE(file.ok()) << file.error();
  ASSERT_TRUE(direct.ok()) << direct.error();
  EXPECT_TRUE(*file == *direct);
}
