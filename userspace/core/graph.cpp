// Snapshot -> wait-for graph: what each thread waits on, who could release it.
#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "hangtrace/analysis.h"
#include "hangtrace/syscalls.h"

namespace hangtrace {

const char* object_kind_name(ObjectKind k) {
  switch (k) {
    case ObjectKind::Futex:
      return "futex";
    case ObjectKind::Pipe:
      return "pipe";
    case ObjectKind::UnixSocket:
      return "unix-socket";
    case ObjectKind::TcpSocket:
      return "tcp-socket";
    case ObjectKind::UdpSocket:
      return "udp-socket";
    case ObjectKind::Socket:
      return "socket";
    case ObjectKind::EventFd:
      return "eventfd";
    case ObjectKind::File:
      return "file";
    case ObjectKind::Child:
      return "child";
    case ObjectKind::Unknown:
      return "unknown";
  }
  return "unknown";
}

const char* activity_name(Activity a) {
  switch (a) {
    case Activity::Running:
      return "running";
    case Activity::Blocked:
      return "blocked";
    case Activity::TimedWait:
      return "timed-wait";
    case Activity::Sleeping:
      return "sleeping";
    case Activity::DiskWait:
      return "disk-wait";
    case Activity::Stopped:
      return "stopped";
    case Activity::Dead:
      return "dead";
    case Activity::Unknown:
      return "unknown";
  }
  return "unknown";
}

const ThreadInfo* ProcessInfo::thread(int tid) const {
  for (const auto& t : threads)
    if (t.tid == tid) return &t;
  return nullptr;
}

const ProcessInfo* Snapshot::process(int pid) const {
  for (const auto& p : processes)
    if (p.pid == pid) return &p;
  return nullptr;
}

const SocketInfo* Snapshot::socket(uint64_t inode) const {
  for (const auto& s : sockets)
    if (s.inode == inode) return &s;
  return nullptr;
}

std::vector<int> WaitGraph::depends_on(int tid) const {
  std::set<int> out;
  auto it = threads.find(tid);
  if (it == threads.end()) return {};
  for (const auto& id : it->second.objects) {
    auto o = objects.find(id);
    if (o == objects.end()) continue;
    out.insert(o->second.releasers.begin(), o->second.releasers.end());
  }
  out.erase(tid);
  return {out.begin(), out.end()};
}

namespace {

constexpr int kPidMax = 4194304;  // PID_MAX_LIMIT on 64-bit

bool alive(const ProcessInfo& p) { return p.state != 'Z' && p.state != 'X'; }

// Reads a little-endian u32/i32 from the futex bytes.
std::optional<uint32_t> word_at(const std::vector<uint8_t>& b, size_t off) {
  if (b.size() < off + 4) return std::nullopt;
  return static_cast<uint32_t>(b[off]) | (static_cast<uint32_t>(b[off + 1]) << 8) |
         (static_cast<uint32_t>(b[off + 2]) << 16) | (static_cast<uint32_t>(b[off + 3]) << 24);
}

class GraphBuilder {
 public:
  explicit GraphBuilder(const Snapshot& s) : snap_(s) {
    for (const auto& p : snap_.processes)
      for (const auto& t : p.threads) graph_.tid_to_pid[t.tid] = p.pid;
  }

  WaitGraph build() {
    for (const auto& p : snap_.processes)
      for (const auto& t : p.threads) classify(p, t);
    finish_objects();
    return std::move(graph_);
  }

 private:
  const Snapshot& snap_;
  WaitGraph graph_;

  WaitObject& object(const std::string& id, ObjectKind kind, const std::string& label) {
    auto [it, inserted] = graph_.objects.try_emplace(id);
    if (inserted) {
      it->second.id = id;
      it->second.kind = kind;
      it->second.label = label;
    }
    return it->second;
  }

  std::vector<int> live_threads_of(int pid) const {
    std::vector<int> out;
    const ProcessInfo* p = snap_.process(pid);
    if (!p || !alive(*p)) return out;
    for (const auto& t : p->threads)
      if (t.state != 'Z' && t.state != 'X') out.push_back(t.tid);
    return out;
  }

  void add_releaser_process(WaitObject& o, int pid) {
    for (int tid : live_threads_of(pid)) o.releasers.push_back(tid);
    o.holder_pids.push_back(pid);
  }

  const FdEntry* find_fd(const ProcessInfo& p, int fd) const {
    for (const auto& f : p.fds)
      if (f.fd == fd) return &f;
    return nullptr;
  }

  // Every process in the snapshot holding an fd matching `pred`.
  template <class Pred>
  std::vector<int> holders(Pred pred) const {
    std::vector<int> out;
    for (const auto& p : snap_.processes) {
      if (!alive(p)) continue;
      for (const auto& f : p.fds) {
        if (pred(f)) {
          out.push_back(p.pid);
          break;
        }
      }
    }
    return out;
  }

  std::string thread_pid_label(int pid) const {
    const ProcessInfo* p = snap_.process(pid);
    return p ? fmt::format("{} ({})", pid, p->comm) : std::to_string(pid);
  }

  // ---- futexes --------------------------------------------------------------
  std::string futex_object(const ProcessInfo& p, const ThreadInfo& t, ThreadWait& w) {
    const uint64_t uaddr = t.syscall.nr == HT_NR_futex_waitv ? 0 : t.syscall.args[0];
    FutexOp op = decode_futex_op(t.syscall.nr == HT_NR_futex ? static_cast<uint32_t>(t.syscall.args[1]) : 0);
    if (t.syscall.nr == HT_NR_futex && !op.is_wait) return "";

    // A futex in a shared mapping is keyed by the backing object, so waits in
    // different processes on one lock meet in one node (as the kernel's
    // futex hash does); anything else is keyed by the process.
    const Mapping* shared_map = nullptr;
    if (!op.is_private && uaddr) {
      for (const auto& m : p.maps)
        if (m.shared() && uaddr >= m.start && uaddr < m.end && m.inode != 0) shared_map = &m;
    }
    std::string id, label;
    uint64_t file_off = 0;
    if (shared_map) {
      file_off = uaddr - shared_map->start + shared_map->offset;
      id = fmt::format("futex:shared:{}:{}:{}:{:#x}", shared_map->dev_major, shared_map->dev_minor,
                       shared_map->inode, file_off);
      std::string where = shared_map->path.empty() ? "[shared anonymous]" : shared_map->path;
      label = fmt::format("shared lock {}+{:#x}", where, file_off);
    } else {
      id = fmt::format("futex:private:{}:{:#x}", p.pid, uaddr);
      label = fmt::format("lock {:#x} in {}", uaddr, thread_pid_label(p.pid));
    }
    WaitObject& o = object(id, ObjectKind::Futex, label);

    // What kind of lock is it? The word layout tells, and a mutex records its
    // owner TID (glibc __owner at +8; PI futexes keep it in the word).
    const auto& bytes = t.memory.futex_bytes;
    std::optional<uint32_t> word = t.memory.futex_word;
    if (!word) word = word_at(bytes, 0);
    std::string lock_type = "futex";
    std::optional<int> owner;
    if (op.is_pi && word) {
      lock_type = "PI mutex";
      int tid = static_cast<int>(*word & kFutexTidMask);
      if (tid > 0) owner = tid;
    } else if (word && bytes.size() >= 20) {
      uint32_t count_or_nwaiters = *word_at(bytes, 4);
      int32_t owner_field = static_cast<int32_t>(*word_at(bytes, 8));
      uint32_t nusers = *word_at(bytes, 12);
      int32_t kind = static_cast<int32_t>(*word_at(bytes, 16));
      bool plausible_kind = (kind & ~(0x7f | 0x80)) == 0;
      if ((*word == 1 || *word == 2) && owner_field > 0 && owner_field < kPidMax && nusers >= 1 &&
          nusers < 1u << 16 && plausible_kind) {
        lock_type = "pthread mutex";
        owner = owner_field;
      } else if (*word == 0 && count_or_nwaiters >= 1 && count_or_nwaiters < 1u << 20 &&
                 (owner_field == 0 || owner_field == FUTEX_PRIVATE_FLAG)) {
        lock_type = "semaphore";
        o.notes.push_back(
            fmt::format("semaphore value 0, {} waiter(s): no owner is recorded", count_or_nwaiters));
      }
    }
    if (o.label.rfind("lock", 0) == 0 || o.label.rfind("shared lock", 0) == 0)
      o.label = fmt::format("{} {}", lock_type, o.label.substr(o.label.find("lock") + 5));
    if (owner) o.owner_tid = owner;

    w.summary =
        fmt::format("waits on {}{}", o.label, owner ? fmt::format(" held by TID {}", *owner) : std::string());
    if (shared_map) o.holder_pids.push_back(p.pid);
    pending_futex_.push_back(
        {id, p.pid, shared_map ? *shared_map : Mapping{}, shared_map != nullptr, file_off});
    return id;
  }

  struct PendingFutex {
    std::string id;
    int pid;
    Mapping map;
    bool shared;
    uint64_t file_off;
  };
  std::vector<PendingFutex> pending_futex_;

  void resolve_futex_releasers(const PendingFutex& pf) {
    WaitObject& o = graph_.objects[pf.id];
    if (!o.releasers.empty() || o.releasers_certain) return;  // done for an earlier waiter
    if (o.owner_tid) {
      int owner = *o.owner_tid;
      auto it = graph_.tid_to_pid.find(owner);
      bool owner_can_release = false;
      if (it != graph_.tid_to_pid.end()) {
        const ProcessInfo* op = snap_.process(it->second);
        // The owner must share the lock's memory: same process for a private
        // lock, a process mapping the same object for a shared one.
        bool shares = pf.shared ? maps_object(*op, pf.map) : it->second == pf.pid;
        owner_can_release = op && alive(*op) && shares;
        if (!shares)
          o.notes.push_back(fmt::format(
              "owner TID {} is a thread of process {}, not of {}: the lock word was copied while held "
              "(fork) and nobody in this process can unlock it",
              owner, it->second, pf.pid));
      } else {
        o.notes.push_back(fmt::format("owner TID {} is not a live thread of any traced process", owner));
      }
      o.releasers_certain = true;
      if (owner_can_release) o.releasers.push_back(owner);
      return;
    }
    if (pf.shared) {
      for (const auto& p : snap_.processes)
        if (alive(p) && maps_object(p, pf.map)) add_releaser_process(o, p.pid);
    } else {
      add_releaser_process(o, pf.pid);
    }
  }

  static bool maps_object(const ProcessInfo& p, const Mapping& m) {
    for (const auto& x : p.maps)
      if (x.shared() && x.inode == m.inode && x.dev_major == m.dev_major && x.dev_minor == m.dev_minor)
        return true;
    return false;
  }

  // ---- fds ------------------------------------------------------------------
  std::string fd_object(const ProcessInfo& p, int fd, bool want_read, ThreadWait& w) {
    const FdEntry* f = find_fd(p, fd);
    if (!f) {
      WaitObject& o = object(fmt::format("fd:{}:{}", p.pid, fd), ObjectKind::Unknown,
                             fmt::format("fd {} of {}", fd, p.pid));
      o.external = true;
      o.notes.push_back("the fd was closed or could not be read");
      return o.id;
    }
    const bool ready = f->ready_events > 0 && (want_read ? (f->ready_events & (POLLIN | POLLHUP | POLLERR))
                                                         : (f->ready_events & (POLLOUT | POLLERR)));
    std::string id;
    switch (f->kind) {
      case FdKind::Pipe:
        id = pipe_object(p, *f, want_read);
        break;
      case FdKind::Socket:
        id = socket_object(p, *f, want_read);
        break;
      case FdKind::EventFd:
        id = eventfd_object(*f, p);
        break;
      case FdKind::Epoll: {
        // Only reached for an epoll fd inside poll(): expand its watch list.
        std::string first;
        for (const auto& watch : f->epoll) {
          std::string sub = fd_object(p, watch.target_fd, true, w);
          if (first.empty()) first = sub;
          extra_objects_.push_back(sub);
        }
        return first;
      }
      case FdKind::TimerFd: {
        WaitObject& o = object(fmt::format("timerfd:{}:{}", p.pid, fd), ObjectKind::Unknown,
                               fmt::format("timerfd {} of {}", fd, p.pid));
        o.external = true;  // a timer fires by itself
        id = o.id;
        break;
      }
      default: {
        WaitObject& o = object(fmt::format("file:{}", f->link), ObjectKind::File, f->link);
        o.external = true;  // terminals, devices, files: released from outside
        id = o.id;
        break;
      }
    }
    if (ready) {
      WaitObject& o = graph_.objects[id];
      o.ready = true;
      if (f->queued_bytes > 0)
        o.notes.push_back(fmt::format("{} bytes queued: the wait is about to end", f->queued_bytes));
    } else if (f->queued_bytes == 0 && want_read && f->kind == FdKind::Pipe) {
      graph_.objects[id].notes.push_back("pipe is empty (0 bytes queued)");
    }
    return id;
  }

  std::vector<std::string> extra_objects_;

  std::string pipe_object(const ProcessInfo& p, const FdEntry& f, bool want_read) {
    (void)p;
    WaitObject& o = object(fmt::format("pipe:[{}]:{}", f.inode, want_read ? "r" : "w"), ObjectKind::Pipe,
                           fmt::format("pipe:[{}] ({} end)", f.inode, want_read ? "read" : "write"));
    if (!o.holder_pids.empty()) return o.id;
    // The releasers of a read are the holders of the write end, and vice versa.
    const uint64_t ino = f.inode;
    auto other_end = holders([&](const FdEntry& e) {
      if (e.kind != FdKind::Pipe || e.inode != ino) return false;
      int mode = static_cast<int>(e.flags & O_ACCMODE);
      return want_read ? (mode == O_WRONLY || mode == O_RDWR) : (mode == O_RDONLY || mode == O_RDWR);
    });
    for (int pid : other_end) add_releaser_process(o, pid);
    o.releasers_certain = true;
    return o.id;
  }

  std::string socket_object(const ProcessInfo& p, const FdEntry& f, bool want_read) {
    (void)want_read;
    const SocketInfo* s = snap_.socket(f.inode);
    if (!s) {
      WaitObject& o = object(fmt::format("socket:[{}]", f.inode), ObjectKind::Socket,
                             fmt::format("socket:[{}]", f.inode));
      o.external = true;
      return o.id;
    }
    ObjectKind kind = s->family == "unix"              ? ObjectKind::UnixSocket
                      : s->family.rfind("tcp", 0) == 0 ? ObjectKind::TcpSocket
                      : s->family.rfind("udp", 0) == 0 ? ObjectKind::UdpSocket
                                                       : ObjectKind::Socket;
    std::string label =
        s->family == "unix"
            ? fmt::format("unix socket:[{}]{}", s->inode, s->local.empty() ? "" : " " + s->local)
            : fmt::format("{} {} -> {} ({})", s->family, s->local, s->remote, s->state);
    WaitObject& o = object(fmt::format("socket:[{}]", s->inode), kind, label);
    o.local = s->local;
    o.remote = s->remote;
    if (!o.holder_pids.empty() || o.external) return o.id;

    if (s->state == "LISTEN") {
      o.external = true;  // anyone may connect
      o.notes.push_back("listening: waits for a client to connect");
      return o.id;
    }
    if (kind == ObjectKind::UdpSocket) {
      o.external = true;
      return o.id;
    }
    if (kind == ObjectKind::TcpSocket && !s->remote_is_local_host) {
      o.external = true;
      o.notes.push_back(fmt::format("the other end, {}, is not on this host", s->remote));
      return o.id;
    }
    uint64_t peer = s->peer_inode;
    std::vector<int> peer_holders;
    if (peer) {
      peer_holders = holders([&](const FdEntry& e) { return e.kind == FdKind::Socket && e.inode == peer; });
    } else if (kind == ObjectKind::TcpSocket) {
      // Not accepted yet: the listener on the remote port will pick it up.
      std::string port = s->remote.substr(s->remote.rfind(':') + 1);
      for (const auto& ls : snap_.sockets) {
        if (ls.state != "LISTEN" || ls.family.rfind("tcp", 0) != 0) continue;
        if (ls.local.substr(ls.local.rfind(':') + 1) != port) continue;
        auto h = holders([&](const FdEntry& e) { return e.kind == FdKind::Socket && e.inode == ls.inode; });
        peer_holders.insert(peer_holders.end(), h.begin(), h.end());
        o.notes.push_back(fmt::format("not accepted yet by the listener on {}", ls.local));
      }
    }
    if (peer_holders.empty()) {
      if (kind == ObjectKind::TcpSocket) {
        o.external = true;
        o.notes.push_back(fmt::format("the local end {} is held by no process hangtrace can see", s->remote));
      } else if (peer) {
        o.external = true;
        o.notes.push_back(fmt::format("peer socket:[{}] is held by no process hangtrace can see", peer));
      }
      // A unix socket without a peer inode waits forever (nobody can send).
      o.releasers_certain = !o.external;
      return o.id;
    }
    for (int pid : peer_holders) add_releaser_process(o, pid);
    o.releasers_certain = true;
    (void)p;
    return o.id;
  }

  std::string eventfd_object(const FdEntry& f, const ProcessInfo& p) {
    std::string key = f.eventfd_id ? std::to_string(*f.eventfd_id) : fmt::format("{}:{}", p.pid, f.fd);
    WaitObject& o = object("eventfd:" + key, ObjectKind::EventFd, "eventfd " + key);
    if (!o.holder_pids.empty()) return o.id;
    auto h = f.eventfd_id ? holders([&](const FdEntry& e) {
      return e.kind == FdKind::EventFd && e.eventfd_id == f.eventfd_id;
    })
                          : std::vector<int>{p.pid};
    for (int pid : h) add_releaser_process(o, pid);
    return o.id;
  }

  // ---- children -------------------------------------------------------------
  std::string child_object(const ProcessInfo& p, const ThreadInfo& t) {
    int which = -1;  // -1: any child
    if (t.syscall.nr == HT_NR_wait4) {
      which = static_cast<int>(t.syscall.args[0]);
    } else {  // waitid(idtype, id, ...)
      if (t.syscall.args[0] == P_PID) which = static_cast<int>(t.syscall.args[1]);
    }
    std::string id = which > 0 ? fmt::format("child:{}", which) : fmt::format("children:{}", p.pid);
    WaitObject& o =
        object(id, ObjectKind::Child,
               which > 0 ? fmt::format("child process {}", which) : fmt::format("any child of {}", p.pid));
    if (!o.holder_pids.empty() || o.releasers_certain || o.external) return id;
    if (p.role == ProcessRole::Peer) {
      // A peer's children are outside the snapshot.
      o.external = true;
      return id;
    }
    o.releasers_certain = true;
    for (int child : p.children) {
      if (which > 0 && child != which) continue;
      const ProcessInfo* c = snap_.process(child);
      if (!c) continue;
      if (!alive(*c)) {
        o.ready = true;  // a zombie is there to be reaped
        o.notes.push_back(fmt::format("child {} has exited (zombie)", child));
        continue;
      }
      add_releaser_process(o, child);
    }
    return id;
  }

  // ---- per thread -----------------------------------------------------------
  void classify(const ProcessInfo& p, const ThreadInfo& t) {
    ThreadWait w;
    w.tid = t.tid;
    w.pid = p.pid;
    if (t.kernel) {
      for (const auto& fr : t.kernel->stack)
        if (!fr.symbol.empty()) w.kernel_stack.push_back(fr.symbol.substr(0, fr.symbol.find('+')));
      if (!t.kernel->on_cpu) w.blocked_s = static_cast<double>(t.kernel->off_cpu_ns) / 1e9;
    }
    if (t.progress_sampled) {
      uint64_t cpu = t.cpu_ns_end >= t.cpu_ns_start ? t.cpu_ns_end - t.cpu_ns_start : 0;
      w.progressed = cpu > progress_cpu_ns_ || t.io_bytes_end != t.io_bytes_start;
    }
    const SyscallDesc desc = describe_syscall(t.syscall.nr);
    if (t.syscall.mode == SyscallState::Mode::InSyscall) {
      w.syscall_text = format_syscall(t.syscall.nr, t.syscall.args, t.memory.poll_fds);
      w.wait_class = desc.wait;
    }
    w.timeout_s = t.memory.timeout_s;
    if (t.syscall.nr == HT_NR_poll && static_cast<int>(t.syscall.args[2]) >= 0 && !w.timeout_s)
      w.timeout_s = static_cast<int>(t.syscall.args[2]) / 1000.0;

    switch (t.state) {
      case 'R':
        w.activity = Activity::Running;
        break;
      case 'D':
        w.activity = Activity::DiskWait;
        break;
      case 'T':
      case 't':
        w.activity = Activity::Stopped;
        break;
      case 'Z':
      case 'X':
        w.activity = Activity::Dead;
        break;
      case 'S':
      case 'I':
        w.activity = Activity::Unknown;
        break;
      default:
        w.activity = Activity::Unknown;
        break;
    }
    if (!alive(p)) w.activity = Activity::Dead;
    if (w.activity == Activity::Unknown && t.syscall.mode == SyscallState::Mode::Running)
      w.activity = Activity::Running;
    if (w.activity == Activity::Unknown && t.syscall.mode == SyscallState::Mode::InSyscall)
      resolve_wait(p, t, desc, w);
    if (w.summary.empty()) w.summary = activity_name(w.activity);
    graph_.threads[t.tid] = std::move(w);
  }

  void resolve_wait(const ProcessInfo& p, const ThreadInfo& t, const SyscallDesc& desc, ThreadWait& w) {
    const bool timed = w.timeout_s.has_value();
    if (timed && *w.timeout_s <= 0) {
      w.activity = Activity::Running;  // a non-blocking call, about to return
      return;
    }
    auto blocked = [&] { w.activity = timed ? Activity::TimedWait : Activity::Blocked; };
    extra_objects_.clear();
    std::string id;
    switch (desc.wait) {
      case WaitClass::Futex:
        id = futex_object(p, t, w);
        if (!id.empty()) blocked();
        break;
      case WaitClass::FdRead:
      case WaitClass::FdWrite:
      case WaitClass::Accept:
      case WaitClass::Connect: {
        bool want_read = desc.wait != WaitClass::FdWrite && desc.wait != WaitClass::Connect;
        id = fd_object(p, static_cast<int>(t.syscall.args[0]), want_read, w);
        blocked();
        const WaitObject& o = graph_.objects[id];
        w.summary = fmt::format("{} on {}",
                                desc.wait == WaitClass::FdWrite   ? "writes"
                                : desc.wait == WaitClass::Accept  ? "accepts"
                                : desc.wait == WaitClass::Connect ? "connects"
                                                                  : "reads",
                                o.label);
        break;
      }
      case WaitClass::Poll:
      case WaitClass::Select: {
        std::vector<std::string> labels;
        for (const auto& [fd, events] : t.memory.poll_fds) {
          if (fd < 0) continue;
          std::string sub = fd_object(p, fd, (events & (POLLOUT)) == 0, w);
          if (!sub.empty()) {
            w.objects.push_back(sub);
            labels.push_back(graph_.objects[sub].label);
          }
        }
        for (auto& e : extra_objects_) w.objects.push_back(e);
        blocked();
        w.summary = labels.empty() ? fmt::format("{} on unknown fds", desc.name)
                                   : fmt::format("{} on {}", desc.name, fmt::join(labels, ", "));
        break;
      }
      case WaitClass::Epoll: {
        const FdEntry* ep = find_fd(p, static_cast<int>(t.syscall.args[0]));
        std::vector<std::string> labels;
        if (ep) {
          for (const auto& watch : ep->epoll) {
            std::string sub = fd_object(p, watch.target_fd, (watch.events & POLLOUT) == 0, w);
            w.objects.push_back(sub);
            labels.push_back(graph_.objects[sub].label);
          }
        }
        blocked();
        w.summary =
            fmt::format("epoll_wait on {}",
                        labels.empty() ? "nothing known" : fmt::format("{}", fmt::join(labels, ", ")));
        break;
      }
      case WaitClass::ChildWait:
        id = child_object(p, t);
        blocked();
        w.summary = "waits for " + graph_.objects[id].label;
        break;
      case WaitClass::Sleep:
        w.activity = Activity::Sleeping;
        w.summary = w.timeout_s ? fmt::format("sleeps {:.3g} s", *w.timeout_s) : "sleeps";
        break;
      case WaitClass::Pause: {
        WaitObject& o = object("signal", ObjectKind::Unknown, "a signal");
        o.external = true;
        id = o.id;
        blocked();
        w.summary = "waits for a signal";
        break;
      }
      default:
        w.activity = Activity::Unknown;
        w.summary = fmt::format("in {}", desc.name);
        break;
    }
    if (!id.empty()) w.objects.insert(w.objects.begin(), id);
    // Dedupe (poll on both ends of the same pipe, ...).
    std::set<std::string> seen;
    std::vector<std::string> uniq;
    for (auto& o : w.objects)
      if (seen.insert(o).second) uniq.push_back(o);
    w.objects = std::move(uniq);
    for (const auto& o : w.objects) graph_.objects[o].waiters.push_back(t.tid);
    if (timed && w.activity == Activity::TimedWait)
      w.summary += fmt::format(" (timeout {:.3g} s)", *w.timeout_s);
  }

  void finish_objects() {
    for (const auto& pf : pending_futex_) resolve_futex_releasers(pf);
    for (auto& [id, o] : graph_.objects) {
      // A waiter cannot release what it waits on; neither can a dead thread.
      std::set<int> waiters(o.waiters.begin(), o.waiters.end());
      std::set<int> rel;
      for (int tid : o.releasers)
        if (!waiters.count(tid)) rel.insert(tid);
      o.releasers.assign(rel.begin(), rel.end());
      std::set<int> hp(o.holder_pids.begin(), o.holder_pids.end());
      o.holder_pids.assign(hp.begin(), hp.end());
      std::set<int> waiter_pids;
      for (int tid : o.waiters) waiter_pids.insert(graph_.tid_to_pid[tid]);
      o.only_self_holders = !o.releasers.empty();
      for (int tid : o.releasers)
        if (!waiter_pids.count(graph_.tid_to_pid[tid])) o.only_self_holders = false;
    }
  }

  uint64_t progress_cpu_ns_ = 2'000'000;
};

}  // namespace

WaitGraph build_wait_graph(const Snapshot& snapshot) { return GraphBuilder(snapshot).build(); }

}  // namespace hangtrace
