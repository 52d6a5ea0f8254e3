// The file locks the job waits for: the lines of /proc/locks on the files a
// thread of the job waits to lock (flock, fcntl F_SETLKW/F_OFD_SETLKW), and
// the processes holding them, pulled into the snapshot as peers when they
// are outside the job -- another user's, another container's. /proc/locks
// names a flock or POSIX lock's process; an OFD lock has none (pid -1) and
// a flock lock outlives the process that took it in a forked child, so
// those are found through the fds holding them (fdinfo "lock:" lines).
//
// And the processes outside the job that map a lock in shared memory the job
// waits on (a POSIX semaphore in /dev/shm, a multiprocessing lock): a lock
// word without an owner does not say who holds it, so whoever else maps it
// is in the snapshot, as a peer, to be judged -- not left out unseen. Only
// while no thread of the job that could post it runs: reading every process's
// maps is the price of a verdict that depends on it.
#include <linux/futex.h>
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

void Collector::find_lock_sharers() {
  std::set<procfs::FileId> objects;
  std::unordered_set<int> in_snapshot;
  for (const auto& p : snap_.processes) in_snapshot.insert(p.pid);
  for (const auto& p : snap_.processes) {
    if (p.role == ProcessRole::Peer || exited_.count(p.pid)) continue;
    std::vector<uint64_t> shared_waits;
    for (const auto& t : p.threads)
      if (t.syscall.mode == SyscallState::Mode::InSyscall && t.syscall.nr == HT_NR_futex &&
          (t.syscall.args[1] & FUTEX_PRIVATE_FLAG) == 0)
        shared_waits.push_back(t.syscall.args[0]);
    if (shared_waits.empty()) continue;
    auto maps = proc_.maps(proc_id(p.pid));
    if (!maps) continue;
    for (const auto& m : *maps)
      for (uint64_t uaddr : shared_waits)
        if (m.shared() && m.inode != 0 && uaddr >= m.start && uaddr < m.end)
          objects.insert(procfs::FileId{m.dev_major, m.dev_minor, m.inode});
  }
  if (objects.empty()) return;
  auto maps_one = [&](const std::vector<Mapping>& maps) {
    return std::any_of(maps.begin(), maps.end(), [&](const Mapping& m) {
      return m.shared() && objects.count(procfs::FileId{m.dev_major, m.dev_minor, m.inode});
    });
  };
  // A job thread on CPU in a process that maps the lock can still post it:
  // then the job is not stuck on it, and the host is not searched.
  for (const auto& p : snap_.processes) {
    if (p.role == ProcessRole::Peer || exited_.count(p.pid) ||
        std::none_of(p.threads.begin(), p.threads.end(), [](const ThreadInfo& t) { return t.state == 'R'; }))
      continue;
    if (auto maps = proc_.maps(proc_id(p.pid)); maps && maps_one(*maps)) return;
  }
  const int self = getpid();
  std::vector<int> sharers;
  for (int pid : all_pids_) {
    if (sharers.size() > kMaxPeers) break;
    if (in_snapshot.count(pid) || pid == self) continue;
    auto st = stats_.find(pid);
    if (st == stats_.end() || st->second.is_kernel_thread()) continue;
    if (auto maps = proc_.maps(proc_id(pid)); maps && maps_one(*maps)) sharers.push_back(pid);
  }
  if (sharers.size() > kMaxPeers) {
    limitation(fmt::format(
        "more than {} processes outside the job map the locks it waits on; only the first {} kept", kMaxPeers,
        kMaxPeers));
    sharers.resize(kMaxPeers);
  }
  for (int pid : sharers)
    if (auto p = collect_process(pid, ProcessRole::Peer)) snap_.processes.push_back(std::move(*p));
  debug(fmt::format("{} process(es) outside the job map the {} shared lock object(s) it waits on",
                    sharers.size(), objects.size()));
}

}  // namespace hangtrace::collector_pass
