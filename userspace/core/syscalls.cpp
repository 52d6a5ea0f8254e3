#include "hangtrace/syscalls.h"

#include <fmt/format.h>

#include <array>

namespace hangtrace {
namespace {

struct Entry {
  int64_t nr;
  const char* name;
  WaitClass wait;
};

// x86_64 numbers (arch/x86/entry/syscalls/syscall_64.tbl). Only calls that can
// block, plus the ones that appear next to them in a hung job, are named.
constexpr std::array kSyscalls = {
    Entry{0, "read", WaitClass::FdRead},
    Entry{1, "write", WaitClass::FdWrite},
    Entry{7, "poll", WaitClass::Poll},
    Entry{17, "pread64", WaitClass::FdRead},
    Entry{18, "pwrite64", WaitClass::FdWrite},
    Entry{19, "readv", WaitClass::FdRead},
    Entry{20, "writev", WaitClass::FdWrite},
    Entry{23, "select", WaitClass::Select},
    Entry{24, "sched_yield", WaitClass::None},
    Entry{34, "pause", WaitClass::Pause},
    Entry{35, "nanosleep", WaitClass::Sleep},
    Entry{42, "connect", WaitClass::Connect},
    Entry{43, "accept", WaitClass::Accept},
    Entry{44, "sendto", WaitClass::FdWrite},
    Entry{45, "recvfrom", WaitClass::FdRead},
    Entry{46, "sendmsg", WaitClass::FdWrite},
    Entry{47, "recvmsg", WaitClass::FdRead},
    Entry{61, "wait4", WaitClass::ChildWait},
    Entry{69, "msgsnd", WaitClass::Other},
    Entry{70, "msgrcv", WaitClass::Other},
    Entry{73, "flock", WaitClass::Other},
    Entry{74, "fsync", WaitClass::Other},
    Entry{128, "rt_sigtimedwait", WaitClass::Pause},
    Entry{130, "rt_sigsuspend", WaitClass::Pause},
    Entry{202, "futex", WaitClass::Futex},
    Entry{230, "clock_nanosleep", WaitClass::Sleep},
    Entry{232, "epoll_wait", WaitClass::Epoll},
    Entry{247, "waitid", WaitClass::ChildWait},
    Entry{270, "pselect6", WaitClass::Select},
    Entry{271, "ppoll", WaitClass::Poll},
    Entry{281, "epoll_pwait", WaitClass::Epoll},
    Entry{288, "accept4", WaitClass::Accept},
    Entry{295, "preadv", WaitClass::FdRead},
    Entry{296, "pwritev", WaitClass::FdWrite},
    Entry{299, "recvmmsg", WaitClass::FdRead},
    Entry{307, "sendmmsg", WaitClass::FdWrite},
    Entry{327, "preadv2", WaitClass::FdRead},
    Entry{328, "pwritev2", WaitClass::FdWrite},
    Entry{441, "epoll_pwait2", WaitClass::Epoll},
    Entry{449, "futex_waitv", WaitClass::Futex},
    Entry{455, "futex_wait", WaitClass::Futex},
};

constexpr uint32_t kFutexPrivateFlag = 128;
constexpr uint32_t kFutexClockRealtime = 256;
constexpr uint32_t kFutexCmdMask = ~(kFutexPrivateFlag | kFutexClockRealtime);

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
  add(0x001, "POLLIN");
  add(0x002, "POLLPRI");
  add(0x004, "POLLOUT");
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
    case WaitClass::Other:
      return "other";
  }
  return "none";
}

SyscallDesc describe_syscall(int64_t nr) {
  for (const auto& e : kSyscalls) {
    if (e.nr == nr) return {nr, e.name, e.wait};
  }
  return {nr, nr < 0 ? std::string("none") : fmt::format("syscall_{}", nr), WaitClass::None};
}

FutexOp decode_futex_op(uint32_t op) {
  FutexOp out;
  out.cmd = static_cast<int>(op & kFutexCmdMask);
  out.is_private = op & kFutexPrivateFlag;
  out.clock_realtime = op & kFutexClockRealtime;
  out.cmd_name = out.cmd >= 0 && out.cmd < static_cast<int>(kFutexCmdNames.size())
                     ? kFutexCmdNames[out.cmd]
                     : fmt::format("FUTEX_OP_{}", out.cmd);
  switch (out.cmd) {
    case 0:  // WAIT
      out.is_wait = true;
      break;
    case 9:  // WAIT_BITSET
      out.is_wait = true;
      out.absolute_timeout = true;
      break;
    case 6:   // LOCK_PI: absolute CLOCK_REALTIME
    case 13:  // LOCK_PI2
      out.is_wait = out.is_pi = out.absolute_timeout = true;
      break;
    case 11:  // WAIT_REQUEUE_PI
      out.is_wait = out.is_pi = out.absolute_timeout = true;
      break;
    case 8:   // TRYLOCK_PI
    case 7:   // UNLOCK_PI
    case 12:  // CMP_REQUEUE_PI
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
    case 202: {  // futex(uaddr, op, val, timeout, uaddr2, val3)
      FutexOp op = decode_futex_op(static_cast<uint32_t>(args[1]));
      if (!op.is_wait) break;
      t = {TimeoutArg::Kind::TimespecPtr, 3, op.absolute_timeout};
      break;
    }
    case 449:  // futex_waitv(waiters, nr, flags, timeout, clockid): absolute
      t = {TimeoutArg::Kind::TimespecPtr, 3, true};
      break;
    case 455:  // futex_wait(uaddr, val, mask, flags, timeout, clockid): absolute
      t = {TimeoutArg::Kind::TimespecPtr, 4, true};
      break;
    case 7:  // poll(fds, nfds, timeout_ms)
      t = {TimeoutArg::Kind::Milliseconds, 2, false};
      break;
    case 271:  // ppoll(fds, nfds, tsp, sigmask, size)
      t = {TimeoutArg::Kind::TimespecPtr, 2, false};
      break;
    case 23:  // select(n, r, w, e, timeval*)
      t = {TimeoutArg::Kind::TimevalPtr, 4, false};
      break;
    case 270:  // pselect6(n, r, w, e, timespec*, sig)
      t = {TimeoutArg::Kind::TimespecPtr, 4, false};
      break;
    case 232:  // epoll_wait(epfd, events, max, timeout_ms)
    case 281:  // epoll_pwait
      t = {TimeoutArg::Kind::Milliseconds, 3, false};
      break;
    case 441:  // epoll_pwait2(epfd, events, max, timespec*, ...)
      t = {TimeoutArg::Kind::TimespecPtr, 3, false};
      break;
    case 35:  // nanosleep(req, rem)
      t = {TimeoutArg::Kind::TimespecPtr, 0, false};
      break;
    case 230:  // clock_nanosleep(clock, flags, req, rem); TIMER_ABSTIME = 1
      t = {TimeoutArg::Kind::TimespecPtr, 2, (args[1] & 1) != 0};
      break;
    case 128:  // rt_sigtimedwait(set, info, timeout, size)
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
    case 202: {
      FutexOp op = decode_futex_op(static_cast<uint32_t>(a[1]));
      return fmt::format("futex({:#x}, {}, {}, {})", a[0], op.text, static_cast<uint32_t>(a[2]), hex(a[3]));
    }
    case 0:
    case 1:
    case 17:
    case 18:
    case 19:
    case 20:
    case 45:
    case 44:
    case 46:
    case 47:
    case 295:
    case 296:
    case 299:
    case 307:
    case 327:
    case 328:
      return fmt::format("{}({}, {:#x}, {})", d.name, fd(a[0]), a[1], a[2]);
    case 7:
      return fmt::format("poll({}, {}, {})", poll_list(), a[1], static_cast<int>(a[2]));
    case 271:
      return fmt::format("ppoll({}, {}, {})", poll_list(), a[1], hex(a[2]));
    case 23:
    case 270:
      return fmt::format("{}({}, {}, {})", d.name, static_cast<int>(a[0]), poll_list(), hex(a[4]));
    case 232:
    case 281:
      return fmt::format("{}({}, {:#x}, {}, {})", d.name, fd(a[0]), a[1], static_cast<int>(a[2]),
                         static_cast<int>(a[3]));
    case 43:
    case 288:
    case 42:
      return fmt::format("{}({}, ...)", d.name, fd(a[0]));
    case 61:
      return fmt::format("wait4({}, {:#x}, {}, ...)", static_cast<int>(a[0]), a[1], a[2]);
    case 247:
      return fmt::format("waitid({}, {}, ...)", static_cast<int>(a[0]), static_cast<int>(a[1]));
    case 35:
      return fmt::format("nanosleep({})", hex(a[0]));
    case 230:
      return fmt::format("clock_nanosleep({}, {}, {})", a[0], a[1], hex(a[2]));
    default:
      return fmt::format("{}({:#x}, {:#x}, {:#x}, ...)", d.name, a[0], a[1], a[2]);
  }
}

}  // namespace hangtrace
