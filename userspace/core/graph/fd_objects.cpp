// Pipes, sockets, eventfds, timers, files and children in the wait-for
// graph: the object behind a waited-on fd (or child), and who could end the
// wait on it.
#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>

#include <algorithm>

#include <fmt/format.h>

#include "graph_builder.h"
#include "hangtrace/procfs.h"
#include "hangtrace/text.h"

namespace hangtrace::graph {

const FdEntry* find_fd(const ProcessInfo& p, int fd) {
  for (const auto& f : p.fds)
    if (f.fd == fd) return &f;
  return nullptr;
}

namespace {
// waitid's P_PIDFD (linux/wait.h; glibc's <sys/wait.h> names it only from 2.36).
constexpr uint64_t kPidfdIdType = 3;
// The kernel refuses an epoll nested deeper than this (EP_MAX_NESTS).
constexpr int kMaxEpollNesting = 4;
// Watched fds followed for one wait, over all its epolls.
constexpr size_t kMaxEpollObjects = 4096;
}  // namespace

std::vector<std::string> GraphBuilder::epoll_objects(const ProcessInfo& p, const FdEntry& ep, ThreadWait& w,
                                                     int nesting) {
  if (nesting == 0) epoll_budget_ = kMaxEpollObjects;
  std::vector<std::string> out;
  size_t left_out = 0;
  for (const auto& watch : ep.epoll) {
    if (epoll_budget_ == 0) {
      ++left_out;
      continue;
    }
    --epoll_budget_;
    const FdEntry* f = find_fd(p, watch.target_fd);
    if (f && watch.inode != 0 && f->inode != 0 && watch.inode != f->inode) {
      WaitObject& o =
          object(fmt::format("epoll-watch:{}:{}:{}", p.pid, ep.fd, watch.target_fd), ObjectKind::Unknown,
                 fmt::format("fd {} of {} as epoll {} added it", watch.target_fd, p.pid, ep.fd));
      o.external = true;
      o.notes.push_back(fmt::format("the watch is of inode {}; fd {} now holds another file (inode {})",
                                    watch.inode, watch.target_fd, f->inode));
      out.push_back(o.id);
      continue;
    }
    out.push_back(fd_object(p, watch.target_fd, (watch.events & POLLOUT) == 0, w, nesting + 1));
  }
  if (left_out) {
    WaitObject& o = object(fmt::format("epoll-rest:{}:{}", p.pid, ep.fd), ObjectKind::Unknown,
                           fmt::format("{} more fds epoll {} of {} watches", left_out, ep.fd, p.pid));
    o.external = true;
    o.notes.push_back(
        fmt::format("not followed: a wait's epolls are followed to {} watched fds", kMaxEpollObjects));
    out.push_back(o.id);
  }
  return out;
}

std::string GraphBuilder::fd_object(const ProcessInfo& p, int fd, bool want_read, ThreadWait& w,
                                    int nesting) {
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
      id = pipe_object(*f, want_read);
      break;
    case FdKind::Socket:
      id = socket_object(*f);
      break;
    case FdKind::EventFd:
      id = eventfd_object(p, *f);
      break;
    case FdKind::PidFd:
      id = pidfd_object(p, *f);
      break;
    case FdKind::SignalFd:
      id = signal_object(
          fmt::format("signalfd:{}:{}", p.pid, fd),
          f->signal_mask ? fmt::format("signalfd for {}", signal_set_text(*f->signal_mask)) : "signalfd");
      break;
    case FdKind::Epoll: {
      // An epoll inside poll() or another epoll: its watch list, expanded.
      if (nesting >= kMaxEpollNesting) {
        WaitObject& o = object(fmt::format("fd:{}:{}", p.pid, fd), ObjectKind::Unknown,
                               fmt::format("epoll {} of {}", fd, p.pid));
        o.external = true;
        o.notes.push_back(
            fmt::format("nested deeper than the kernel allows ({}): not followed", kMaxEpollNesting));
        return o.id;
      }
      std::string first;
      for (auto& sub : epoll_objects(p, *f, w, nesting)) {
        if (first.empty()) first = sub;
        extra_objects_.push_back(std::move(sub));
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
  } else if (f->queued_bytes > 0 && !want_read && f->kind == FdKind::Pipe) {
    WaitObject& o = graph_.objects[id];
    const std::string note = fmt::format(
        "pipe is full ({} bytes queued): the writer waits for a reader to take some", f->queued_bytes);
    if (std::find(o.notes.begin(), o.notes.end(), note) == o.notes.end()) o.notes.push_back(note);
  }
  return id;
}

// One object per end: a read is released by the holders of the write end,
// and a write by the holders of the read end.
// A FIFO (a named pipe: its fd links to its path) is keyed by its device and
// inode too (an unnamed pipe's device is pipefs, left 0:0), and never
// unreleasable: a process may open it later.
std::string GraphBuilder::pipe_object(const FdEntry& f, bool want_read) {
  const bool fifo = f.dev_major || f.dev_minor;
  const std::string name = fifo ? fmt::format("fifo:{}:{}:{}", f.dev_major, f.dev_minor, f.inode)
                                : fmt::format("pipe:[{}]", f.inode);
  WaitObject& o =
      object(fmt::format("{}:{}", name, want_read ? "r" : "w"), ObjectKind::Pipe,
             fmt::format("{} ({} end)", fifo ? "FIFO " + f.link : name, want_read ? "read" : "write"), name);
  if (!o.holder_pids.empty()) return o.id;
  auto other_end = holders([&](const FdEntry& e) {
    if (e.kind != FdKind::Pipe || e.inode != f.inode || e.dev_major != f.dev_major ||
        e.dev_minor != f.dev_minor)
      return false;
    int mode = static_cast<int>(e.flags & O_ACCMODE);
    return want_read ? (mode == O_WRONLY || mode == O_RDWR) : (mode == O_RDONLY || mode == O_RDWR);
  });
  for (int pid : other_end) add_releaser_process(o, pid);
  o.releasers_certain = !fifo;
  if (fifo) {
    // Anyone allowed to open the path can join as a writer (a reader): those
    // holding it now are who could, not all who can.
    o.external = true;
    o.notes.push_back(fmt::format("a FIFO: any process that may open {} can {} it too", f.link,
                                  want_read ? "write" : "read"));
  }
  return o.id;
}

// A socket is released by whoever holds its peer: the other end of a
// socketpair or of a local TCP connection, the listener that has not yet
// accepted a connect, the UDP socket bound to where a UDP socket sends (a
// resolver on 127.0.0.53:53), or nobody this host can see (a remote end, a
// listening socket, an unconnected UDP socket: external).
std::string GraphBuilder::socket_object(const FdEntry& f) {
  const SocketInfo* s = snap_.socket(f.inode);
  if (!s) {
    WaitObject& o =
        object(fmt::format("socket:[{}]", f.inode), ObjectKind::Socket, fmt::format("socket:[{}]", f.inode));
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
  o.remote_on_this_host = s->family != "unix" && s->remote_is_local_host;
  o.peer_socket = s->peer_inode;
  if (!o.holder_pids.empty() || o.external) return o.id;

  if (s->state == "LISTEN") {
    o.listening = kind == ObjectKind::TcpSocket;
    o.external = true;  // anyone may connect
    o.notes.push_back("listening: waits for a client to connect");
    return o.id;
  }
  if (kind == ObjectKind::UdpSocket && !s->peer_inode) return udp_server(*s, o);
  if ((kind == ObjectKind::TcpSocket || kind == ObjectKind::UdpSocket) && !s->remote_is_local_host) {
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
  } else if (kind == ObjectKind::UnixSocket && s->pending_on_listener) {
    // Connected, not accepted yet: whoever holds the listener accepts it.
    const uint64_t listener = s->pending_on_listener;
    peer_holders = holders([&](const FdEntry& e) { return e.kind == FdKind::Socket && e.inode == listener; });
    const SocketInfo* ls = snap_.socket(listener);
    o.notes.push_back(fmt::format("not accepted yet by the listening unix socket:[{}]{}", listener,
                                  ls && !ls->local.empty() ? " " + ls->local : ""));
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
  return o.id;
}

// A UDP socket sending to an address of this host is answered by whoever
// holds the socket bound there (the address itself or the wildcard, in the
// same network namespace); one with no remote end is released from outside.
std::string GraphBuilder::udp_server(const SocketInfo& s, WaitObject& o) {
  auto remote = procfs::parse_endpoint(s.remote);
  if (!remote || remote->port == 0) {
    o.external = true;  // unconnected: anyone may send to it
    return o.id;
  }
  if (!s.remote_is_local_host) {
    o.external = true;
    o.notes.push_back(fmt::format("the other end, {}, is not on this host", s.remote));
    return o.id;
  }
  std::vector<const SocketInfo*> bound;
  for (const auto& b : snap_.sockets) {
    if (b.inode == s.inode || b.family.rfind("udp", 0) != 0) continue;
    if (b.netns && s.netns && b.netns != s.netns) continue;  // a loopback address is per namespace
    auto local = procfs::parse_endpoint(b.local), far = procfs::parse_endpoint(b.remote);
    if (!local || local->port != remote->port || (far && far->port != 0)) continue;
    if (local->ip == remote->ip || procfs::is_unspecified_address(local->ip)) bound.push_back(&b);
  }
  std::vector<int> server_holders;
  for (const auto* b : bound) {
    const uint64_t ino = b->inode;
    auto h = holders([&](const FdEntry& e) { return e.kind == FdKind::Socket && e.inode == ino; });
    for (int pid : h)
      if (std::find(server_holders.begin(), server_holders.end(), pid) == server_holders.end())
        server_holders.push_back(pid);
  }
  if (server_holders.empty()) {
    o.external = true;
    o.notes.push_back(
        bound.empty() ? fmt::format("no process on this host listens on {}", s.remote)
                      : fmt::format("{} is bound by a socket no process hangtrace can see holds", s.remote));
    return o.id;
  }
  o.notes.push_back(fmt::format("{} is bound by {} of this host", s.remote,
                                server_holders.size() == 1
                                    ? fmt::format("process {}", server_holders[0])
                                    : fmt::format("{} processes", server_holders.size())));
  for (int pid : server_holders) add_releaser_process(o, pid);
  o.releasers_certain = true;
  return o.id;
}

// Any holder of the same eventfd may write it; without the kernel's id for
// it, only its own process is known to hold it.
std::string GraphBuilder::eventfd_object(const ProcessInfo& p, const FdEntry& f) {
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

// A pidfd turns readable when its process exits: that process ends the
// wait, by exiting, and what it does instead continues the chain. It may be
// anyone's process (pidfd_open takes any pid), so it is looked up host-wide.
std::string GraphBuilder::pidfd_object(const ProcessInfo& p, const FdEntry& f) {
  if (!f.pidfd_pid) {
    WaitObject& o = object(fmt::format("pidfd:{}:{}", p.pid, f.fd), ObjectKind::Child,
                           fmt::format("pidfd {} of {}", f.fd, p.pid));
    o.external = true;
    o.notes.push_back("which process it refers to could not be read");
    return o.id;
  }
  const int target = *f.pidfd_pid;
  WaitObject& o = object(
      fmt::format("exit:{}", target), ObjectKind::Child,
      target > 0 ? fmt::format("the exit of process {} (pidfd)", target) : "the exit of a process (pidfd)");
  if (!o.holder_pids.empty() || o.releasers_certain || o.external || o.ready) return o.id;
  const ProcessInfo* q = target > 0 ? snap_.process(target) : nullptr;
  if (target <= 0 || (q && !alive(*q))) {
    o.ready = true;
    o.notes.push_back("the process has exited: the wait ends at once");
  } else if (!q) {
    o.external = true;
    o.notes.push_back(fmt::format("process {} could not be read", target));
  } else {
    add_releaser_process(o, target);
    o.releasers_certain = true;
  }
  return o.id;
}

// Who sends a signal is not known until it is sent: the kernel keeps no list
// of who may.
std::string GraphBuilder::signal_object(const std::string& id, const std::string& label) {
  WaitObject& o = object(id, ObjectKind::Signal, label);
  o.external = true;
  if (o.notes.empty()) o.notes.push_back("who would send it is not known until it is sent");
  return o.id;
}

// A pause or sigsuspend of a process that catches SIGCHLD and does not block
// it (a wrapper such as `timeout`, a supervisor): a child's exit ends it.
// Released by its live children; a zombie one's signal has come already.
// Empty when it has no live child in the snapshot.
std::string GraphBuilder::child_exit_object(const ProcessInfo& p) {
  std::vector<int> live;
  for (int child : p.children)
    if (const ProcessInfo* c = snap_.process(child); c && alive(*c)) live.push_back(child);
  if (live.empty() || p.role == ProcessRole::Peer) return "";
  WaitObject& o = object(fmt::format("child-exit:{}", p.pid), ObjectKind::Child,
                         fmt::format("the exit of a child of {} (SIGCHLD)", p.pid));
  if (o.releasers_certain) return o.id;
  o.releasers_certain = true;
  for (int child : live) add_releaser_process(o, child);
  return o.id;
}

// wait4/waitid: released by the live children it waits for (a zombie one
// ends the wait at once).
std::string GraphBuilder::child_object(const ProcessInfo& p, const ThreadInfo& t) {
  int which = -1;  // -1: any child
  if (t.syscall.nr == HT_NR_wait4) {
    which = static_cast<int>(t.syscall.args[0]);
  } else if (t.syscall.args[0] == static_cast<uint64_t>(P_PID)) {  // waitid(idtype, id, ...)
    which = static_cast<int>(t.syscall.args[1]);
  } else if (t.syscall.args[0] == kPidfdIdType) {  // waitid(P_PIDFD, fd, ...)
    const FdEntry* f = find_fd(p, static_cast<int>(t.syscall.args[1]));
    if (f && f->pidfd_pid && *f->pidfd_pid > 0) which = *f->pidfd_pid;
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

}  // namespace hangtrace::graph
