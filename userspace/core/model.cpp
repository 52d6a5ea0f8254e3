// Lookups in a Snapshot, and which of two readings of a thread stands (model.h).
#include "hangtrace/model.h"

#include <csignal>

#include <algorithm>
#include <iterator>

#include "hangtrace/abi.h"
#include "hangtrace/syscalls.h"

namespace hangtrace {

const ThreadInfo* ProcessInfo::thread(int tid) const {
  for (const auto& t : threads)
    if (t.tid == tid) return &t;
  return nullptr;
}

bool ProcessInfo::woken_by_child_exit() const {
  const uint64_t sigchld = uint64_t{1} << (SIGCHLD - 1);
  return signals_caught && main_signals_blocked && (*signals_caught & sigchld) &&
         !(*main_signals_blocked & sigchld);
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

bool adopt_iterator_syscall(ThreadInfo& t, const KernelTaskView& view, int64_t iterator_syscall_nr,
                            const uint64_t (&iterator_syscall_args)[6]) {
  if (iterator_syscall_nr < 0) return false;
  if (t.syscall.mode == SyscallState::Mode::Running && !view.on_cpu &&
      (view.state & HT_TASK_STATE_UNINTERRUPTIBLE))
    t.state = 'D';
  else if (t.syscall.mode == SyscallState::Mode::Running && !view.on_cpu &&
           (view.state & HT_TASK_STATE_INTERRUPTIBLE))
    t.state = 'S';
  else if (t.syscall.mode != SyscallState::Mode::Unknown)
    return false;  // /proc's reading stands: in a syscall, or running (or runnable) still
  t.syscall.mode = SyscallState::Mode::InSyscall;
  t.syscall.nr = iterator_syscall_nr;
  std::copy(std::begin(iterator_syscall_args), std::end(iterator_syscall_args), t.syscall.args);
  t.syscall.sp = view.user_sp;
  t.syscall.pc = view.user_ip;
  return true;
}

std::vector<int> directly_waited_fds(const SyscallState& sc, const WaitMemory& memory) {
  std::vector<int> fds;
  if (sc.mode != SyscallState::Mode::InSyscall) return fds;
  const WaitClass wait = describe_syscall(sc.nr).wait;
  // A file lock's fd too, though the BPF dispatcher does not track the call.
  if (wait_class_takes_fd(wait) || wait == WaitClass::FileLock) {
    fds.push_back(static_cast<int>(sc.args[0]));
    return fds;
  }
  switch (wait) {
    case WaitClass::Poll:
    case WaitClass::Select:
      for (const auto& [fd, events] : memory.poll_fds) {
        if (fd >= 0) fds.push_back(fd);
      }
      break;
    default:
      break;
  }
  return fds;
}

}  // namespace hangtrace
