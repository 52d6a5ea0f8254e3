// collect_snapshot: one pass over /proc (plus BPF, process memory, pidfds and
// sock_diag) that records what a hung process tree is waiting on.
//
// Order matters:
//   1. validate the target, scan /proc once for the process tree;
//   2. per process: fds, threads, syscalls and the memory those syscalls
//      point at (cheap, and the peers depend on it);
//   3. socket tables of every network namespace involved, then one scan of
//      all fds on the host for the holders of the other ends (peers);
//   4. first progress sample; BPF, maps, readiness probes, /dev/shm; sleep
//      out the rest of the window; second progress sample.
// Anything that vanishes mid-way is skipped; only the target vanishing is an
// error.
#include "collector.h"

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fmt/format.h>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "fd_probe.h"
#include "hangtrace/collectives.h"
#include "hangtrace/kallsyms.h"
#include "hangtrace/procfs.h"
#include "hangtrace/syscalls.h"
#include "netlink_diag.h"
#include "python_stacks.h"
#include "task_iter.h"
#include "wait_memory.h"

namespace hangtrace {

namespace {

using procfs::is_gone_errno;
using procfs::ProcFs;

constexpr size_t kMaxLimitations = 40;
constexpr size_t kMaxFdsPerProcess = 1 << 17;
constexpr size_t kLargestShmSegments = 10;
constexpr size_t kMaxShmEntries = 1 << 17;
constexpr size_t kMaxPeers = 64;
constexpr auto kMemoryLockProbeTimeout = std::chrono::seconds(1);

double wall_clock_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double monotonic_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Both clocks read back to back: live events carry CLOCK_MONOTONIC, people
// read wall-clock time, and blocked times are durations back from this instant.
void record_sample_clocks(Snapshot& snap) {
  timespec mono{}, wall{};
  clock_gettime(CLOCK_MONOTONIC, &mono);
  clock_gettime(CLOCK_REALTIME, &wall);
  snap.sampled_at_monotonic_ns = static_cast<uint64_t>(mono.tv_sec) * 1'000'000'000ull + mono.tv_nsec;
  snap.sampled_at_unix = static_cast<double>(wall.tv_sec) + wall.tv_nsec / 1e9;
}

// WEXITSTATUS for a normal exit, 128+signal for a killed process (the shell
// convention, so SIGKILL by the OOM killer reads as the familiar 137).
int exit_code_from_wait_status(int status) {
  if ((status & 0x7f) == 0) return (status >> 8) & 0xff;
  return 128 + (status & 0x7f);
}

// Reading a process's cmdline, maps or memory takes its mmap_lock. A thread
// stuck in the kernel while holding it (or a writer queued behind such a
// holder) would block hangtrace forever, exactly when it is needed. So the
// cmdline is read by a throwaway thread first: if that does not finish in
// time (nullopt), the process's memory is left alone. The thread is
// detached: it ends when the lock frees up, or with hangtrace.
// The thread gets its own copy of the ProcFs: it may outlive the collector.
std::optional<Result<std::string>> read_cmdline_with_deadline(const ProcFs& proc, int id) {
  auto result = std::make_shared<std::promise<Result<std::string>>>();
  std::future<Result<std::string>> done = result->get_future();
  try {
    std::thread([result, proc, id] { result->set_value(proc.cmdline(id)); }).detach();
  } catch (const std::system_error&) {
    return proc.cmdline(id);  // no thread to spare: read it directly
  }
  if (done.wait_for(kMemoryLockProbeTimeout) != std::future_status::ready) return std::nullopt;
  return done.get();
}

// The socket tables of one network namespace, keyed by inode.
struct NetnsSockets {
  uint64_t netns = 0;
  int reader_pid = 0;  // whose /proc/PID/net we read
  std::unordered_map<uint64_t, SocketInfo> by_inode;
  std::unordered_map<uint64_t, std::string> remote_ip;  // inet sockets only
  // Listening TCP/UDP sockets by port, for connections not accepted yet.
  std::multimap<uint16_t, uint64_t> tcp_listeners;
};

struct ProgressSample {
  bool ok = false;
  uint64_t cpu_ns = 0;
  uint64_t io_bytes = 0;
};

class Collector {
 public:
  Collector(int target, const CollectOptions& options)
      : target_(target), options_(options), proc_(options.proc_root) {}

  Result<Snapshot> run();

 private:
  // ---- helpers ----
  void limitation(std::string line);
  void debug(const std::string& line) const {
    if (options_.verbosity >= 3) fmt::print(stderr, "hangtrace: {}\n", line);
  }
  std::optional<Error> validate_target();
  // A 'Z' process whose leader called pthread_exit still runs its other
  // threads, but /proc/PID/{fd,maps,ns,root} went with the leader: the same
  // files under /proc/TID of a live thread show them. Returns the id to use
  // in /proc paths, or nullopt when every thread has exited.
  std::optional<int> live_proc_id(int pid, const procfs::ProcStat& st) const;
  int proc_id(int pid) const {
    auto it = proc_ids_.find(pid);
    return it == proc_ids_.end() ? pid : it->second;
  }
  void scan_all_processes();
  std::vector<int> descendants_of(int pid) const;
  // Fills a ProcessInfo, or nullopt when the process is gone.
  std::optional<ProcessInfo> collect_process(int pid, ProcessRole role);
  void collect_fds(ProcessInfo& p);
  void collect_threads(ProcessInfo& p);
  std::vector<int> waited_fds(const ProcessInfo& p, const ThreadInfo& t) const;
  void load_network_namespace(uint64_t netns, int reader_pid);
  const SocketInfo* find_socket(uint64_t inode) const;
  void find_peers();
  ProgressSample sample_progress(int pid, int tid) const;
  void take_progress_samples(bool start);
  void collect_kernel_views();
  void collect_maps(ProcessInfo& p);
  void collect_native_stacks();
  void probe_readiness(ProcessInfo& p);
  void collect_shm();
  void assemble_sockets();
  bool target_still_there() const;

  int target_;
  CollectOptions options_;
  ProcFs proc_;
  Snapshot snap_;
  size_t dropped_limitations_ = 0;
  uint64_t target_start_time_ = 0;

  std::vector<int> all_pids_;                        // /proc at the start
  std::unordered_map<int, procfs::ProcStat> stats_;  // of all_pids_
  std::unordered_map<int, std::vector<int>> children_;
  std::unordered_map<int, std::vector<uint64_t>> futex_addresses_;  // by pid
  std::unordered_set<int> memory_blocked_;                          // pids whose mmap_lock did not come free
  std::unordered_set<int> exited_;                                  // zombies: no fds, maps or memory left
  std::unordered_map<int, int> proc_ids_;  // pid -> live tid, where the leader has exited
  std::map<uint64_t, NetnsSockets> netns_sockets_;
  uint64_t own_netns_ = 0;
  double progress_start_s_ = 0;
};

void Collector::limitation(std::string line) {
  if (std::find(snap_.limitations.begin(), snap_.limitations.end(), line) != snap_.limitations.end()) return;
  if (snap_.limitations.size() >= kMaxLimitations) {
    ++dropped_limitations_;
    return;
  }
  snap_.limitations.push_back(std::move(line));
}

// ---- 1. the target and the tree ------------------------------------------------

std::optional<int> Collector::live_proc_id(int pid, const procfs::ProcStat& st) const {
  if (st.state != 'Z' && st.state != 'X') return pid;
  auto tids = proc_.tids(pid);
  if (!tids) return std::nullopt;
  for (int tid : *tids) {
    auto t = proc_.thread_stat(pid, tid);
    if (t && t->state != 'Z' && t->state != 'X') return tid;
  }
  return std::nullopt;
}

std::optional<Error> Collector::validate_target() {
  if (target_ <= 0) return make_error(fmt::format("no such process: {}", target_));
  int err = 0;
  auto st = proc_.stat(target_, &err);
  if (!st) {
    if (is_gone_errno(err)) return make_error(fmt::format("no such process: {}", target_));
    return make_error(st.error());
  }
  if (st->is_kernel_thread())
    return make_error(fmt::format("{} is a kernel thread ({}), not a training job", target_, st->comm));
  // /proc/TID works for any thread, but the tree hangs off the process.
  if (auto status = proc_.status(target_); status && status->tgid != target_ && status->tgid > 0) {
    limitation(fmt::format("{} is a thread of process {}; examined the process", target_, status->tgid));
    target_ = status->tgid;
    st = proc_.stat(target_, &err);
    if (!st) return make_error(fmt::format("no such process: {}", target_));
  }
  if (!live_proc_id(target_, *st)) {
    std::string how =
        st->exit_code ? fmt::format(" with exit code {}", exit_code_from_wait_status(*st->exit_code)) : "";
    return make_error(
        fmt::format("{} ({}) has exited{} and is a zombie waiting for its parent {} to reap it; "
                    "there is nothing left to examine",
                    target_, st->comm, how, st->ppid));
  }
  target_start_time_ = st->start_time_ticks;
  return std::nullopt;
}

void Collector::scan_all_processes() {
  int err = 0;
  auto pids = proc_.pids(&err);
  if (!pids) {
    limitation(fmt::format("no descendants or peers: {}", pids.error()));
    return;
  }
  all_pids_ = std::move(*pids);
  for (int pid : all_pids_) {
    auto st = proc_.stat(pid);
    if (!st) continue;  // exited since the listing
    children_[st->ppid].push_back(pid);
    stats_.emplace(pid, std::move(*st));
  }
}

std::vector<int> Collector::descendants_of(int root) const {
  std::vector<int> out;
  // hangtrace itself, when run from inside the job's tree, is not part of it.
  std::unordered_set<int> seen{root, static_cast<int>(getpid())};
  std::vector<int> queue{root};
  // Bounded by the number of processes: each pid enters the queue once.
  for (size_t i = 0; i < queue.size(); ++i) {
    auto it = children_.find(queue[i]);
    if (it == children_.end()) continue;
    for (int child : it->second) {
      if (!seen.insert(child).second) continue;
      out.push_back(child);
      queue.push_back(child);
    }
  }
  return out;
}

// ---- 2. one process --------------------------------------------------------------

std::optional<ProcessInfo> Collector::collect_process(int pid, ProcessRole role) {
  int err = 0;
  auto st = proc_.stat(pid, &err);
  if (!st) {
    if (!is_gone_errno(err)) limitation(fmt::format("process {} skipped: {}", pid, st.error()));
    return std::nullopt;
  }
  ProcessInfo p;
  p.pid = pid;
  p.ppid = st->ppid;
  p.comm = st->comm;
  p.state = st->state;
  p.flags = st->flags;
  p.role = role;
  const std::optional<int> live_id = live_proc_id(pid, *st);
  const bool exited = !live_id;
  const int id = live_id.value_or(pid);
  if (id != pid) proc_ids_[pid] = id;
  if (exited && st->exit_code) p.exit_signal = exit_code_from_wait_status(*st->exit_code);
  if (!exited) {
    auto cmdline = read_cmdline_with_deadline(proc_, id);
    if (!cmdline) {
      memory_blocked_.insert(pid);
      limitation(
          fmt::format("memory of {} not read (cmdline, maps, syscall arguments): reading it blocked for over "
                      "{} s, so a thread of it probably holds its mmap_lock while stuck in the kernel",
                      pid, kMemoryLockProbeTimeout.count()));
    } else if (*cmdline) {
      p.cmdline = **cmdline;
      // The same lock as cmdline, which just came free.
      if (auto environ_bytes = proc_.environ(id)) {
        RankIdentity identity = parse_rank_environment(*environ_bytes);
        p.rank = identity.rank;
        p.world_size = identity.world_size;
        p.local_rank = identity.local_rank;
      }
    }
  }
  if (auto exe = proc_.exe(id)) p.exe = *exe;
  if (auto ns = proc_.namespace_inode(id, "net")) p.netns = *ns;
  if (auto ns = proc_.namespace_inode(id, "mnt")) p.mntns = *ns;
  if (auto it = children_.find(pid); it != children_.end()) p.children = it->second;
  std::string exe_name = p.exe.substr(p.exe.rfind('/') + 1);
  p.is_python = exe_name.rfind("python", 0) == 0;  // maps may still say so (collect_maps)
  if (exited)
    exited_.insert(pid);
  else
    collect_fds(p);
  collect_threads(p);
  return p;
}

void Collector::collect_fds(ProcessInfo& p) {
  int err = 0;
  const int id = proc_id(p.pid);
  auto fds = proc_.fds(id, &err);
  if (!fds) {
    if (!is_gone_errno(err)) limitation(fmt::format("no fds of {}: {}", p.pid, fds.error()));
    return;
  }
  if (fds->size() > kMaxFdsPerProcess) {
    limitation(fmt::format("process {} has {} fds; only the first {} examined", p.pid, fds->size(),
                           kMaxFdsPerProcess));
    fds->resize(kMaxFdsPerProcess);
  }
  for (int fd : *fds) {
    auto link = proc_.fd_link(id, fd);
    if (!link) continue;  // closed since the listing
    FdEntry e;
    e.fd = fd;
    e.link = *link;
    auto classified = procfs::classify_fd_link(*link);
    e.kind = classified.kind;
    e.inode = classified.inode;
    if (auto info = proc_.fdinfo(id, fd)) {
      e.flags = info->flags;
      e.pos = info->pos;
      e.eventfd_id = info->eventfd_id;
      e.epoll = std::move(info->epoll);
      if (e.inode == 0 && info->inode) e.inode = *info->inode;
    }
    p.fds.push_back(std::move(e));
  }
}

void Collector::collect_threads(ProcessInfo& p) {
  int err = 0;
  auto tids = proc_.tids(p.pid, &err);
  if (!tids) {
    if (!is_gone_errno(err)) limitation(fmt::format("no threads of {}: {}", p.pid, tids.error()));
    return;
  }
  for (int tid : *tids) {
    auto st = proc_.thread_stat(p.pid, tid, &err);
    if (!st) continue;  // the thread exited
    ThreadInfo t;
    t.tid = tid;
    t.comm = st->comm;
    t.state = st->state;
    if (auto status = proc_.thread_status(p.pid, tid)) {
      t.voluntary_switches = status->voluntary_ctxt_switches;
      t.involuntary_switches = status->nonvoluntary_ctxt_switches;
    }
    auto sc = proc_.thread_syscall(p.pid, tid, &err);
    if (sc) {
      t.syscall = *sc;
    } else if (!is_gone_errno(err) && p.state != 'Z') {
      limitation(fmt::format("syscalls of the threads of {} unknown: {}", p.pid,
                             err ? std::strerror(err) : sc.error()));
    }
    if (!memory_blocked_.count(p.pid)) {
      WaitMemoryRead read = read_wait_memory(t.tid, t.syscall);
      t.memory = std::move(read.memory);
      auto& addresses = futex_addresses_[p.pid];
      addresses.insert(addresses.end(), read.futex_addresses.begin(), read.futex_addresses.end());
    }
    p.threads.push_back(std::move(t));
  }
}

std::vector<int> Collector::waited_fds(const ProcessInfo& p, const ThreadInfo& t) const {
  std::vector<int> fds = directly_waited_fds(t.syscall, t.memory);
  if (t.syscall.mode == SyscallState::Mode::InSyscall &&
      describe_syscall(t.syscall.nr).wait == WaitClass::Epoll) {
    int epfd = static_cast<int>(t.syscall.args[0]);
    for (const auto& f : p.fds) {
      if (f.fd != epfd) continue;
      for (const auto& w : f.epoll) fds.push_back(w.target_fd);
    }
  }
  std::sort(fds.begin(), fds.end());
  fds.erase(std::unique(fds.begin(), fds.end()), fds.end());
  return fds;
}

// ---- 3. sockets and peers ----------------------------------------------------------

void Collector::load_network_namespace(uint64_t netns, int reader_pid) {
  if (netns_sockets_.count(netns)) return;
  NetnsSockets& ns = netns_sockets_[netns];
  ns.netns = netns;
  ns.reader_pid = reader_pid;

  // TCP/UDP: peer = the socket in the same table with the tuple reversed.
  std::map<std::string, uint64_t> by_tuple;
  std::vector<std::pair<uint64_t, std::string>> reverse_keys;
  auto tuple_key = [](const std::string& proto, const std::string& a_ip, uint16_t a_port,
                      const std::string& b_ip, uint16_t b_port) {
    return fmt::format("{}|{}|{}|{}|{}", proto, procfs::unmap_ipv4(a_ip), a_port, procfs::unmap_ipv4(b_ip),
                       b_port);
  };
  for (std::string table : {"tcp", "tcp6", "udp", "udp6"}) {
    int err = 0;
    auto entries = proc_.inet_sockets(reader_pid, table, &err);
    if (!entries) {
      if (err != ENOENT)  // a kernel without IPv6 has no tcp6
        limitation(fmt::format("{} sockets not resolved: {}", table, entries.error()));
      continue;
    }
    std::string proto = table.substr(0, 3);
    for (auto& e : *entries) {
      if (e.info.inode == 0) continue;  // not accepted yet, TIME_WAIT: no fd can hold it
      e.info.netns = netns;
      if (e.state_code == 10 /*LISTEN*/ && proto == "tcp")
        ns.tcp_listeners.emplace(e.local_port, e.info.inode);
      if (e.remote_port != 0) {
        by_tuple[tuple_key(proto, e.local_ip, e.local_port, e.remote_ip, e.remote_port)] = e.info.inode;
        reverse_keys.emplace_back(e.info.inode,
                                  tuple_key(proto, e.remote_ip, e.remote_port, e.local_ip, e.local_port));
      }
      ns.remote_ip[e.info.inode] = procfs::unmap_ipv4(e.remote_ip);
      ns.by_inode[e.info.inode] = std::move(e.info);
    }
  }
  for (const auto& [inode, key] : reverse_keys) {
    auto it = by_tuple.find(key);
    if (it != by_tuple.end() && it->second != inode) ns.by_inode[inode].peer_inode = it->second;
  }

  // Unix: /proc/net/unix for the state and the path, sock_diag for the peer.
  int err = 0;
  auto unix_entries = proc_.unix_sockets(reader_pid, &err);
  if (!unix_entries) {
    limitation(fmt::format("unix sockets not listed: {}", unix_entries.error()));
  } else {
    for (const auto& u : *unix_entries) {
      SocketInfo s;
      s.inode = u.inode;
      s.netns = netns;
      s.family = "unix";
      s.state = u.state;
      s.local = u.path;
      s.remote_is_local_host = true;  // a unix socket's other end is always on this host
      ns.by_inode[u.inode] = std::move(s);
    }
  }
  std::string netns_path;
  if (netns != own_netns_ && netns != 0) netns_path = proc_.namespace_path(reader_pid, "net");
  NetnsFacts facts = query_network_namespace(netns_path);
  if (!facts.unix_sockets) {
    limitation(fmt::format("unix socket peers unknown: {}", facts.unix_sockets.error()));
  } else {
    for (const auto& d : *facts.unix_sockets) {
      auto it = ns.by_inode.find(d.inode);
      if (it == ns.by_inode.end()) {
        SocketInfo s;
        s.inode = d.inode;
        s.netns = netns;
        s.family = "unix";
        s.local = d.name;
        s.state = d.state == 10  ? "LISTEN"
                  : d.state == 1 ? "CONNECTED"
                  : d.state == 2 ? "CONNECTING"
                                 : "UNCONNECTED";
        s.remote_is_local_host = true;
        it = ns.by_inode.emplace(d.inode, std::move(s)).first;
      }
      it->second.peer_inode = d.peer_inode;
      if (d.has_queues) {
        it->second.rx_queue = d.rx_queue;
        it->second.tx_queue = d.tx_queue;
      }
    }
    // The remote end of a unix socket is named by its peer.
    for (auto& [inode, s] : ns.by_inode) {
      if (s.family != "unix" || !s.peer_inode) continue;
      auto peer = ns.by_inode.find(s.peer_inode);
      if (peer != ns.by_inode.end()) s.remote = peer->second.local;
    }
  }
  if (facts.addresses) {
    for (const auto& a : *facts.addresses) {
      if (std::find(snap_.local_addresses.begin(), snap_.local_addresses.end(), a) ==
          snap_.local_addresses.end())
        snap_.local_addresses.push_back(a);
    }
  }
}

const SocketInfo* Collector::find_socket(uint64_t inode) const {
  for (const auto& [netns, ns] : netns_sockets_) {
    auto it = ns.by_inode.find(inode);
    if (it != ns.by_inode.end()) return &it->second;
  }
  return nullptr;
}

void Collector::find_peers() {
  std::unordered_set<uint64_t> pipe_inodes, socket_inodes, eventfd_ids;
  std::unordered_set<int> in_snapshot;
  for (const auto& p : snap_.processes) in_snapshot.insert(p.pid);

  auto want_socket = [&](uint64_t inode) {
    socket_inodes.insert(inode);
    const SocketInfo* s = find_socket(inode);
    if (!s) return;
    if (s->peer_inode) {
      socket_inodes.insert(s->peer_inode);
      return;
    }
    // A TCP connection not accepted yet: the listener on the remote port
    // holds the other end as far as anyone can tell.
    if (s->family.rfind("tcp", 0) == 0 && s->state != "LISTEN") {
      auto colon = s->remote.rfind(':');
      uint16_t port = 0;
      if (colon != std::string::npos) port = static_cast<uint16_t>(std::atoi(s->remote.c_str() + colon + 1));
      auto ns = netns_sockets_.find(s->netns);
      if (port && ns != netns_sockets_.end()) {
        auto [begin, end] = ns->second.tcp_listeners.equal_range(port);
        for (auto it = begin; it != end; ++it) socket_inodes.insert(it->second);
      }
    }
  };
  // Only the objects a thread of the job waits on pull in outside processes:
  // the shell or tee sharing the job's stdout is not a peer unless the job is
  // blocked writing to it.
  for (const auto& p : snap_.processes) {
    for (const auto& t : p.threads) {
      for (int fd : waited_fds(p, t)) {
        auto f = std::find_if(p.fds.begin(), p.fds.end(), [fd](const FdEntry& e) { return e.fd == fd; });
        if (f == p.fds.end()) continue;
        if (f->kind == FdKind::Socket)
          want_socket(f->inode);
        else if (f->kind == FdKind::Pipe)
          pipe_inodes.insert(f->inode);
        else if (f->kind == FdKind::EventFd && f->eventfd_id)
          eventfd_ids.insert(*f->eventfd_id);
      }
    }
  }
  if (pipe_inodes.empty() && socket_inodes.empty() && eventfd_ids.empty()) return;

  // One pass over every fd on the host, matching only those inodes.
  const int self = getpid();
  std::vector<int> peers;
  for (int pid : all_pids_) {
    if (in_snapshot.count(pid) || pid == self) continue;
    auto st = stats_.find(pid);
    if (st == stats_.end() || st->second.is_kernel_thread()) continue;
    auto fds = proc_.fds(pid);
    if (!fds) continue;
    bool holds = false;
    for (size_t i = 0; i < fds->size() && i < kMaxFdsPerProcess && !holds; ++i) {
      auto link = proc_.fd_link(pid, (*fds)[i]);
      if (!link) continue;
      auto c = procfs::classify_fd_link(*link);
      if (c.kind == FdKind::Pipe)
        holds = pipe_inodes.count(c.inode) > 0;
      else if (c.kind == FdKind::Socket)
        holds = socket_inodes.count(c.inode) > 0;
      else if (c.kind == FdKind::EventFd && !eventfd_ids.empty()) {
        auto info = proc_.fdinfo(pid, (*fds)[i]);
        holds = info && info->eventfd_id && eventfd_ids.count(*info->eventfd_id);
      }
    }
    if (!holds) continue;
    if (peers.size() >= kMaxPeers) {
      limitation(
          fmt::format("more than {} peer processes hold the job's pipes and sockets; only the first {} kept",
                      kMaxPeers, kMaxPeers));
      break;
    }
    peers.push_back(pid);
  }
  // Peers are one level deep: their own waits do not pull in more processes.
  for (int pid : peers) {
    auto p = collect_process(pid, ProcessRole::Peer);
    if (!p) continue;
    load_network_namespace(p->netns, proc_id(pid));
    snap_.processes.push_back(std::move(*p));
  }
  debug(fmt::format("{} peer process(es)", peers.size()));
}

void Collector::assemble_sockets() {
  std::set<uint64_t> keep;
  for (const auto& p : snap_.processes) {
    for (const auto& f : p.fds) {
      if (f.kind == FdKind::Socket) keep.insert(f.inode);
    }
  }
  std::set<uint64_t> with_peers = keep;
  for (uint64_t inode : keep) {
    if (const SocketInfo* s = find_socket(inode); s && s->peer_inode) with_peers.insert(s->peer_inode);
  }
  for (uint64_t inode : with_peers) {
    for (const auto& [netns, ns] : netns_sockets_) {
      auto it = ns.by_inode.find(inode);
      if (it == ns.by_inode.end()) continue;
      SocketInfo s = it->second;
      if (s.family != "unix") {
        auto ip = ns.remote_ip.find(inode);
        std::string remote = ip == ns.remote_ip.end() ? "" : ip->second;
        bool unspecified = remote.empty() || remote == "0.0.0.0" || remote == "::";
        s.remote_is_local_host =
            !unspecified && (procfs::is_loopback_address(remote) ||
                             std::find(snap_.local_addresses.begin(), snap_.local_addresses.end(), remote) !=
                                 snap_.local_addresses.end());
      }
      snap_.sockets.push_back(std::move(s));
      break;
    }
  }
}

// ---- 4. progress, BPF, maps, readiness, shm -------------------------------------------

ProgressSample Collector::sample_progress(int pid, int tid) const {
  ProgressSample s;
  auto cpu = proc_.thread_schedstat(pid, tid);
  auto io = proc_.thread_io(pid, tid);
  if (!cpu || !io) return s;
  s.ok = true;
  s.cpu_ns = *cpu;
  s.io_bytes = io->rchar + io->wchar;
  return s;
}

void Collector::take_progress_samples(bool start) {
  for (auto& p : snap_.processes) {
    for (auto& t : p.threads) {
      ProgressSample s = sample_progress(p.pid, t.tid);
      if (start) {
        t.progress_sampled = s.ok;
        t.cpu_ns_start = t.cpu_ns_end = s.cpu_ns;
        t.io_bytes_start = t.io_bytes_end = s.io_bytes;
      } else if (t.progress_sampled) {
        if (!s.ok) {
          t.progress_sampled = false;  // exited in between: no second sample
          continue;
        }
        t.cpu_ns_end = s.cpu_ns;
        t.io_bytes_end = s.io_bytes;
      }
    }
  }
}

void Collector::collect_kernel_views() {
  std::string unavailable = bpf_unavailable_reason();
  if (!unavailable.empty()) {
    limitation("no kernel stacks or blocked times: " + unavailable);
    return;
  }
  std::vector<int> tgids;
  for (const auto& p : snap_.processes) tgids.push_back(p.pid);
  auto samples = sample_kernel_tasks(tgids);
  if (!samples) {
    limitation("no kernel stacks or blocked times: " + samples.error());
    return;
  }
  // The iterator measured every off-CPU time just now: that is the instant
  // "blocked for X s" counts back from.
  record_sample_clocks(snap_);
  auto symbols = KernelSymbols::load(options_.proc_root);
  if (!symbols) limitation("kernel stacks not symbolized: " + symbols.error());
  std::unordered_map<int, KernelTaskSample*> by_tid;
  for (auto& s : *samples) by_tid[s.tid] = &s;
  for (auto& p : snap_.processes) {
    for (auto& t : p.threads) {
      auto it = by_tid.find(t.tid);
      if (it == by_tid.end()) continue;
      KernelTaskView view = it->second->view;
      if (symbols) {
        for (auto& frame : view.stack) frame.symbol = symbols->symbolize(frame.addr);
      }
      // /proc said nothing (unreadable): the BPF copy of the registers can.
      if (t.syscall.mode == SyscallState::Mode::Unknown && it->second->syscall_nr >= 0 &&
          !memory_blocked_.count(p.pid)) {
        t.syscall.mode = SyscallState::Mode::InSyscall;
        t.syscall.nr = it->second->syscall_nr;
        std::copy(std::begin(it->second->syscall_args), std::end(it->second->syscall_args), t.syscall.args);
        t.syscall.sp = view.user_sp;
        t.syscall.pc = view.user_ip;
        WaitMemoryRead read = read_wait_memory(t.tid, t.syscall);
        t.memory = std::move(read.memory);
        auto& addresses = futex_addresses_[p.pid];
        addresses.insert(addresses.end(), read.futex_addresses.begin(), read.futex_addresses.end());
      }
      t.kernel = std::move(view);
    }
  }
}

// Every process of the tree, Python or not: a stuck C++ extension or a
// non-Python peer is as likely the culprit. Per-thread failures stay on the
// thread (native_stack_error); only a whole process failing is a limitation.
void Collector::collect_native_stacks() {
  NativeStackCache& cache = options_.native_cache ? *options_.native_cache : process_native_stack_cache();
  const double started = monotonic_s();
  for (auto& p : snap_.processes) {
    if (memory_blocked_.count(p.pid) || exited_.count(p.pid)) continue;
    std::string failure = cache.unwind_process(p, proc_id(p.pid));
    if (!failure.empty()) limitation(fmt::format("native stacks of {} not unwound: {}", p.pid, failure));
  }
  const NativeStackStats st = cache.stats();
  debug(fmt::format("native stacks in {:.3f} s (cumulative: {} thread(s) unwound, {} failed, {} frames)",
                    monotonic_s() - started, st.threads_unwound, st.threads_failed, st.frames));
}

void Collector::collect_maps(ProcessInfo& p) {
  if (memory_blocked_.count(p.pid) || exited_.count(p.pid)) return;
  int err = 0;
  auto maps = proc_.maps(proc_id(p.pid), &err);
  if (!maps) {
    if (!is_gone_errno(err)) limitation(fmt::format("no memory maps of {}: {}", p.pid, maps.error()));
    return;
  }
  const auto& futexes = futex_addresses_[p.pid];
  for (auto& m : *maps) {
    if (m.path.find("libpython") != std::string::npos) p.is_python = true;
    // Futex resolution needs the shared mappings (a futex there is shared
    // across processes) and the mappings the waited-on futexes live in.
    bool keep = m.shared() || m.path.rfind("/dev/shm/", 0) == 0 ||
                (m.path.size() > 10 && m.path.compare(m.path.size() - 10, 10, " (deleted)") == 0);
    for (size_t i = 0; !keep && i < futexes.size(); ++i) keep = futexes[i] >= m.start && futexes[i] < m.end;
    if (keep) p.maps.push_back(std::move(m));
  }
}

void Collector::probe_readiness(ProcessInfo& p) {
  std::set<int> fds;
  for (const auto& t : p.threads) {
    for (int fd : waited_fds(p, t)) fds.insert(fd);
  }
  if (fds.empty()) return;
  FdProber prober(p.pid, proc_id(p.pid));
  if (!prober.ok()) {
    limitation(fmt::format("readiness of waited fds unknown: {}", prober.error()));
    return;
  }
  for (auto& f : p.fds) {
    if (!fds.count(f.fd)) continue;
    switch (f.kind) {
      // A signalfd answers poll() for the signals of whoever polls it, and
      // devices may act on poll: neither is probed.
      case FdKind::Pipe:
      case FdKind::Socket:
      case FdKind::EventFd:
      case FdKind::Epoll:
      case FdKind::TimerFd:
      case FdKind::PidFd: {
        FdReadiness r = prober.probe(f.fd, f.kind == FdKind::Pipe || f.kind == FdKind::Socket);
        f.ready_events = r.ready_events;
        f.queued_bytes = r.queued_bytes;
        break;
      }
      default:
        break;
    }
  }
}

void Collector::collect_shm() {
  ShmInfo& shm = snap_.shm;
  shm.mount_path = proc_.root_path(proc_id(target_), "/dev/shm");
  auto usage = procfs::filesystem_usage(shm.mount_path);
  auto mount = usage ? procfs::stat_file(shm.mount_path) : Result<procfs::FileId>(make_error(usage.error()));
  if (!mount) {
    limitation("no /dev/shm usage: " + mount.error());
    return;
  }
  shm.available = true;
  shm.size_bytes = usage->size_bytes;
  shm.used_bytes = usage->used_bytes;
  const uint32_t shm_major = mount->dev_major, shm_minor = mount->dev_minor;

  struct Segment {
    ShmSegment info;
    uint64_t inode;
  };
  std::vector<Segment> segments;
  if (DIR* dir = opendir(shm.mount_path.c_str())) {
    while (dirent* entry = readdir(dir)) {
      if (segments.size() >= kMaxShmEntries) break;
      std::string name = entry->d_name;
      if (name == "." || name == "..") continue;
      struct stat st {};
      if (fstatat(dirfd(dir), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
      Segment s;
      s.info.name = name;
      s.info.size_bytes = static_cast<uint64_t>(st.st_size);
      s.info.allocated_bytes = static_cast<uint64_t>(st.st_blocks) * 512;
      s.inode = st.st_ino;
      segments.push_back(std::move(s));
    }
    closedir(dir);
  } else {
    limitation(fmt::format("/dev/shm files not listed: failed to open {}: {}", shm.mount_path,
                           std::strerror(errno)));
  }
  // Who holds or maps them: maps give dev+inode; fds need a stat of the link.
  std::map<uint64_t, std::set<int>> holders;     // shm inode -> pids
  std::map<uint64_t, uint64_t> unlinked_extent;  // inode -> bytes mapped
  for (const auto& p : snap_.processes) {
    for (const auto& m : p.maps) {
      if (m.dev_major != shm_major || m.dev_minor != shm_minor || m.path.rfind("/dev/shm/", 0) != 0) continue;
      holders[m.inode].insert(p.pid);
      if (m.path.size() > 10 && m.path.compare(m.path.size() - 10, 10, " (deleted)") == 0) {
        // Count each segment once, as far as any process maps it.
        uint64_t& extent = unlinked_extent[m.inode];
        extent = std::max(extent, m.offset + (m.end - m.start));
      }
    }
    for (const auto& f : p.fds) {
      if (f.kind != FdKind::ShmFile) continue;
      auto file = proc_.fd_file(proc_id(p.pid), f.fd);
      if (file && file->dev_major == shm_major && file->dev_minor == shm_minor)
        holders[file->inode].insert(p.pid);
    }
  }
  // Unlinked segments still mapped (how torch shares tensors between workers
  // and main) fill the tmpfs as much as named ones: list them too.
  std::map<uint64_t, std::string> unlinked_names;
  for (const auto& p : snap_.processes)
    for (const auto& m : p.maps)
      if (unlinked_extent.count(m.inode) && !unlinked_names.count(m.inode))
        unlinked_names[m.inode] = m.path.substr(9);  // "name (deleted)"
  for (const auto& [inode, bytes] : unlinked_extent) {
    shm.unlinked_mapped_bytes += bytes;
    Segment s;
    s.info.name = unlinked_names[inode];
    s.info.size_bytes = s.info.allocated_bytes = bytes;
    s.inode = inode;
    segments.push_back(std::move(s));
  }
  std::sort(segments.begin(), segments.end(), [](const Segment& a, const Segment& b) {
    if (a.info.allocated_bytes != b.info.allocated_bytes)
      return a.info.allocated_bytes > b.info.allocated_bytes;
    return a.info.size_bytes > b.info.size_bytes;
  });
  if (segments.size() > kLargestShmSegments) segments.resize(kLargestShmSegments);

  for (auto& s : segments) {
    if (auto it = holders.find(s.inode); it != holders.end())
      s.info.mapped_by.assign(it->second.begin(), it->second.end());
    shm.largest.push_back(std::move(s.info));
  }
}

bool Collector::target_still_there() const {
  auto st = proc_.stat(target_);
  return st && st->start_time_ticks == target_start_time_ && live_proc_id(target_, *st).has_value();
}

// ---- the whole pass ---------------------------------------------------------------------

Result<Snapshot> Collector::run() {
  if (auto error = validate_target()) return *error;
  const double started = monotonic_s();
  const std::string vanished = fmt::format("target {} exited during the snapshot", target_);

  snap_.hangtrace_version = HANGTRACE_VERSION;
  snap_.target_pid = target_;
  snap_.taken_at_unix = wall_clock_s();
  record_sample_clocks(snap_);  // replaced by the BPF sampling instant when there is one
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) snap_.hostname = host;
  utsname uts{};
  if (uname(&uts) == 0) snap_.kernel_release = uts.release;
  if (auto ino = proc_.thread_self_namespace_inode("net")) own_netns_ = *ino;

  // This host's addresses (hangtrace's own netns), whatever namespace the job is in.
  if (auto own = interface_addresses()) snap_.local_addresses = std::move(*own);

  scan_all_processes();
  auto target = collect_process(target_, ProcessRole::Target);
  if (!target) return make_error(vanished);
  snap_.processes.push_back(std::move(*target));
  for (int pid : descendants_of(target_)) {
    if (auto p = collect_process(pid, ProcessRole::Descendant)) snap_.processes.push_back(std::move(*p));
  }
  debug(fmt::format("{} process(es) in the tree after {:.3f} s", snap_.processes.size(),
                    monotonic_s() - started));

  // Sockets of every namespace in the tree (the target's first, so its view wins).
  for (size_t i = 0; i < snap_.processes.size(); ++i) {
    const auto& p = snap_.processes[i];
    if (exited_.count(p.pid)) continue;
    load_network_namespace(p.netns, proc_id(p.pid));
  }
  for (const char* loopback : {"127.0.0.1", "::1"}) {
    if (std::find(snap_.local_addresses.begin(), snap_.local_addresses.end(), loopback) ==
        snap_.local_addresses.end())
      snap_.local_addresses.push_back(loopback);
  }
  if (options_.include_peers) find_peers();

  take_progress_samples(/*start=*/true);
  progress_start_s_ = monotonic_s();

  if (options_.use_bpf) collect_kernel_views();
  for (auto& p : snap_.processes) collect_maps(p);
  for (auto& p : snap_.processes) {
    if (!p.is_python || memory_blocked_.count(p.pid) || exited_.count(p.pid)) continue;
    std::string failure =
        collect_python_stacks(p, proc_id(p.pid), proc_.pid_path(proc_id(p.pid)), options_.python_symbols);
    if (!failure.empty()) limitation(fmt::format("Python stacks of {} not read: {}", p.pid, failure));
  }
  if (options_.use_bpf && options_.native_stacks) collect_native_stacks();
  if (options_.probe_readiness) {
    for (auto& p : snap_.processes) probe_readiness(p);
  }
  collect_shm();
  assemble_sockets();

  // Only the rest of the window is slept: the work above counts toward it.
  double elapsed = monotonic_s() - progress_start_s_;
  double window = std::max(0.0, options_.min_progress_window_s);
  if (elapsed < window) std::this_thread::sleep_for(std::chrono::duration<double>(window - elapsed));
  take_progress_samples(/*start=*/false);
  snap_.sample_window_s = monotonic_s() - progress_start_s_;

  if (!target_still_there()) return make_error(vanished);
  if (dropped_limitations_)
    snap_.limitations.push_back(
        fmt::format("... and {} more limitation(s) not listed", dropped_limitations_));
  debug(fmt::format("snapshot took {:.3f} s", monotonic_s() - started));
  return std::move(snap_);
}

}  // namespace

Result<Snapshot> collect_snapshot(int target_pid, const CollectOptions& options) {
  Collector collector(target_pid, options);
  return collector.run();
}

Snapshot exited_job_snapshot(int pid, const LiveObservation& live, const std::string& why) {
  Snapshot s;
  s.hangtrace_version = HANGTRACE_VERSION;
  s.target_pid = pid;
  s.taken_at_unix = static_cast<double>(std::time(nullptr));
  ProcessInfo p;
  p.pid = pid;
  p.state = 'X';
  p.role = ProcessRole::Target;
  if (auto it = live.meta.find(pid); it != live.meta.end()) {
    p.comm = it->second.comm;
    p.cmdline = it->second.cmdline;
  }
  s.processes.push_back(p);
  s.limitations.push_back(why);
  struct utsname u {};
  if (uname(&u) == 0) {
    s.hostname = u.nodename;
    s.kernel_release = u.release;
  }
  return s;
}

}  // namespace hangtrace
