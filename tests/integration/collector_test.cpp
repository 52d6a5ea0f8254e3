// collect_snapshot against real blocked processes (tests/integration/repro/
// repro_collector_*.cpp). Needs root for another process's memory, pidfds and
// BPF; the error cases run anywhere.
#include "collector.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "hangtrace/syscall_nr.h"
#include "support.h"

namespace hangtrace::testing {
namespace {

using namespace std::chrono_literals;

constexpr int64_t kSysRead = HT_NR_read;
constexpr int64_t kSysPoll = HT_NR_poll;
constexpr int64_t kSysRecvfrom = HT_NR_recvfrom;
constexpr int64_t kSysFutex = HT_NR_futex;

CollectOptions fast_options() {
  CollectOptions o;
  o.use_bpf = false;
  o.min_progress_window_s = 0.05;
  return o;
}

const ThreadInfo* main_thread(const ProcessInfo& p) {
  for (const auto& t : p.threads) {
    if (t.tid == p.pid) return &t;
  }
  return nullptr;
}

const FdEntry* fd_entry(const ProcessInfo& p, int fd) {
  for (const auto& f : p.fds) {
    if (f.fd == fd) return &f;
  }
  return nullptr;
}

std::string describe(const Snapshot& s) {
  std::string out;
  for (const auto& p : s.processes) {
    out += "pid " + std::to_string(p.pid) + " (" + p.comm + ") role " +
           std::to_string(static_cast<int>(p.role)) + "\n";
    for (const auto& t : p.threads)
      out += "  tid " + std::to_string(t.tid) + " nr " + std::to_string(t.syscall.nr) + "\n";
    for (const auto& f : p.fds) out += "  fd " + std::to_string(f.fd) + " " + f.link + "\n";
  }
  for (const auto& l : s.limitations) out += "limitation: " + l + "\n";
  return out;
}

TEST(Collector, NoSuchProcess) {
  auto snap = collect_snapshot(999999999, fast_options());
  ASSERT_FALSE(snap.ok());
  EXPECT_NE(snap.error().find("no such process"), std::string::npos) << snap.error();
  EXPECT_NE(snap.error().find("999999999"), std::string::npos) << snap.error();
}

TEST(Collector, KernelThreadIsRefused) {
  auto snap = collect_snapshot(2, fast_options());  // kthreadd
  ASSERT_FALSE(snap.ok());
  EXPECT_NE(snap.error().find("kernel thread"), std::string::npos) << snap.error();
  EXPECT_NE(snap.error().find("kthreadd"), std::string::npos) << snap.error();
}

TEST(Collector, ForkedChildReadingAPipe) {
  HANGTRACE_REQUIRE_BPF();
  Workload w({repro_path("repro_collector_pipe")});
  auto fields = line_fields(w.wait_for_line("READY"));
  int parent = field_int(fields, "parent"), child = field_int(fields, "child");
  int read_fd = field_int(fields, "read_fd"), write_fd = field_int(fields, "write_fd");
  ASSERT_GT(child, 0) << "no READY line";
  ASSERT_EQ(parent, w.pid());
  ASSERT_EQ(wait_until_blocked(child, 20s, {kSysRead}), "");
  ASSERT_EQ(wait_until_blocked(parent), "");

  CollectOptions options;  // everything on, BPF included
  options.min_progress_window_s = 0.1;
  auto snap = collect_snapshot(parent, options);
  ASSERT_TRUE(snap.ok()) << snap.error();
  EXPECT_EQ(snap->target_pid, parent);
  EXPECT_FALSE(snap->hostname.empty());
  EXPECT_FALSE(snap->kernel_release.empty());
  EXPECT_FALSE(snap->hangtrace_version.empty());
  EXPECT_GT(snap->taken_at_unix, 1.6e9);
  EXPECT_GE(snap->sample_window_s, 0.1);
  EXPECT_NE(std::find(snap->local_addresses.begin(), snap->local_addresses.end(), "127.0.0.1"),
            snap->local_addresses.end());

  const ProcessInfo* p = snap->process(parent);
  const ProcessInfo* c = snap->process(child);
  ASSERT_TRUE(p && c) << describe(*snap);
  EXPECT_EQ(p->role, ProcessRole::Target);
  EXPECT_EQ(c->role, ProcessRole::Descendant);
  EXPECT_EQ(c->ppid, parent);
  EXPECT_NE(std::find(p->children.begin(), p->children.end(), child), p->children.end());
  EXPECT_NE(p->netns, 0u);

  const ThreadInfo* t = main_thread(*c);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->syscall.mode, SyscallState::Mode::InSyscall);
  EXPECT_EQ(t->syscall.nr, kSysRead);
  EXPECT_EQ(static_cast<int>(t->syscall.args[0]), read_fd);
  EXPECT_TRUE(t->progress_sampled);
  EXPECT_EQ(t->cpu_ns_end, t->cpu_ns_start) << "a blocked reader does not run";
  ASSERT_TRUE(t->kernel.has_value()) << describe(*snap);
  EXPECT_FALSE(t->kernel->stack.empty());
  EXPECT_FALSE(t->kernel->stack.front().symbol.empty());

  const FdEntry* reader = fd_entry(*c, read_fd);
  const FdEntry* writer = fd_entry(*p, write_fd);
  ASSERT_TRUE(reader && writer) << describe(*snap);
  EXPECT_EQ(reader->kind, FdKind::Pipe);
  EXPECT_EQ(writer->kind, FdKind::Pipe);
  EXPECT_NE(reader->inode, 0u);
  EXPECT_EQ(reader->inode, writer->inode);
  EXPECT_EQ(reader->queued_bytes, 0);
  EXPECT_EQ(reader->ready_events, 0) << "nothing to read, and the write end is open";
  EXPECT_EQ(writer->ready_events, -1) << "only waited-on fds are probed";
}

TEST(Collector, FutexInSharedAnonymousMemory) {
  HANGTRACE_REQUIRE_BPF();
  Workload w({repro_path("repro_collector_futex")});
  auto fields = line_fields(w.wait_for_line("READY"));
  int child = field_int(fields, "child");
  ASSERT_GT(child, 0) << "no READY line";
  uint64_t uaddr = std::stoull(fields["uaddr"], nullptr, 16);
  uint32_t value = static_cast<uint32_t>(std::stoul(fields["value"], nullptr, 16));
  ASSERT_EQ(wait_until_blocked(child, 20s, {kSysFutex}), "");

  auto snap = collect_snapshot(w.pid(), fast_options());
  ASSERT_TRUE(snap.ok()) << snap.error();
  const ProcessInfo* c = snap->process(child);
  ASSERT_TRUE(c) << describe(*snap);
  const ThreadInfo* t = main_thread(*c);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->syscall.nr, kSysFutex);
  EXPECT_EQ(t->syscall.args[0], uaddr);
  ASSERT_TRUE(t->memory.futex_word.has_value());
  EXPECT_EQ(*t->memory.futex_word, value);
  ASSERT_EQ(t->memory.futex_bytes.size(), 32u);
  EXPECT_EQ(t->memory.futex_bytes[0], value & 0xff);
  EXPECT_FALSE(t->memory.timeout_s.has_value()) << "NULL timeout: waits forever";

  const Mapping* shared = nullptr;
  for (const auto& m : c->maps) {
    if (uaddr >= m.start && uaddr < m.end) shared = &m;
  }
  ASSERT_TRUE(shared) << "no mapping holds the futex";
  EXPECT_TRUE(shared->shared());
}

// repro_collector_socketpair, started by `argv` (the repro itself or a
// launcher that execs it), snapshotted once its child blocks in recvfrom:
// the two processes and their ends of the socket pair.
struct SocketpairSnapshot {
  std::unique_ptr<Workload> w;
  std::optional<Snapshot> snap;
  const ProcessInfo *p = nullptr, *c = nullptr;
  const FdEntry *parent_end = nullptr, *child_end = nullptr;
  const SocketInfo *a = nullptr, *b = nullptr;
};

void snapshot_socketpair(const std::vector<std::string>& argv, const std::string& no_ready,
                         SocketpairSnapshot& out) {
  out.w = std::make_unique<Workload>(argv);
  Workload& w = *out.w;
  auto fields = line_fields(w.wait_for_line("READY"));
  int child = field_int(fields, "child");
  ASSERT_GT(child, 0) << no_ready;
  ASSERT_EQ(wait_until_blocked(child, 20s, {kSysRecvfrom}), "");

  auto snap = collect_snapshot(w.pid(), fast_options());
  ASSERT_TRUE(snap.ok()) << snap.error();
  out.snap = std::move(*snap);
  out.p = out.snap->process(w.pid());
  out.c = out.snap->process(child);
  ASSERT_TRUE(out.p && out.c);
  out.parent_end = fd_entry(*out.p, field_int(fields, "parent_fd"));
  out.child_end = fd_entry(*out.c, field_int(fields, "child_fd"));
  ASSERT_TRUE(out.parent_end && out.child_end) << describe(*out.snap);
  out.a = out.snap->socket(out.parent_end->inode);
  out.b = out.snap->socket(out.child_end->inode);
  ASSERT_TRUE(out.a && out.b) << describe(*out.snap);
}

TEST(Collector, UnixSocketpairPeers) {
  HANGTRACE_REQUIRE_BPF();
  SocketpairSnapshot s;
  ASSERT_NO_FATAL_FAILURE(
      snapshot_socketpair({repro_path("repro_collector_socketpair")}, "no READY line", s));
  ASSERT_EQ(s.parent_end->kind, FdKind::Socket);
  ASSERT_EQ(s.child_end->kind, FdKind::Socket);
  EXPECT_EQ(s.a->family, "unix");
  EXPECT_EQ(s.a->state, "CONNECTED");
  EXPECT_EQ(s.a->peer_inode, s.b->inode);
  EXPECT_EQ(s.b->peer_inode, s.a->inode);
  EXPECT_EQ(s.child_end->queued_bytes, 0);
  EXPECT_EQ(s.child_end->ready_events & 1 /*POLLIN*/, 0);
}

TEST(Collector, TcpServerInAnotherProcessIsAPeer) {
  HANGTRACE_REQUIRE_BPF();
  Workload server({repro_path("repro_collector_tcp_server")});
  auto server_fields = line_fields(server.wait_for_line("READY"));
  int port = field_int(server_fields, "port");
  ASSERT_GT(port, 0) << "server did not start";
  Workload client({repro_path("repro_collector_tcp_client"), std::to_string(port)});
  int client_fd = field_int(line_fields(client.wait_for_line("READY")), "fd");
  int server_fd = field_int(line_fields(server.wait_for_line("ACCEPTED")), "fd");
  ASSERT_GT(client_fd, 0);
  ASSERT_GT(server_fd, 0);
  ASSERT_EQ(wait_until_blocked(client.pid(), 20s, {kSysRecvfrom}), "");
  ASSERT_EQ(wait_until_blocked(server.pid(), 20s, {kSysRecvfrom}), "");

  auto snap = collect_snapshot(client.pid(), fast_options());
  ASSERT_TRUE(snap.ok()) << snap.error();
  const ProcessInfo* c = snap->process(client.pid());
  const ProcessInfo* s = snap->process(server.pid());
  ASSERT_TRUE(c) << describe(*snap);
  ASSERT_TRUE(s) << "the server was not found as a peer\n" << describe(*snap);
  EXPECT_EQ(c->role, ProcessRole::Target);
  EXPECT_EQ(s->role, ProcessRole::Peer);
  ASSERT_FALSE(s->threads.empty());
  EXPECT_EQ(s->threads[0].syscall.nr, kSysRecvfrom) << "peers get threads and syscalls too";

  const FdEntry* client_end = fd_entry(*c, client_fd);
  const FdEntry* server_end = fd_entry(*s, server_fd);
  ASSERT_TRUE(client_end && server_end) << describe(*snap);
  const SocketInfo* cs = snap->socket(client_end->inode);
  const SocketInfo* ss = snap->socket(server_end->inode);
  ASSERT_TRUE(cs && ss) << describe(*snap);
  EXPECT_EQ(cs->family, "tcp");
  EXPECT_EQ(cs->state, "ESTABLISHED");
  EXPECT_EQ(cs->remote, "127.0.0.1:" + std::to_string(port));
  EXPECT_EQ(ss->local, "127.0.0.1:" + std::to_string(port));
  EXPECT_TRUE(cs->remote_is_local_host);
  EXPECT_EQ(cs->peer_inode, ss->inode);
  EXPECT_EQ(ss->peer_inode, cs->inode);
  // The server's listening socket is its own fd, so it is kept too.
  bool has_listener = std::any_of(snap->sockets.begin(), snap->sockets.end(),
                                  [](const SocketInfo& x) { return x.state == "LISTEN"; });
  EXPECT_TRUE(has_listener);
}

TEST(Collector, PollOnTwoFdsWithTimeout) {
  HANGTRACE_REQUIRE_BPF();
  Workload w({repro_path("repro_collector_poll")});
  auto fields = line_fields(w.wait_for_line("READY"));
  int pipe_fd = field_int(fields, "pipe_fd"), socket_fd = field_int(fields, "socket_fd");
  ASSERT_GT(pipe_fd, 0) << "no READY line";
  ASSERT_EQ(wait_until_blocked(w.pid(), 20s, {kSysPoll}), "");

  auto snap = collect_snapshot(w.pid(), fast_options());
  ASSERT_TRUE(snap.ok()) << snap.error();
  const ProcessInfo* p = snap->process(w.pid());
  ASSERT_TRUE(p);
  const ThreadInfo* t = main_thread(*p);
  ASSERT_TRUE(t);
  ASSERT_EQ(t->syscall.nr, kSysPoll) << describe(*snap);
  ASSERT_EQ(t->memory.poll_fds.size(), 2u);
  EXPECT_EQ(t->memory.poll_fds[0], (std::pair<int, uint32_t>{pipe_fd, 1 /*POLLIN*/}));
  EXPECT_EQ(t->memory.poll_fds[1], (std::pair<int, uint32_t>{socket_fd, 1}));
  ASSERT_TRUE(t->memory.timeout_s.has_value());
  EXPECT_NEAR(*t->memory.timeout_s, 5.0, 0.01);
  EXPECT_FALSE(t->memory.timeout_absolute);
  // Both polled fds were probed, and neither is readable.
  for (int fd : {pipe_fd, socket_fd}) {
    const FdEntry* f = fd_entry(*p, fd);
    ASSERT_TRUE(f);
    EXPECT_GE(f->ready_events, 0) << "fd " << fd;
    EXPECT_EQ(f->ready_events & 1, 0) << "fd " << fd;
    EXPECT_EQ(f->queued_bytes, 0) << "fd " << fd;
  }
}

TEST(Collector, LeavesNoDuplicatedFdsBehind) {
  HANGTRACE_REQUIRE_BPF();
  Workload w({repro_path("repro_collector_poll")});
  ASSERT_FALSE(w.wait_for_line("READY").empty());
  ASSERT_EQ(wait_until_blocked(w.pid(), 20s, {kSysPoll}), "");
  auto open_fds = [] {
    int count = 0;
    if (DIR* dir = opendir("/proc/self/fd")) {
      while (dirent* e = readdir(dir)) count += e->d_name[0] != '.';
      closedir(dir);
    }
    return count;
  };
  int before = open_fds();
  CollectOptions options;  // BPF, peers and probes all on
  options.min_progress_window_s = 0.05;
  auto snap = collect_snapshot(w.pid(), options);
  ASSERT_TRUE(snap.ok()) << snap.error();
  EXPECT_EQ(open_fds(), before) << "pidfds, fd duplicates or BPF objects left open";
}

TEST(Collector, ZombieChildIsKeptWithItsExitCode) {
  HANGTRACE_REQUIRE_BPF();
  Workload w({repro_path("repro_collector_zombie")});
  auto fields = line_fields(w.wait_for_line("READY"));
  int child = field_int(fields, "child");
  ASSERT_GT(child, 0) << "no READY line";

  auto snap = collect_snapshot(w.pid(), fast_options());
  ASSERT_TRUE(snap.ok()) << snap.error();
  const ProcessInfo* p = snap->process(w.pid());
  const ProcessInfo* z = snap->process(child);
  ASSERT_TRUE(p && z) << describe(*snap);
  EXPECT_EQ(z->state, 'Z');
  EXPECT_EQ(z->role, ProcessRole::Descendant);
  EXPECT_EQ(z->exit_signal, 7);
  EXPECT_TRUE(z->fds.empty());
  EXPECT_NE(std::find(p->children.begin(), p->children.end(), child), p->children.end());

  // A zombie as the target has nothing left to examine.
  auto of_zombie = collect_snapshot(child, fast_options());
  ASSERT_FALSE(of_zombie.ok());
  EXPECT_NE(of_zombie.error().find("zombie"), std::string::npos) << of_zombie.error();
}

TEST(Collector, TimedFutexSelectAndEpollWaits) {
  HANGTRACE_REQUIRE_BPF();
  Workload w({repro_path("repro_collector_waits")});
  auto fields = line_fields(w.wait_for_line("READY"));
  int pid = field_int(fields, "pid");
  ASSERT_EQ(pid, w.pid()) << "no READY line";
  ASSERT_EQ(wait_until_blocked(pid, 20s,
                               {HT_NR_pause, HT_NR_futex, HT_NR_select, HT_NR_pselect6, HT_NR_epoll_wait,
                                HT_NR_epoll_pwait}),
            "");

  auto snap = collect_snapshot(pid, fast_options());
  ASSERT_TRUE(snap.ok()) << snap.error();
  const ProcessInfo* p = snap->process(pid);
  ASSERT_TRUE(p);
  auto thread = [&](const std::string& key) -> const ThreadInfo* {
    for (const auto& t : p->threads) {
      if (t.tid == field_int(fields, key)) return &t;
    }
    return nullptr;
  };
  const ThreadInfo* cond = thread("cond");
  const ThreadInfo* sel = thread("select");
  const ThreadInfo* ep = thread("epoll");
  ASSERT_TRUE(cond && sel && ep) << describe(*snap);

  // pthread_cond_timedwait: an absolute CLOCK_REALTIME deadline ~100 s ahead.
  EXPECT_EQ(cond->syscall.nr, kSysFutex);
  ASSERT_TRUE(cond->memory.timeout_s.has_value());
  EXPECT_TRUE(cond->memory.timeout_absolute);
  EXPECT_GT(*cond->memory.timeout_s, 80.0);
  EXPECT_LE(*cond->memory.timeout_s, 100.5);
  EXPECT_TRUE(cond->memory.futex_word.has_value());
  bool futex_mapped = std::any_of(p->maps.begin(), p->maps.end(), [&](const Mapping& m) {
    return cond->syscall.args[0] >= m.start && cond->syscall.args[0] < m.end;
  });
  EXPECT_TRUE(futex_mapped) << "the mapping of a waited-on futex is kept";

  // select (glibc may issue pselect6): the fd_sets become poll_fds.
  EXPECT_TRUE(sel->syscall.nr == HT_NR_select || sel->syscall.nr == HT_NR_pselect6) << sel->syscall.nr;
  int pipe_fd = field_int(fields, "pipe_fd"), full_fd = field_int(fields, "full_fd");
  std::vector<std::pair<int, uint32_t>> expected = {{pipe_fd, 1 /*POLLIN*/}, {full_fd, 4 /*POLLOUT*/}};
  EXPECT_EQ(sel->memory.poll_fds, expected);
  ASSERT_TRUE(sel->memory.timeout_s.has_value());
  EXPECT_GT(*sel->memory.timeout_s, 0.0);
  EXPECT_LE(*sel->memory.timeout_s, 7.01);
  const FdEntry* full = fd_entry(*p, full_fd);
  ASSERT_TRUE(full);
  EXPECT_EQ(full->ready_events & 4 /*POLLOUT*/, 0) << "the pipe is full";
  EXPECT_EQ(full->queued_bytes, 65536);

  // epoll_wait(-1): no timeout; the watched fds are probed.
  EXPECT_TRUE(ep->syscall.nr == HT_NR_epoll_wait || ep->syscall.nr == HT_NR_epoll_pwait) << ep->syscall.nr;
  EXPECT_FALSE(ep->memory.timeout_s.has_value());
  const FdEntry* epoll = fd_entry(*p, field_int(fields, "epoll_fd"));
  ASSERT_TRUE(epoll);
  EXPECT_EQ(epoll->kind, FdKind::Epoll);
  ASSERT_EQ(epoll->epoll.size(), 2u);
  const FdEntry* efd = fd_entry(*p, field_int(fields, "eventfd"));
  ASSERT_TRUE(efd);
  EXPECT_EQ(efd->kind, FdKind::EventFd);
  EXPECT_TRUE(efd->eventfd_id.has_value());
  EXPECT_EQ(efd->ready_events, 4) << "an eventfd at 0 is writable, not readable";
  const FdEntry* pipe_end = fd_entry(*p, pipe_fd);
  ASSERT_TRUE(pipe_end);
  EXPECT_EQ(pipe_end->ready_events, 0);
  EXPECT_EQ(epoll->ready_events, 0);
}

TEST(Collector, DevShmSegments) {
  HANGTRACE_REQUIRE_BPF();
  Workload w({repro_path("repro_collector_shm")});
  auto fields = line_fields(w.wait_for_line("READY"));
  std::string name = fields["name"];
  ASSERT_FALSE(name.empty()) << "no READY line";
  struct Cleanup {
    std::string path;
    ~Cleanup() { unlink(path.c_str()); }
  } cleanup{"/dev/shm/" + name};

  auto snap = collect_snapshot(w.pid(), fast_options());
  ASSERT_TRUE(snap.ok()) << snap.error();
  const ShmInfo& shm = snap->shm;
  ASSERT_TRUE(shm.available) << describe(*snap);
  EXPECT_GT(shm.size_bytes, 0u);
  EXPECT_GE(shm.used_bytes, (1u << 20) + (64u << 10));
  EXPECT_GE(shm.unlinked_mapped_bytes, 64u << 10);
  auto segment = std::find_if(shm.largest.begin(), shm.largest.end(),
                              [&](const ShmSegment& s) { return s.name == name; });
  ASSERT_NE(segment, shm.largest.end()) << "not among the largest segments";
  EXPECT_EQ(segment->size_bytes, 1u << 20);
  EXPECT_GE(segment->allocated_bytes, 1u << 20);
  EXPECT_EQ(segment->mapped_by, std::vector<int>{w.pid()});
  const ProcessInfo* p = snap->process(w.pid());
  ASSERT_TRUE(p);
  int shm_maps = 0;
  for (const auto& m : p->maps) shm_maps += m.path.rfind("/dev/shm/", 0) == 0;
  EXPECT_EQ(shm_maps, 2);
}

TEST(Collector, SurvivesThreadsAndChildrenComingAndGoing) {
  HANGTRACE_REQUIRE_BPF();
  Workload w({repro_path("repro_collector_churn")});
  ASSERT_FALSE(w.wait_for_line("READY").empty());
  CollectOptions options = fast_options();
  options.min_progress_window_s = 0;
  for (int i = 0; i < 20; ++i) {
    auto snap = collect_snapshot(w.pid(), options);
    ASSERT_TRUE(snap.ok()) << "round " << i << ": " << snap.error();
    ASSERT_TRUE(snap->process(w.pid()));
  }
}

TEST(Collector, TargetInAnotherNetworkNamespace) {
  HANGTRACE_REQUIRE_BPF();
  if (access("/usr/bin/unshare", X_OK) != 0) GTEST_SKIP() << "needs unshare(1)";
  // unshare execs the repro in place, so the pid is the same.
  SocketpairSnapshot s;
  ASSERT_NO_FATAL_FAILURE(
      snapshot_socketpair({"/usr/bin/unshare", "--net", repro_path("repro_collector_socketpair")},
                          "no READY line (unshare --net failed?)", s));
  struct stat own {};
  ASSERT_EQ(stat("/proc/self/ns/net", &own), 0);
  EXPECT_NE(s.p->netns, static_cast<uint64_t>(own.st_ino)) << "the repro did not get its own netns";
  EXPECT_EQ(s.a->netns, s.p->netns);
  EXPECT_EQ(s.a->peer_inode, s.b->inode) << "sock_diag must run inside the target's netns";
  EXPECT_EQ(s.b->peer_inode, s.a->inode);
  for (const auto& l : s.snap->limitations) EXPECT_EQ(l.find("unix socket peers"), std::string::npos) << l;
}

TEST(Collector, TargetExitingDuringTheSnapshotIsAnError) {
  HANGTRACE_REQUIRE_BPF();
  // Exits ~0.1 s in; the progress window keeps the snapshot open past that.
  // Our Workload does not reap it, so it turns into a zombie, which counts as gone.
  Workload w({"/bin/sleep", "0.1"});
  CollectOptions options = fast_options();
  options.min_progress_window_s = 1.0;
  auto snap = collect_snapshot(w.pid(), options);
  ASSERT_FALSE(snap.ok());
  EXPECT_NE(snap.error().find("exited"), std::string::npos) << snap.error();
}

TEST(Collector, LeaderThreadExitedButProcessLives) {
  HANGTRACE_REQUIRE_BPF();
  Workload w({repro_path("repro_collector_leader_exit")});
  auto fields = line_fields(w.wait_for_line("READY"));
  int reader = field_int(fields, "reader");
  ASSERT_GT(reader, 0) << "no READY line";
  // Until the leader is a zombie, this is just a process with two threads.
  auto deadline = std::chrono::steady_clock::now() + 20s;
  for (;;) {
    auto threads = ::hangtrace::testing::thread_states(w.pid());
    bool leader_gone = false, reader_blocked = false;
    for (const auto& t : threads) {
      if (t.tid == w.pid()) leader_gone = t.state == 'Z';
      if (t.tid == reader) reader_blocked = t.state == 'S' && t.syscall_nr == kSysRead;
    }
    if (leader_gone && reader_blocked) break;
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << ::hangtrace::testing::describe_threads(w.pid());
    std::this_thread::sleep_for(10ms);
  }

  auto snap = collect_snapshot(w.pid(), fast_options());
  ASSERT_TRUE(snap.ok()) << snap.error();
  const ProcessInfo* p = snap->process(w.pid());
  ASSERT_TRUE(p);
  EXPECT_EQ(p->state, 'Z');
  EXPECT_NE(p->netns, 0u);
  const FdEntry* f = fd_entry(*p, field_int(fields, "read_fd"));
  ASSERT_TRUE(f) << "a live process keeps its fds\n" << describe(*snap);
  EXPECT_EQ(f->kind, FdKind::Pipe);
  EXPECT_EQ(f->queued_bytes, 0);
  auto t = std::find_if(p->threads.begin(), p->threads.end(),
                        [&](const ThreadInfo& x) { return x.tid == reader; });
  ASSERT_NE(t, p->threads.end());
  EXPECT_EQ(t->syscall.nr, kSysRead);
  EXPECT_FALSE(p->maps.empty() && p->fds.empty());
}

}  // namespace
}  // namespace hangtrace::testing
