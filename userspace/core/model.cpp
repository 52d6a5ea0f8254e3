// Lookups in a Snapshot, and which of two readings of a thread stands (model.h).
#include "hangtrace/model.h"

#include <algorithm>
#include <iterator>

#include "hangtrace/abi.h"

namespace hangtrace {

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

}  // namespace hangtrace
