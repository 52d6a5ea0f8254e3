// The parsers of a process's own /proc files (stat, status, syscall, fds,
// maps, io, ...), fed with text copied from a real machine (kernel 6.18):
// short files inline, longer ones under fixtures/procfs/. The socket tables
// are in procfs_net_test.cpp, the readers in procfs_readers_test.cpp.
#include "hangtrace/procfs.h"
#include "hangtrace/syscall_nr.h"

#include <gtest/gtest.h>

#include <string>

#include "fixture_file.h"

using namespace hangtrace;
using namespace hangtrace::procfs;
using hangtrace::testing::procfs_fixture;

using hangtrace::testing::for_each_truncation;

// ---- stat -------------------------------------------------------------------

TEST(ProcfsStat, ParsesPythonProcess) {
  auto st = parse_stat(procfs_fixture("stat_python"));
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
  // Where its stack and argv are (the daemon's scan tells an exec by them).
  EXPECT_EQ(st->start_stack, 140737146677488u);
  EXPECT_EQ(st->arg_start, 140737146685573u);
  EXPECT_EQ(st->arg_end, 140737146685648u);
  EXPECT_EQ(st->exit_signal, 17);
  EXPECT_EQ(st->exit_code, 0);
}

TEST(ProcfsStat, CommWithSpacesAndParentheses) {
  // prctl(PR_SET_NAME, "w) (x y:z") on a thread.
  auto st = parse_stat(procfs_fixture("stat_thread_weird_comm"));
  ASSERT_TRUE(st.ok()) << st.error();
  EXPECT_EQ(st->pid, 7693);
  EXPECT_EQ(st->comm, "w) (x y:z");
  EXPECT_EQ(st->state, 'S');
  EXPECT_EQ(st->ppid, 7649);
  EXPECT_EQ(st->num_threads, 2);
  EXPECT_EQ(st->exit_signal, -1);  // threads do not signal the parent
}

TEST(ProcfsStat, ZombieKeepsItsWaitStatus) {
  auto st = parse_stat(procfs_fixture("stat_zombie"));
  ASSERT_TRUE(st.ok()) << st.error();
  EXPECT_EQ(st->state, 'Z');
  EXPECT_EQ(st->ppid, 6968);
  EXPECT_EQ(st->exit_code, 3 << 8);  // _exit(3)
  EXPECT_EQ(st->start_stack, 0u) << "no address space any more";
  EXPECT_EQ(st->arg_start, 0u);
}

TEST(ProcfsStat, KernelThreadHasPfKthread) {
  auto st = parse_stat(procfs_fixture("stat_kthreadd"));
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
  std::string text = procfs_fixture("stat_python");
  // Cut inside the comm or before the start time: must fail.
  for (size_t n = 0; n < text.find("44377"); ++n) {
    EXPECT_FALSE(parse_stat(std::string_view(text).substr(0, n)).ok()) << n;
  }
  for_each_truncation(text, [](std::string_view t) { (void)parse_stat(t); });
}

// ---- status -------------------------------------------------------------------

TEST(ProcfsStatus, ParsesPythonProcess) {
  auto st = parse_status(procfs_fixture("status_python"));
  ASSERT_TRUE(st.ok()) << st.error();
  EXPECT_EQ(st->name, "python3");
  EXPECT_EQ(st->state, 'R');
  EXPECT_EQ(st->tgid, 6968);
  EXPECT_EQ(st->pid, 6968);
  EXPECT_EQ(st->ppid, 6962);
  EXPECT_EQ(st->threads, 1);
  EXPECT_EQ(st->ns_pids, (std::vector<int>{6968}));
}

// A process in a container: its pid on the host first, the container's last.
TEST(ProcfsStatus, NamespacePids) {
  auto st = parse_status("Name:\tpython3\nTgid:\t8974\nPid:\t8974\nPPid:\t8970\nNSpid:\t8974\t31\t1\n");
  ASSERT_TRUE(st.ok()) << st.error();
  EXPECT_EQ(st->ns_pids, (std::vector<int>{8974, 31, 1}));
  std::string deep = "Name:\tx\nTgid:\t5\nPPid:\t1\nNSpid:";
  for (int i = 0; i < 100; ++i) deep += "\t7";
  st = parse_status(deep + "\n");
  ASSERT_TRUE(st.ok()) << st.error();
  EXPECT_EQ(st->ns_pids.size(), kMaxPidNamespaceDepth);  // a hostile line is cut at the kernel's bound
  EXPECT_FALSE(parse_status("Name:\tx\nTgid:\t5\nPPid:\t1\nNSpid:\t5\tq\n").ok());
}

// The signals with a handler and those blocked (in sigsuspend: its mask).
TEST(ProcfsStatus, CaughtAndBlockedSignals) {
  auto st = parse_status(
      "Name:\ttimeout\nTgid:\t5\nPPid:\t1\nSigBlk:\t0000000000000000\nSigCgt:\t0000000180014a07\n");
  ASSERT_TRUE(st.ok()) << st.error();
  EXPECT_EQ(st->signals_caught, 0x180014a07u);
  EXPECT_EQ(st->signals_blocked, 0u);
  st = parse_status("Name:\tx\nTgid:\t5\nPPid:\t1\nSigCgt:\tzz\n");
  ASSERT_TRUE(st.ok()) << st.error();
  EXPECT_FALSE(st->signals_caught);  // unreadable: unknown, never "none"
  EXPECT_FALSE(st->signals_blocked);
}

TEST(ProcfsStatus, ThreadWithColonInName) {
  auto st = parse_status(procfs_fixture("status_thread_weird_comm"));
  ASSERT_TRUE(st.ok()) << st.error();
  EXPECT_EQ(st->name, "w) (x y:z");
  EXPECT_EQ(st->tgid, 7652);
  EXPECT_EQ(st->pid, 7693);
  EXPECT_EQ(st->ppid, 7649);
}

TEST(ProcfsStatus, ContextSwitches) {
  auto st = parse_status(procfs_fixture("status_kthreadd"));
  ASSERT_TRUE(st.ok()) << st.error();
  EXPECT_EQ(st->name, "kthreadd");
  EXPECT_EQ(st->voluntary_ctxt_switches, 66u);
  EXPECT_EQ(st->nonvoluntary_ctxt_switches, 0u);
  auto zombie = parse_status(procfs_fixture("status_zombie"));
  ASSERT_TRUE(zombie.ok()) << zombie.error();
  EXPECT_EQ(zombie->state, 'Z');
  EXPECT_EQ(zombie->voluntary_ctxt_switches, 1u);
}

TEST(ProcfsStatus, MalformedInputFails) {
  EXPECT_FALSE(parse_status("").ok());
  EXPECT_FALSE(parse_status("Name:\tx\n").ok());
  EXPECT_FALSE(parse_status("Name:\tx\nTgid:\tabc\nPPid:\t1\n").ok());
  EXPECT_FALSE(parse_status("Name:\tx\nTgid:\t5\nPPid:\t1\nvoluntary_ctxt_switches:\t12x\n").ok());
  std::string text = procfs_fixture("status_python");
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
  EXPECT_EQ(sc->nr, HT_NR_futex);
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
  auto info = parse_fdinfo(procfs_fixture("fdinfo_eventfd"));
  ASSERT_TRUE(info.ok()) << info.error();
  EXPECT_EQ(info->flags, 02000002u);
  EXPECT_EQ(info->eventfd_id, 1u);
  EXPECT_EQ(info->eventfd_count, 3u);
}

TEST(ProcfsFdinfo, Epoll) {
  auto info = parse_fdinfo(procfs_fixture("fdinfo_epoll"));
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
  auto timer = parse_fdinfo(procfs_fixture("fdinfo_timerfd"));
  ASSERT_TRUE(timer.ok()) << timer.error();
  EXPECT_EQ(timer->flags, 02u);
  auto pidfd = parse_fdinfo(procfs_fixture("fdinfo_pidfd"));
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
  std::string text = procfs_fixture("fdinfo_epoll");
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
  auto maps = parse_maps(procfs_fixture("maps_python_shm"));
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
  auto maps = parse_maps(procfs_fixture("maps_spaces"));
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
  std::string text = procfs_fixture("maps_spaces");
  for_each_truncation(text.substr(0, 600), [](std::string_view t) { (void)parse_maps(t); });
}

// ---- io, schedstat, cmdline, namespaces -------------------------------------------

TEST(ProcfsIo, Parses) {
  auto io = parse_io(procfs_fixture("io_python"));
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
  auto statm = parse_statm(procfs_fixture("statm_python"));
  ASSERT_TRUE(statm.ok()) << statm.error();
  EXPECT_EQ(statm->size_pages, 6143u);
  EXPECT_EQ(statm->resident_pages, 4112u);
  EXPECT_FALSE(parse_statm("").ok());
  EXPECT_FALSE(parse_statm("6143").ok());
  EXPECT_FALSE(parse_statm("6143 41x2 2265").ok());
  for_each_truncation(procfs_fixture("statm_python"), parse_statm);
}

TEST(ProcfsComm, DropsTheNewline) {
  EXPECT_EQ(parse_comm(procfs_fixture("comm_python")), "python3");
  EXPECT_EQ(parse_comm("w) (x y:z\n"), "w) (x y:z");
  EXPECT_EQ(parse_comm("no newline"), "no newline");
  EXPECT_EQ(parse_comm(""), "");
}
