// File locks in the wait-for graph: a thread in flock(fd, LOCK_EX) or
// fcntl(fd, F_SETLKW) waits for every process holding a lock on the same
// file that stands in its way. /proc/locks names the holder of a flock or
// POSIX lock by pid; an OFD lock has none (-1), and is found through the
// fdinfo "lock:" lines of the fds that hold it. A holder nobody can see is
// unknown: the wait is never assumed to end.
#include <fcntl.h>
#include <sys/file.h>

#include <algorithm>

#include <fmt/format.h>

#include "graph_builder.h"
#include "hangtrace/procfs.h"

namespace hangtrace::graph {

namespace {

bool same_file(const FileLock& l, const FdEntry& f) {
  if (l.inode != f.inode) return false;
  // The device is known when the collector stat'ed the waited fd.
  return (f.dev_major == 0 && f.dev_minor == 0) || (l.dev_major == f.dev_major && l.dev_minor == f.dev_minor);
}

bool same_lock(const FileLock& a, const FileLock& b) {
  return a.type == b.type && a.mode == b.mode && a.dev_major == b.dev_major && a.dev_minor == b.dev_minor &&
         a.inode == b.inode && a.start == b.start && a.end == b.end;
}

std::string range_text(const FileLock& l) {
  if (l.type == "FLOCK") return "";
  if (l.start == 0 && !l.end) return ", whole file";
  return fmt::format(", bytes {}-{}", l.start, l.end ? std::to_string(*l.end) : std::string("EOF"));
}

const char* type_text(const std::string& type) {
  if (type == "FLOCK") return "flock";
  if (type == "POSIX") return "POSIX (fcntl/lockf)";
  if (type == "OFDLCK") return "OFD (fcntl F_OFD_SETLK)";
  return "file";
}

}  // namespace

std::string GraphBuilder::file_lock_object(const ProcessInfo& p, const ThreadInfo& t) {
  const int fd = static_cast<int>(t.syscall.args[0]);
  const FdEntry* f = find_fd(p, fd);
  if (!f || f->inode == 0) {
    WaitObject& o = object(fmt::format("file-lock:fd:{}:{}", p.pid, fd), ObjectKind::FileLock,
                           fmt::format("a lock on fd {} of {}", fd, p.pid));
    o.external = true;  // unknown, not free: nothing here claims it ends
    o.notes.push_back("the fd was closed or could not be read: who holds the lock is unknown");
    return o.id;
  }
  // The request as /proc/locks queues it ("->"), else as the call says.
  FileLock wanted;
  bool queued = false;
  for (const auto& l : snap_.file_locks) {
    if (!l.waiting || !same_file(l, *f)) continue;
    if (l.pid != p.pid && l.pid != -1) continue;
    const bool is_flock = l.type == "FLOCK";
    if (is_flock != (t.syscall.nr == HT_NR_flock)) continue;
    wanted = l;
    queued = true;
    break;
  }
  if (!queued) {
    wanted.type = t.syscall.nr == HT_NR_flock         ? "FLOCK"
                  : t.syscall.args[1] == F_OFD_SETLKW ? "OFDLCK"
                                                      : "POSIX";
    wanted.mode = t.syscall.nr == HT_NR_flock && (t.syscall.args[1] & LOCK_SH) ? "READ" : "WRITE";
    wanted.inode = f->inode;
    wanted.dev_major = f->dev_major;
    wanted.dev_minor = f->dev_minor;
  }
  return lock_object_for(p, *f, wanted, queued);
}

// A poll for a lock (LOCK_NB or F_SETLK, retried after a sleep) wants what
// the lock held on the file stands for: the same kind, exclusive.
std::string GraphBuilder::polled_lock_object(const ProcessInfo& p, int fd) {
  const FdEntry* f = find_fd(p, fd);
  FileLock wanted;
  if (f) {
    wanted.inode = f->inode;
    wanted.dev_major = f->dev_major;
    wanted.dev_minor = f->dev_minor;
    for (const auto& l : snap_.file_locks)
      if (!l.waiting && same_file(l, *f) && l.pid != p.pid) {
        wanted.type = l.type;
        break;
      }
  }
  if (!f || f->inode == 0 || wanted.type.empty()) {
    WaitObject& o = object(fmt::format("file-lock:fd:{}:{}", p.pid, fd), ObjectKind::FileLock,
                           fmt::format("a lock on fd {} of {}", fd, p.pid));
    o.external = true;
    o.notes.push_back("the lock on the file is no longer in /proc/locks: who holds it is unknown");
    return o.id;
  }
  wanted.mode = "WRITE";
  return lock_object_for(p, *f, wanted, false);
}

std::string GraphBuilder::lock_object_for(const ProcessInfo& p, const FdEntry& fd_entry,
                                          const FileLock& wanted, bool queued) {
  const FdEntry* f = &fd_entry;
  const std::string path = f->link;
  const std::string id =
      fmt::format("file-lock:{}:{}:{}:{}", wanted.type, wanted.dev_major, wanted.dev_minor, wanted.inode);
  WaitObject& o = object(id, ObjectKind::FileLock,
                         fmt::format("{} lock on {}{}", type_text(wanted.type), path, range_text(wanted)),
                         fmt::format("file-lock:{}", path));
  if (o.releasers_certain || o.external || !o.holder_pids.empty()) return o.id;

  // The holders: the pids /proc/locks names, and whoever holds the lock
  // through an fd (the fdinfo "lock:" lines: OFD locks, flock locks
  // inherited across fork, whose pid is the process that took them).
  std::vector<int> holders_found;
  std::vector<std::string> unseen;
  size_t others_waiting = 0;
  for (const auto& l : snap_.file_locks) {
    if (!same_file(l, *f)) continue;
    if (l.waiting) {
      if (!(queued && l.id == wanted.id && l.pid == wanted.pid)) ++others_waiting;
      continue;
    }
    if (queued && l.id != wanted.id) {
      // The waiter queues behind the lock of its own line number; others may
      // stand in its way too.
      if (!procfs::locks_conflict(l, wanted)) continue;
    } else if (!procfs::locks_conflict(l, wanted)) {
      continue;
    }
    bool found = false;
    for (const auto& q : snap_.processes) {
      if (!alive(q)) continue;
      for (const auto& qf : q.fds) {
        auto held = std::find_if(qf.locks.begin(), qf.locks.end(),
                                 [&](const FileLock& h) { return !h.waiting && same_lock(h, l); });
        if (held == qf.locks.end()) continue;
        if (std::find(holders_found.begin(), holders_found.end(), q.pid) == holders_found.end())
          holders_found.push_back(q.pid);
        o.notes.push_back(
            fmt::format("held by {} through its fd {}{}", process_label(q.pid), qf.fd,
                        q.pid == p.pid ? " (its own process: another open of the same file)" : ""));
        found = true;
        break;
      }
    }
    if (found) continue;
    if (l.pid > 0 && snap_.process(l.pid) && alive(*snap_.process(l.pid))) {
      if (std::find(holders_found.begin(), holders_found.end(), l.pid) == holders_found.end())
        holders_found.push_back(l.pid);
      o.notes.push_back(fmt::format("held by {}", process_label(l.pid)));
    } else {
      unseen.push_back(l.pid > 0 ? fmt::format("process {}, not seen", l.pid)
                                 : fmt::format("{} lock with no owner process (pid {})", l.type, l.pid));
    }
  }
  o.notes.push_back(fmt::format("{} {} lock wanted{}", wanted.mode == "READ" ? "a shared" : "an exclusive",
                                type_text(wanted.type), range_text(wanted)));
  if (others_waiting)
    o.notes.push_back(fmt::format("{} other request(s) queued on the file", others_waiting));
  for (int pid : holders_found) add_releaser_process(o, pid);
  if (!unseen.empty()) {
    o.notes.push_back(fmt::format("also held by what hangtrace cannot see: {}", fmt::join(unseen, ", ")));
  }
  if (holders_found.empty()) {
    // Nobody visible holds it: released since /proc/locks was read, or held
    // by what this host does not show. Unknown, not free.
    o.external = true;
    if (unseen.empty()) o.notes.push_back("no holder in /proc/locks: who holds it is unknown");
    return o.id;
  }
  o.releasers_certain = unseen.empty();
  return o.id;
}

}  // namespace hangtrace::graph
