// The collector's fds and mappings: every fd of a process with its link and
// fdinfo, the mappings futexes and /dev/shm need, and the readiness of the
// fds a thread waits on (pidfd_getfd + poll).
#include <set>

#include "collector_pass.h"
#include "fd_probe.h"

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
      e.epoll = std::move(info->epoll);
      if (e.inode == 0 && info->inode) e.inode = *info->inode;
    }
    p.fds.push_back(std::move(e));
  }
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
