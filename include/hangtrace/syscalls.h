// Decoding of the blocking syscalls hangtrace understands. Numbers are
// HT_NR_<name> (hangtrace/syscall_nr.h): the architecture's one syscall
// table, which also gives each call its name and WaitClass here.
#pragma once

#include <linux/futex.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hangtrace/syscall_nr.h"

namespace hangtrace {

// What a blocked syscall waits for, before any object is resolved. The
// enumerators are the `wait` column of the syscall table.
enum class WaitClass {
  None,       // not a waiting syscall (or not in a syscall)
  Futex,      // futex, futex_waitv, futex_wait
  FdRead,     // read/readv/pread/recv*: args[0] is the fd
  FdWrite,    // write/writev/pwrite/send*: args[0] is the fd
  Poll,       // poll/ppoll: pollfd array in memory
  Select,     // select/pselect6: fd_sets in memory
  Epoll,      // epoll_wait/epoll_pwait/epoll_pwait2: args[0] is the epoll fd
  Accept,     // accept/accept4: args[0] is the listening fd
  Connect,    // connect: args[0]
  ChildWait,  // wait4/waitid
  Sleep,      // nanosleep/clock_nanosleep
  Pause,      // pause/rt_sigsuspend/rt_sigtimedwait
  FileLock,   // flock(fd, LOCK_EX/LOCK_SH), fcntl(fd, F_SETLKW/F_OFD_SETLKW): args[0] is the fd
  Other,      // a syscall that may block, not modelled yet (msgrcv, fsync, ...)
};

const char* wait_class_name(WaitClass c);
// Whether a call of class FileLock sleeps until the lock is free: flock
// without LOCK_NB, fcntl F_SETLKW / F_OFD_SETLKW (not F_SETLK, F_GETFL, ...).
bool waits_for_file_lock(int64_t nr, const uint64_t args[6]);
// Whether a call only sleeps: nanosleep, clock_nanosleep, and select/poll
// given no fds to watch and a timeout (time.sleep on CPython before 3.11
// is a select).
bool only_sleeps(int64_t nr, const uint64_t args[6]);
// Whether a call of this class waits on the fd in its args[0] (read, send,
// accept, epoll_wait, ...).
bool wait_class_takes_fd(WaitClass c);

struct SyscallDesc {
  int64_t nr = -1;
  std::string name;  // "futex", "read", ... or "syscall_N"
  WaitClass wait = WaitClass::None;
  int wait_kind = -1;  // enum ht_wait_kind its waits are counted under; -1: not a counted wait
};

SyscallDesc describe_syscall(int64_t nr);

// futex(2) op word decoding.
struct FutexOp {
  int cmd = 0;              // op & FUTEX_CMD_MASK
  std::string cmd_name;     // "FUTEX_WAIT_BITSET"
  bool is_private = false;  // FUTEX_PRIVATE_FLAG
  bool clock_realtime = false;
  bool is_wait = false;  // a command that sleeps (WAIT, WAIT_BITSET, LOCK_PI, LOCK_PI2, WAIT_REQUEUE_PI)
  bool is_pi = false;    // LOCK_PI / LOCK_PI2 / WAIT_REQUEUE_PI / TRYLOCK_PI
  bool absolute_timeout = false;  // WAIT_BITSET and LOCK_PI take absolute times
  std::string text;               // "FUTEX_WAIT_BITSET|FUTEX_PRIVATE_FLAG|FUTEX_CLOCK_REALTIME"
};

FutexOp decode_futex_op(uint32_t op);

// The futex word of a PI futex (and of robust mutexes) carries the owner TID.
constexpr uint32_t kFutexTidMask = FUTEX_TID_MASK;
constexpr uint32_t kFutexWaiters = FUTEX_WAITERS;
constexpr uint32_t kFutexOwnerDied = FUTEX_OWNER_DIED;

// Where in the args the syscall keeps its timeout, to be read from memory.
struct TimeoutArg {
  enum class Kind { None, TimespecPtr, Milliseconds, TimevalPtr } kind = Kind::None;
  int arg_index = -1;
  bool absolute = false;  // the timespec is an absolute time
};
TimeoutArg timeout_arg(int64_t nr, const uint64_t args[6]);

// A one-line human rendering of the call, e.g.
//   futex(0x7f..40, FUTEX_WAIT_BITSET|FUTEX_PRIVATE_FLAG, 0, NULL)
//   read(5, 0x7f.., 4)
//   poll([{fd=5, POLLIN}], 1, 5000)
std::string format_syscall(int64_t nr, const uint64_t args[6],
                           const std::vector<std::pair<int, uint32_t>>& poll_fds = {});

}  // namespace hangtrace
