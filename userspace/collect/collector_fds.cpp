// The collector's fds and mappings: every fd of a process with its link and
// fdinfo, the mappings futexes and /dev/shm need, and the readiness of the
// fds a thread waits on (pidfd_getfd + poll).
#include <set>

#include "collector_pass.h"
#include "fd_probe.h"
#include "hangtrace/syscalls.h"

namespace hangtrace::collector_pass {

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
      e.pidfd_pid = info->pidfd_pid;
      e.signal_mask = info->signalfd_mask;
      e.epoll = std::move(info->epoll);
      e.locks = std::move(info->locks);
      if (info->epoll_watches_left_out)
        limitation(
            fmt::format("epoll fd {} of {} watches more than {} fds: the rest of its watch list was not read",
                        fd, p.pid, e.epoll.size()));
      if (e.inode == 0 && info->inode) e.inode = *info->inode;
      if (info->mnt_id) e.mnt_id = *info->mnt_id;
    }
    p.fds.push_back(std::move(e));
  }
  if (!fifos_.empty()) mark_fifos(p);
}

// A FIFO's fd links to its path, as a file's does: only stat tells them
// apart. Each FIFO a thread of the job waits on becomes a pipe keyed by its
// device and inode; then every fd on the same path (the job's and, as they
// are collected, the peers') is checked against it.
void Collector::resolve_fifos() {
  for (auto& p : snap_.processes) {
    if (exited_.count(p.pid)) continue;
    for (const auto& t : p.threads) {
      for (int fd : waited_fds(p, t)) {
        auto f = std::find_if(p.fds.begin(), p.fds.end(), [fd](const FdEntry& e) { return e.fd == fd; });
        if (f == p.fds.end() || f->kind != FdKind::File || fifos_.size() >= kMaxPeers) continue;
        auto st = proc_.fd_stat(proc_id(p.pid), fd);
        if (st && st->fifo) fifos_.emplace(f->link, st->id);
      }
    }
  }
  if (fifos_.empty()) return;
  for (auto& p : snap_.processes)
    if (!exited_.count(p.pid)) mark_fifos(p);
}

void Collector::mark_fifos(ProcessInfo& p) {
  for (auto& f : p.fds) {
    if (f.kind != FdKind::File) continue;
    auto known = fifos_.find(f.link);
    if (known == fifos_.end()) continue;
    auto st = proc_.fd_stat(proc_id(p.pid), f.fd);
    if (!st || !st->fifo || st->id != known->second) continue;
    f.kind = FdKind::Pipe;
    f.inode = st->id.inode;
    f.dev_major = st->id.dev_major;
    f.dev_minor = st->id.dev_minor;
  }
}

// Only a thread that may be waiting in a filesystem (state D, or in a read or
// write of a file) makes its process's mount table worth reading, and of it
// only the mounts of the files waited on are kept.
void Collector::collect_mounts(ProcessInfo& p) {
  std::set<int> wanted;
  for (const auto& t : p.threads) {
    const bool in_io = t.state == 'D' || (t.syscall.mode == SyscallState::Mode::InSyscall &&
                                          wait_class_takes_fd(describe_syscall(t.syscall.nr).wait));
    if (!in_io) continue;
    for (int fd : waited_fds(p, t)) {
      const FdEntry* f = nullptr;
      for (const auto& e : p.fds)
        if (e.fd == fd) f = &e;
      if (f && f->mnt_id >= 0 && (f->kind == FdKind::File || f->kind == FdKind::ShmFile))
        wanted.insert(f->mnt_id);
    }
  }
  if (wanted.empty()) return;
  int err = 0;
  auto table = proc_.mountinfo(proc_id(p.pid), &err);
  if (!table) {
    if (!is_gone_errno(err)) limitation(fmt::format("mounts of {} unknown: {}", p.pid, table.error()));
    return;
  }
  for (auto& m : table->mounts)
    if (wanted.count(m.mount_id)) p.mounts.push_back(std::move(m));
  if (p.mounts.size() < wanted.size() && (table->malformed || table->truncated))
    limitation(fmt::format("mounts of {}: {} line(s) of its mountinfo did not parse{}", p.pid,
                           table->malformed,
                           table->truncated ? ", and it has more mounts than are read" : ""));
}

void Collector::keep_maps(ProcessInfo& p, const std::vector<Mapping>& maps) {
  const auto& futexes = futex_addresses_[p.pid];
  for (const auto& m : maps) {
    if (m.path.find("libpython") != std::string::npos) p.is_python = true;
    // Futex resolution needs the shared mappings (a futex there is shared
    // across processes) and the mappings the waited-on futexes live in.
    bool keep = m.shared() || m.path.rfind("/dev/shm/", 0) == 0 ||
                (m.path.size() > 10 && m.path.compare(m.path.size() - 10, 10, " (deleted)") == 0);
    for (size_t i = 0; !keep && i < futexes.size(); ++i) keep = futexes[i] >= m.start && futexes[i] < m.end;
    if (keep) p.maps.push_back(m);
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

}  // namespace hangtrace::collector_pass
