// Snapshot -> wait-for graph, internal to hangtrace_core. One builder, in
// three files by the kind of object a thread can wait on:
//   graph.cpp          each thread's activity and wait, the graph's finishing pass
//   futex_objects.cpp  locks: where a futex lives, what its word says, who can unlock it
//   fd_objects.cpp     pipes, sockets, eventfds, timers, files, and children
//   gil_objects.cpp    the GIL of a Python process: who waits for it, who holds it
//   fs_objects.cpp     waits inside a filesystem: the file, its mount, who serves it
// Every object records who could end the wait on it (its releasers) as it is
// made, except futexes: their owner may be any thread of the snapshot, so
// they are resolved once every thread has been classified.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "hangtrace/analysis.h"
#include "hangtrace/syscalls.h"

namespace hangtrace::graph {

// A zombie or exiting task releases nothing.
inline bool alive(const ProcessInfo& p) { return p.state != 'Z' && p.state != 'X'; }
inline bool alive(const ThreadInfo& t) { return t.state != 'Z' && t.state != 'X'; }

class GraphBuilder {
 public:
  explicit GraphBuilder(const Snapshot& s);
  WaitGraph build();

 private:
  const Snapshot& snap_;
  WaitGraph graph_;
  // Objects found inside an epoll set that poll() was given, for the
  // current thread (fd_object adds them, resolve_wait consumes them).
  std::vector<std::string> extra_objects_;
  uint64_t progress_cpu_ns_ = 2'000'000;

  // ---- graph.cpp: threads and the finishing pass ---------------------------
  void classify(const ProcessInfo& p, const ThreadInfo& t);
  void resolve_wait(const ProcessInfo& p, const ThreadInfo& t, const SyscallDesc& desc, ThreadWait& w);
  // Input only a person ends (ThreadWait::input_fd): its objects are
  // released from outside, whoever holds their other end.
  void mark_person_input(const ProcessInfo& p, const ThreadInfo& t, ThreadWait& w);
  void finish_objects();
  // The object of `id`, made with `kind` and `label` (and `name`, the id when
  // empty) the first time it is asked for.
  WaitObject& object(const std::string& id, ObjectKind kind, const std::string& label,
                     const std::string& name = {});
  // Every live thread of `pid` can release `o`.
  void add_releaser_process(WaitObject& o, int pid);
  std::string process_label(int pid) const;  // "212 (python3)"

  // ---- futex_objects.cpp ------------------------------------------------------
  // The futex `t` waits on ("" for a futex call that does not wait).
  std::string futex_object(const ProcessInfo& p, const ThreadInfo& t, ThreadWait& w);
  std::string python_lock_object(const ProcessInfo& p, const PythonLockWait& lock, ThreadWait& w);
  void resolve_futex_releasers(WaitObject& o);
  void release_by_owner(WaitObject& o, const FutexLocation& where, int owner);
  // The host TID of the owner a lock word records (in the pid namespace of
  // the threads sharing the lock); nullopt, with a note on `o`, when no
  // such thread has that id there.
  std::optional<int> owner_on_host(const ProcessInfo& waiter, const FutexLocation& where, int owner,
                                   WaitObject& o);
  void release_by_any_thread(WaitObject& o, const FutexLocation& where);

  // ---- gil_objects.cpp ---------------------------------------------------------
  // `t` (in a futex call) waits for its interpreter's GIL.
  bool is_gil_wait(const ProcessInfo& p, const ThreadInfo& t) const;
  // A thread of `p` holds its GIL while in a syscall (blocked, not running).
  bool gil_held_by_blocked_thread(const ProcessInfo& p) const;
  // The GIL object of `p`, released by the thread that holds it.
  std::string gil_object(const ProcessInfo& p, ThreadWait& w);
  // Once waiters are known: a GIL nobody else holds is free (ready).
  void finish_gil(WaitObject& o);

  // ---- fs_objects.cpp -----------------------------------------------------------
  // A wait of `t` inside a filesystem (state D, or a FUSE request): sets its
  // activity, summary and object and returns true; false when it is not one.
  bool fs_wait(const ProcessInfo& p, const ThreadInfo& t, const SyscallDesc& desc, ThreadWait& w);

  // ---- lock_objects.cpp ---------------------------------------------------------
  // The file lock `t` waits to take (flock, fcntl F_SETLKW/F_OFD_SETLKW),
  // released by the processes holding a conflicting lock (/proc/locks, and
  // for OFD locks the fdinfo "lock:" lines of the fds that hold them).
  std::string file_lock_object(const ProcessInfo& p, const ThreadInfo& t);
  // The lock a polling thread's process may be after on its fd `fd`.
  std::string polled_lock_object(const ProcessInfo& p, int fd);
  std::string lock_object_for(const ProcessInfo& p, const FdEntry& f, const FileLock& wanted, bool queued);

  // ---- fd_objects.cpp -----------------------------------------------------------
  // `nesting`: how many epolls deep this fd was reached (0: the wait's own
  // fd); an epoll among them is expanded (epoll_objects).
  std::string fd_object(const ProcessInfo& p, int fd, bool want_read, ThreadWait& w, int nesting = 0);
  // The objects of epoll `ep`'s watch list, each watched fd's, nested
  // epolls expanded to the kernel's own bound on nesting (EP_MAX_NESTS), at
  // most kMaxEpollObjects a wait (epoll_budget_). A watch names its fd by
  // the number it had when added: one whose fd now holds another file (its
  // inode differs: closed and the number reused, even by an epoll) is not
  // followed but said, so a watch list cannot lead the walk in a circle.
  std::vector<std::string> epoll_objects(const ProcessInfo& p, const FdEntry& ep, ThreadWait& w, int nesting);
  size_t epoll_budget_ = 0;
  std::string pipe_object(const FdEntry& f, bool want_read);
  std::string socket_object(const FdEntry& f);
  std::string udp_server(const SocketInfo& s, WaitObject& o);
  std::string eventfd_object(const ProcessInfo& p, const FdEntry& f);
  std::string child_object(const ProcessInfo& p, const ThreadInfo& t);
  std::string child_exit_object(const ProcessInfo& p);
  std::string pidfd_object(const ProcessInfo& p, const FdEntry& f);
  std::string signal_object(const std::string& id, const std::string& label);
  // Every live process in the snapshot holding an fd for which `pred` is true.
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
};

const FdEntry* find_fd(const ProcessInfo& p, int fd);

}  // namespace hangtrace::graph
