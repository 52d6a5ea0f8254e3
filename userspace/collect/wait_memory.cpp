#include "wait_memory.h"

#include <linux/futex.h>
#include <poll.h>
#include <time.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <map>

#include "hangtrace/syscalls.h"
#include "procmem.h"

namespace hangtrace {

namespace {

constexpr uint64_t kMaxPollFds = 1024;  // FD_SETSIZE; a hung job never polls more
constexpr uint64_t kMaxFutexWaiters = FUTEX_WAITV_MAX;
constexpr size_t kFutexBytes = 32;

template <class T>
T load(const std::vector<uint8_t>& bytes, size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof value);
  return value;
}

void read_futex(int pid, uint64_t uaddr, WaitMemoryRead& out) {
  out.futex_addresses.push_back(uaddr);
  out.memory.futex_word = read_process_u32(pid, uaddr);
  out.memory.futex_bytes = read_process_memory_prefix(pid, uaddr, kFutexBytes);
  if (!out.memory.futex_word && out.memory.futex_bytes.size() >= 4)
    out.memory.futex_word = load<uint32_t>(out.memory.futex_bytes, 0);
}

void read_futex_waitv(int pid, const SyscallState& sc, WaitMemoryRead& out) {
  constexpr size_t kWaiterSize = sizeof(futex_waitv);
  uint64_t count = std::min<uint64_t>(sc.args[1], kMaxFutexWaiters);
  if (count == 0) return;
  auto waiters = read_process_memory(pid, sc.args[0], count * kWaiterSize);
  if (!waiters) return;
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t uaddr = load<uint64_t>(*waiters, i * kWaiterSize + offsetof(futex_waitv, uaddr));
    if (i == 0) {
      read_futex(pid, uaddr, out);
    } else {
      out.futex_addresses.push_back(uaddr);
    }
  }
}

void read_pollfds(int pid, const SyscallState& sc, WaitMemoryRead& out) {
  uint64_t count = std::min<uint64_t>(sc.args[1], kMaxPollFds);
  if (count == 0) return;
  auto fds = read_process_memory(pid, sc.args[0], count * sizeof(pollfd));
  if (!fds) return;
  for (uint64_t i = 0; i < count; ++i) {
    pollfd p = load<pollfd>(*fds, i * sizeof(pollfd));
    out.memory.poll_fds.emplace_back(p.fd, static_cast<uint16_t>(p.events));
  }
}

void read_fd_sets(int pid, const SyscallState& sc, WaitMemoryRead& out) {
  uint64_t nfds = std::min<uint64_t>(static_cast<uint64_t>(static_cast<int>(sc.args[0])), kMaxPollFds);
  if (static_cast<int>(sc.args[0]) <= 0) return;
  size_t set_bytes = ((nfds + 63) / 64) * 8;  // the kernel copies whole longs
  std::map<int, uint32_t> events;
  const std::pair<int, uint32_t> sets[] = {{1, POLLIN}, {2, POLLOUT}, {3, POLLPRI}};
  for (auto [arg, event] : sets) {
    if (sc.args[arg] == 0) continue;
    auto bits = read_process_memory(pid, sc.args[arg], set_bytes);
    if (!bits) return;  // half a picture would be wrong: all or nothing
    for (uint64_t fd = 0; fd < nfds; ++fd) {
      if ((*bits)[fd / 8] & (1u << (fd % 8))) events[static_cast<int>(fd)] |= event;
    }
  }
  for (auto [fd, ev] : events) out.memory.poll_fds.emplace_back(fd, ev);
}

// Which clock an absolute timeout of this call is measured on.
int absolute_timeout_clock(const SyscallState& sc) {
  switch (sc.nr) {
    case HT_NR_futex: {
      FutexOp op = decode_futex_op(static_cast<uint32_t>(sc.args[1]));
      if (op.cmd == FUTEX_LOCK_PI || op.clock_realtime) return CLOCK_REALTIME;
      return CLOCK_MONOTONIC;
    }
    case HT_NR_futex_waitv:
      return static_cast<int>(sc.args[4]);
    case HT_NR_futex_wait:
      return static_cast<int>(sc.args[5]);
    case HT_NR_clock_nanosleep:
      return static_cast<int>(sc.args[0]);
    default:
      return CLOCK_MONOTONIC;
  }
}

void read_timeout(int pid, const SyscallState& sc, WaitMemoryRead& out) {
  TimeoutArg arg = timeout_arg(sc.nr, sc.args);
  if (arg.kind == TimeoutArg::Kind::None || arg.arg_index < 0 || arg.arg_index > 5) return;
  uint64_t raw = sc.args[arg.arg_index];
  switch (arg.kind) {
    case TimeoutArg::Kind::Milliseconds: {
      int ms = static_cast<int>(raw);
      if (ms >= 0) out.memory.timeout_s = ms / 1000.0;  // negative: wait forever
      return;
    }
    case TimeoutArg::Kind::TimevalPtr: {
      if (raw == 0) return;  // NULL: no timeout
      auto tv = read_process_memory(pid, raw, 16);
      if (!tv) return;
      out.memory.timeout_s = static_cast<double>(load<int64_t>(*tv, 0)) + load<int64_t>(*tv, 8) / 1e6;
      return;
    }
    case TimeoutArg::Kind::TimespecPtr: {
      if (raw == 0) return;
      auto ts = read_process_memory(pid, raw, 16);
      if (!ts) return;
      double value = static_cast<double>(load<int64_t>(*ts, 0)) + load<int64_t>(*ts, 8) / 1e9;
      if (arg.absolute) {
        out.memory.timeout_absolute = true;
        out.memory.timeout_s = value - clock_now_s(absolute_timeout_clock(sc));
      } else {
        out.memory.timeout_s = value;
      }
      return;
    }
    case TimeoutArg::Kind::None:
      return;
  }
}

}  // namespace

double clock_now_s(int clock_id) {
  timespec ts{};
  if (clock_gettime(static_cast<clockid_t>(clock_id), &ts) != 0) clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec / 1e9;
}

WaitMemoryRead read_wait_memory(int pid, const SyscallState& sc) {
  WaitMemoryRead out;
  if (sc.mode != SyscallState::Mode::InSyscall) return out;
  SyscallDesc desc = describe_syscall(sc.nr);
  switch (desc.wait) {
    case WaitClass::Futex:
      if (sc.nr == HT_NR_futex_waitv)
        read_futex_waitv(pid, sc, out);
      else
        read_futex(pid, sc.args[0], out);
      break;
    case WaitClass::Poll:
      if (sc.nr == HT_NR_poll || sc.nr == HT_NR_ppoll) read_pollfds(pid, sc, out);
      break;
    case WaitClass::Select:
      if (sc.nr == HT_NR_select || sc.nr == HT_NR_pselect6) read_fd_sets(pid, sc, out);
      break;
    default:
      break;
  }
  read_timeout(pid, sc, out);
  return out;
}

}  // namespace hangtrace
