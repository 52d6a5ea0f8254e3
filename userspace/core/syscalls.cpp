#include "hangtrace/syscalls.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/futex.h>
#include <sys/file.h>
#include <poll.h>
#include <time.h>

#include <array>

#include "hangtrace/abi.h"

namespace hangtrace {
namespace {

struct Entry {
  int64_t nr;
  const char* name;
  WaitClass wait;
  int wait_kind;  // enum ht_wait_kind, -1: none
};

// The table's `kind` column as enum ht_wait_kind.
#define HT_WAIT_KIND_OF_NONE (-1)
#define HT_WAIT_KIND_OF_FUTEX HT_WAIT_FUTEX
#define HT_WAIT_KIND_OF_IO HT_WAIT_IO
#define HT_WAIT_KIND_OF_NET HT_WAIT_NET
#define HT_WAIT_KIND_OF_POLL HT_WAIT_POLL
#define HT_WAIT_KIND_OF_CHILD HT_WAIT_CHILD
#define HT_WAIT_KIND_OF_SLEEP HT_WAIT_SLEEP
#define HT_ENTRY(name, nr, wait, kind, shm) Entry{nr, #name, WaitClass::wait, HT_WAIT_KIND_OF_##kind},
// Only calls that can block, plus the ones that appear next to them in a
// hung job, are named: hangtrace/arch/<arch>/syscalls.h.
constexpr Entry kSyscalls[] = {HT_SYSCALLS(HT_ENTRY)};
#undef HT_ENTRY

// The BPF side's copies of the uapi futex values (abi.h) are <linux/futex.h>'s.
static_assert(HT_FUTEX_WAIT == FUTEX_WAIT && HT_FUTEX_WAKE == FUTEX_WAKE &&
              HT_FUTEX_REQUEUE == FUTEX_REQUEUE && HT_FUTEX_CMP_REQUEUE == FUTEX_CMP_REQUEUE &&
              HT_FUTEX_WAKE_OP == FUTEX_WAKE_OP && HT_FUTEX_LOCK_PI == FUTEX_LOCK_PI &&
              HT_FUTEX_UNLOCK_PI == FUTEX_UNLOCK_PI && HT_FUTEX_WAIT_BITSET == FUTEX_WAIT_BITSET &&
              HT_FUTEX_WAKE_BITSET == FUTEX_WAKE_BITSET &&
              HT_FUTEX_WAIT_REQUEUE_PI == FUTEX_WAIT_REQUEUE_PI &&
              HT_FUTEX_CMP_REQUEUE_PI == FUTEX_CMP_REQUEUE_PI && HT_FUTEX_LOCK_PI2 == FUTEX_LOCK_PI2);
static_assert(HT_FUTEX_PRIVATE_FLAG == FUTEX_PRIVATE_FLAG &&
              HT_FUTEX_CLOCK_REALTIME == FUTEX_CLOCK_REALTIME &&
              HT_FUTEX_CMD_MASK == static_cast<uint32_t>(FUTEX_CMD_MASK));

constexpr std::array<const char*, 14> kFutexCmdNames = {
    "FUTEX_WAIT",           "FUTEX_WAKE",        "FUTEX_FD",          "FUTEX_REQUEUE",
    "FUTEX_CMP_REQUEUE",    "FUTEX_WAKE_OP",     "FUTEX_LOCK_PI",     "FUTEX_UNLOCK_PI",
    "FUTEX_TRYLOCK_PI",     "FUTEX_WAIT_BITSET", "FUTEX_WAKE_BITSET", "FUTEX_WAIT_REQUEUE_PI",
    "FUTEX_CMP_REQUEUE_PI", "FUTEX_LOCK_PI2"};

std::string hex(uint64_t v) { return v == 0 ? "NULL" : fmt::format("{:#x}", v); }

std::string poll_events_text(uint32_t events) {
  std::string out;
  auto add = [&](uint32_t bit, const char* name) {
    if (events & bit) out += (out.empty() ? "" : "|") + std::string(name);
  };
  add(POLLIN, "POLLIN");
  add(POLLPRI, "POLLPRI");
  add(POLLOUT, "POLLOUT");
  if (out.empty()) out = fmt::format("{:#x}", events);
  return out;
}

}  // namespace

const char* wait_class_name(WaitClass c) {
  switch (c) {
    case WaitClass::None:
      return "none";
    case WaitClass::Futex:
      return "futex";
    case WaitClass::FdRead:
      return "read";
    case WaitClass::FdWrite:
      return "write";
    case WaitClass::Poll:
      return "poll";
    case WaitClass::Select:
      return "select";
    case WaitClass::Epoll:
      return "epoll";
    case WaitClass::Accept:
      return "accept";
    case WaitClass::Connect:
      return "connect";
    case WaitClass::ChildWait:
      return "child-wait";
    case WaitClass::Sleep:
      return "sleep";
    case WaitClass::Pause:
      return "signal-wait";
    case WaitClass::FileLock:
      return "file-lock";
    case WaitClass::Other:
      return "other";
  }
  return "none";
}

bool waits_for_file_lock(int64_t nr, const uint64_t args[6]) {
  if (nr == HT_NR_flock) return (args[1] & LOCK_NB) == 0 && (args[1] & (LOCK_SH | LOCK_EX)) != 0;
  if (nr == HT_NR_fcntl) return args[1] == F_SETLKW || args[1] == F_OFD_SETLKW;
  return false;
}

bool only_sleeps(int64_t nr, const uint64_t args[6]) {
  if (describe_syscall(nr).wait == WaitClass::Sleep) return true;
  // With no timeout either, it waits for a signal: not a sleep.
  if (nr == HT_NR_select || nr == HT_NR_pselect6) return args[0] == 0 && args[4] != 0;
  if (nr == HT_NR_poll) return args[1] == 0 && static_cast<int>(args[2]) >= 0;
  if (nr == HT_NR_ppoll) return args[1] == 0 && args[2] != 0;
  return false;
}

bool wait_class_takes_fd(WaitClass c) {
  switch (c) {
    case WaitClass::FdRead:
    case WaitClass::FdWrite:
    case WaitClass::Accept:
    case WaitClass::Connect:
    case WaitClass::Epoll:
      return true;
    default:
      return false;
  }
}

SyscallDesc describe_syscall(int64_t nr) {
  for (const auto& e : kSyscalls) {
    if (e.nr == nr) return {nr, e.name, e.wait, e.wait_kind};
  }
  return {nr, nr < 0 ? std::string("none") : fmt::format("syscall_{}", nr), WaitClass::None, -1};
}

FutexOp decode_futex_op(uint32_t op) {
  FutexOp out;
  out.cmd = static_cast<int>(op & FUTEX_CMD_MASK);
  out.is_private = op & FUTEX_PRIVATE_FLAG;
  out.clock_realtime = op & FUTEX_CLOCK_REALTIME;
  out.cmd_name = out.cmd >= 0 && out.cmd < static_cast<int>(kFutexCmdNames.size())
                     ? kFutexCmdNames[out.cmd]
                     : fmt::format("FUTEX_OP_{}", out.cmd);
  switch (out.cmd) {
    case FUTEX_WAIT:
      out.is_wait = true;
      break;
    case FUTEX_WAIT_BITSET:
      out.is_wait = true;
      out.absolute_timeout = true;
      break;
    case FUTEX_LOCK_PI:  // absolute CLOCK_REALTIME
    case FUTEX_LOCK_PI2:
      out.is_wait = out.is_pi = out.absolute_timeout = true;
      break;
    case FUTEX_WAIT_REQUEUE_PI:
      out.is_wait = out.is_pi = out.absolute_timeout = true;
      break;
    case FUTEX_TRYLOCK_PI:
    case FUTEX_UNLOCK_PI:
    case FUTEX_CMP_REQUEUE_PI:
      out.is_pi = true;
      break;
    default:
      break;
  }
  out.text = out.cmd_name;
  if (out.is_private) out.text += "|FUTEX_PRIVATE_FLAG";
  if (out.clock_realtime) out.text += "|FUTEX_CLOCK_REALTIME";
  return out;
}

TimeoutArg timeout_arg(int64_t nr, const uint64_t args[6]) {
  TimeoutArg t;
  switch (nr) {
    case HT_NR_futex: {  // futex(uaddr, op, val, timeout, uaddr2, val3)
      FutexOp op = decode_futex_op(static_cast<uint32_t>(args[1]));
      if (!op.is_wait) break;
      t = {TimeoutArg::Kind::TimespecPtr, 3, op.absolute_timeout};
      break;
    }
    case HT_NR_futex_waitv:  // futex_waitv(waiters, nr, flags, timeout, clockid): absolute
      t = {TimeoutArg::Kind::TimespecPtr, 3, true};
      break;
    case HT_NR_futex_wait:  // futex_wait(uaddr, val, mask, flags, timeout, clockid): absolute
      t = {TimeoutArg::Kind::TimespecPtr, 4, true};
      break;
    case HT_NR_poll:  // poll(fds, nfds, timeout_ms)
      t = {TimeoutArg::Kind::Milliseconds, 2, false};
      break;
    case HT_NR_ppoll:  // ppoll(fds, nfds, tsp, sigmask, size)
      t = {TimeoutArg::Kind::TimespecPtr, 2, false};
      break;
    case HT_NR_select:  // select(n, r, w, e, timeval*)
      t = {TimeoutArg::Kind::TimevalPtr, 4, false};
      break;
    case HT_NR_pselect6:  // pselect6(n, r, w, e, timespec*, sig)
      t = {TimeoutArg::Kind::TimespecPtr, 4, false};
      break;
    case HT_NR_epoll_wait:  // epoll_wait(epfd, events, max, timeout_ms)
    case HT_NR_epoll_pwait:
      t = {TimeoutArg::Kind::Milliseconds, 3, false};
      break;
    case HT_NR_epoll_pwait2:  // epoll_pwait2(epfd, events, max, timespec*, ...)
      t = {TimeoutArg::Kind::TimespecPtr, 3, false};
      break;
    case HT_NR_nanosleep:  // nanosleep(req, rem)
      t = {TimeoutArg::Kind::TimespecPtr, 0, false};
      break;
    case HT_NR_clock_nanosleep:  // clock_nanosleep(clock, flags, req, rem)
      t = {TimeoutArg::Kind::TimespecPtr, 2, (args[1] & TIMER_ABSTIME) != 0};
      break;
    case HT_NR_rt_sigtimedwait:  // rt_sigtimedwait(set, info, timeout, size)
      t = {TimeoutArg::Kind::TimespecPtr, 2, false};
      break;
    default:
      break;
  }
  return t;
}

std::string format_syscall(int64_t nr, const uint64_t a[6],
                           const std::vector<std::pair<int, uint32_t>>& poll_fds) {
  SyscallDesc d = describe_syscall(nr);
  auto fd = [](uint64_t v) { return std::to_string(static_cast<int>(v)); };
  auto poll_list = [&]() {
    if (poll_fds.empty()) return hex(a[0]);
    std::string s = "[";
    for (size_t i = 0; i < poll_fds.size() && i < 8; ++i) {
      if (i) s += ", ";
      s += fmt::format("{{fd={}, {}}}", poll_fds[i].first, poll_events_text(poll_fds[i].second));
    }
    if (poll_fds.size() > 8) s += ", ...";
    return s + "]";
  };
  switch (nr) {
    case HT_NR_futex: {
      FutexOp op = decode_futex_op(static_cast<uint32_t>(a[1]));
      return fmt::format("futex({:#x}, {}, {}, {})", a[0], op.text, static_cast<uint32_t>(a[2]), hex(a[3]));
    }
    case HT_NR_read:
    case HT_NR_write:
    case HT_NR_pread64:
    case HT_NR_pwrite64:
    case HT_NR_readv:
    case HT_NR_writev:
    case HT_NR_recvfrom:
    case HT_NR_sendto:
    case HT_NR_sendmsg:
    case HT_NR_recvmsg:
    case HT_NR_preadv:
    case HT_NR_pwritev:
    case HT_NR_recvmmsg:
    case HT_NR_sendmmsg:
    case HT_NR_preadv2:
    case HT_NR_pwritev2:
      return fmt::format("{}({}, {:#x}, {})", d.name, fd(a[0]), a[1], a[2]);
    case HT_NR_poll:
      return fmt::format("poll({}, {}, {})", poll_list(), a[1], static_cast<int>(a[2]));
    case HT_NR_ppoll:
      return fmt::format("ppoll({}, {}, {})", poll_list(), a[1], hex(a[2]));
    case HT_NR_select:
    case HT_NR_pselect6:
      return fmt::format("{}({}, {}, {})", d.name, static_cast<int>(a[0]), poll_list(), hex(a[4]));
    case HT_NR_epoll_wait:
    case HT_NR_epoll_pwait:
      return fmt::format("{}({}, {:#x}, {}, {})", d.name, fd(a[0]), a[1], static_cast<int>(a[2]),
                         static_cast<int>(a[3]));
    case HT_NR_accept:
    case HT_NR_accept4:
    case HT_NR_connect:
      return fmt::format("{}({}, ...)", d.name, fd(a[0]));
    case HT_NR_wait4:
      return fmt::format("wait4({}, {:#x}, {}, ...)", static_cast<int>(a[0]), a[1], a[2]);
    case HT_NR_waitid:
      return fmt::format("waitid({}, {}, ...)", static_cast<int>(a[0]), static_cast<int>(a[1]));
    case HT_NR_nanosleep:
      return fmt::format("nanosleep({})", hex(a[0]));
    case HT_NR_clock_nanosleep:
      return fmt::format("clock_nanosleep({}, {}, {})", a[0], a[1], hex(a[2]));
    default:
      return fmt::format("{}({:#x}, {:#x}, {:#x}, ...)", d.name, a[0], a[1], a[2]);
  }
}

}  // namespace hangtrace
