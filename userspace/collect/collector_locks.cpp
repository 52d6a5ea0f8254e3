// The file locks the job waits for: the lines of /proc/locks on the files a
// thread of the job waits to lock (flock, fcntl F_SETLKW/F_OFD_SETLKW), and
// the processes holding them, pulled into the snapshot as peers when they
// are outside the job -- another user's, another container's. /proc/locks
// names a flock or POSIX lock's process; an OFD lock has none (pid -1) and
// a flock lock outlives the process that took it in a forked child, so
// those are found through the fds holding them (fdinfo "lock:" lines).
#include <unistd.h>

#include <algorithm>
#include <set>

#include "collector_pass.h"
#include "hangtrace/syscalls.h"

namespace hangtrace::collector_pass {

void Collector::collect_file_locks() {
  std::set<procfs::FileId> files;
  std::set<std::string> paths;
  for (auto& p : snap_.processes) {
    for (const auto& t : p.threads) {
      if (t.syscall.mode != SyscallState::Mode::InSyscall ||
          describe_syscall(t.syscall.nr).wait != WaitClass::FileLock ||
          !waits_for_file_lock(t.syscall.nr, t.syscall.args))
        continue;
      const int fd = static_cast<int>(t.syscall.args[0]);
      auto e = std::find_if(p.fds.begin(), p.fds.end(), [fd](const FdEntry& x) { return x.fd == fd; });
      if (e == p.fds.end()) continue;
      auto id = proc_.fd_file(proc_id(p.pid), fd);
      if (!id) continue;
      e->dev_major = id->dev_major;
      e->dev_minor = id->dev_minor;
      e->inode = id->inode;
      files.insert(*id);
      paths.insert(e->link);
    }
  }
  if (files.empty()) return;
  int err = 0;
  auto locks = proc_.locks(&err);
  if (!locks) {
    limitation(fmt::format("who holds the file locks the job waits for is unknown: {}", locks.error()));
    return;
  }
  add_file_locks(*locks, files, paths);
}

void Collector::add_file_locks(const std::vector<FileLock>& locks, const std::set<procfs::FileId>& files,
                               const std::set<std::string>& paths) {
  std::unordered_set<int> in_snapshot;
  for (const auto& p : snap_.processes) in_snapshot.insert(p.pid);
  std::vector<int> holders;
  bool want_fd_scan = false;
  for (const auto& l : locks) {
    if (!files.count(procfs::FileId{l.dev_major, l.dev_minor, l.inode})) continue;
    if (std::any_of(snap_.file_locks.begin(), snap_.file_locks.end(), [&](const FileLock& have) {
          return have.id == l.id && have.pid == l.pid && have.waiting == l.waiting && have.inode == l.inode;
        }))
      continue;  // already kept (a poller's file the job also waits on)
    snap_.file_locks.push_back(l);
    if (l.waiting) continue;
    // A holder named by pid that is alive; else (OFD, gone, another pid
    // namespace's) whoever holds it through an fd.
    if (l.pid > 0 && stats_.count(l.pid)) {
      if (!in_snapshot.count(l.pid) && std::find(holders.begin(), holders.end(), l.pid) == holders.end())
        holders.push_back(l.pid);
    } else {
      want_fd_scan = true;
    }
  }
  if (want_fd_scan) {
    std::unordered_set<int> skip = in_snapshot;
    skip.insert(holders.begin(), holders.end());
    for (int pid : host_processes_holding(skip, kMaxPeers, [&](int pid, int fd, const std::string&link) {
           if (!paths.count(link)) return false;
           auto id = proc_.fd_file(pid, fd);
           if (!id || !files.count(*id)) return false;
           auto info = proc_.fdinfo(pid, fd);
           return info && std::any_of(info->locks.begin(), info->locks.end(),
                                      [](const FileLock& h) { return !h.waiting; });
         }))
      holders.push_back(pid);
  }
  if (!options_.include_peers) return;
  if (holders.size() > kMaxPeers) {
    limitation(fmt::format("more than {} processes hold the locks the job waits for; only the first {} kept",
                           kMaxPeers, kMaxPeers));
    holders.resize(kMaxPeers);
  }
  for (int pid : holders) {
    auto p = collect_process(pid, ProcessRole::Peer);
    if (!p) continue;
    // The fds holding the lock carry their device, as the waiters' do.
    for (auto& f : p->fds) {
      if (f.locks.empty()) continue;
      if (auto id = proc_.fd_file(proc_id(pid), f.fd); id && files.count(*id)) {
        f.dev_major = id->dev_major;
        f.dev_minor = id->dev_minor;
        f.inode = id->inode;
      }
    }
    snap_.processes.push_back(std::move(*p));
  }
  debug(fmt::format("{} file lock line(s) on {} file(s) waited for, {} holder(s) outside the job",
                    snap_.file_locks.size(), files.size(), holders.size()));
}

}  // namespace hangtrace::collector_pass
