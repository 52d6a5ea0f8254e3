// ProcFs and the readers under it, over the real /proc (this test process)
// and over proc roots laid out by hand from fixtures.
#include "hangtrace/procfs.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "fixture_file.h"
#include "temp_dir.h"

using namespace hangtrace;
using namespace hangtrace::procfs;
using hangtrace::testing::procfs_fixture;

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
  write(pid_dir + "/stat", procfs_fixture("stat_python"));
  write(pid_dir + "/maps", procfs_fixture("maps_python_shm"));
  write(pid_dir + "/net/tcp", procfs_fixture("net_tcp"));
  write(pid_dir + "/net/unix", procfs_fixture("net_unix"));
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
  // A command line past the 1 MiB bound keeps its first MiB, marked cut.
  std::string huge = "python3\0" + std::string(size_t{3} << 20, 'a') + '\0';
  huge[7] = '\0';
  write(pid_dir + "/cmdline", huge);
  auto cut = proc.cmdline(6968);
  ASSERT_TRUE(cut.ok()) << cut.error();
  EXPECT_EQ(cut->substr(0, 9), "python3 a");
  EXPECT_EQ(cut->substr(cut->size() - 4), " ...");
  EXPECT_LE(cut->size(), (size_t{1} << 20) + 4);
  EXPECT_GT(cut->size(), (size_t{1} << 20) - 16);
  write(pid_dir + "/status", "Name:\tx\n");  // truncated
  auto status = proc.status(6968);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.error().find("/6968/status"), std::string::npos);
}

// What a process controls is read to a bound and said cut (issue 34): a
// command line, an environment (to its last whole entry), a cgroup list (to
// its last whole line), an epoll's watch list (to the bound, then counted).
TEST(ProcfsReaders, TextATargetControlsIsReadToItsBoundAndSaidCut) {
  hangtrace::testing::TempDir dir("ht-procfs-bounds");
  const std::string pid_dir = dir.file("7");
  std::filesystem::create_directories(pid_dir + "/fdinfo");
  auto write = [](const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
  };
  ProcFs proc(dir.path.string());

  write(pid_dir + "/cmdline", std::string("python3\0train.py\0", 17));
  auto whole = proc.cmdline_text(7);
  ASSERT_TRUE(whole.ok()) << whole.error();
  EXPECT_EQ(whole->text, "python3 train.py");
  EXPECT_FALSE(whole->cut);
  write(pid_dir + "/cmdline", std::string(kMaxCmdlineBytes, 'a') + '\0');  // the NUL is past the bound
  auto cut = proc.cmdline_text(7);
  ASSERT_TRUE(cut.ok()) << cut.error();
  EXPECT_TRUE(cut->cut);
  EXPECT_EQ(cut->text.size(), kMaxCmdlineBytes);

  std::string environ = "RANK=3\0";
  while (environ.size() < kMaxEnvironBytes) environ += "PAD=" + std::string(1000, 'p') + '\0';
  environ += "WORLD_SIZE=8\0";
  write(pid_dir + "/environ", environ);
  auto env = proc.environ_text(7);
  ASSERT_TRUE(env.ok()) << env.error();
  EXPECT_TRUE(env->cut);
  EXPECT_LE(env->text.size(), kMaxEnvironBytes);
  EXPECT_EQ(env->text.back(), '\0');  // whole entries only
  EXPECT_EQ(env->text.find("WORLD_SIZE"), std::string::npos);
  EXPECT_EQ(env->text.rfind("RANK=3", 0), 0u);

  std::string cgroup;
  while (cgroup.size() < kMaxCgroupBytes) cgroup += "0::/" + std::string(200, 'c') + "\n";
  write(pid_dir + "/cgroup", cgroup);
  auto cg = proc.cgroup_text(7);
  ASSERT_TRUE(cg.ok()) << cg.error();
  EXPECT_TRUE(cg->cut);
  EXPECT_EQ(cg->text.back(), '\n');
  EXPECT_EQ(cg->text.size() % 205, 0u);

  std::string fdinfo = "pos:\t0\nflags:\t02000002\nmnt_id:\t17\nino:\t1038\n";
  for (int fd = 0; fd < 5000; ++fd)
    fdinfo += "tfd: " + std::to_string(fd) + " events: 19 data: 3  pos:0 ino:2208 sdev:f\n";
  write(pid_dir + "/fdinfo/9", fdinfo);
  auto info = proc.fdinfo(7, 9);
  ASSERT_TRUE(info.ok()) << info.error();
  EXPECT_EQ(info->epoll.size(), kMaxEpollWatches);
  EXPECT_EQ(info->epoll_watches_left_out, 5000 - kMaxEpollWatches);
  EXPECT_EQ(info->epoll.back().target_fd, static_cast<int>(kMaxEpollWatches) - 1);
  // Past the byte bound: cut at a line, at least one left out.
  std::string huge = "pos:\t0\nflags:\t02\n";
  while (huge.size() < kMaxFdinfoBytes + 4096) huge += "tfd: 1 events: 19 data: 3  pos:0 ino:2208 sdev:f\n";
  write(pid_dir + "/fdinfo/10", huge);
  auto big = proc.fdinfo(7, 10);
  ASSERT_TRUE(big.ok()) << big.error();
  EXPECT_EQ(big->epoll.size(), kMaxEpollWatches);
  EXPECT_GT(big->epoll_watches_left_out, 0u);
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
  write(pid / "comm", procfs_fixture("comm_python"));
  write(pid / "environ", std::string("RANK=3\0WORLD_SIZE=8\0", 21));
  write(pid / "cgroup", "0::/kubepods/pod-a/c1\n");
  write(self / "statm", procfs_fixture("statm_python"));
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
