// Snapshots built in code for the unit tests: the facts the collector would
// record for a situation, and no more. One builder for every test that
// diagnoses a hand-made snapshot.
#pragma once

#include <fcntl.h>
#include <linux/futex.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "hangtrace/analysis.h"
#include "hangtrace/model.h"
#include "hangtrace/syscall_nr.h"

namespace hangtrace::testing {

// The op of a FUTEX_WAIT_BITSET without a timeout, as glibc's locks make it.
inline constexpr uint64_t kFutexWaitBitsetPrivate = FUTEX_WAIT_BITSET_PRIVATE;
inline constexpr uint64_t kFutexWaitBitsetShared = FUTEX_WAIT_BITSET;

// pthread_mutex_t bytes: __lock, __count, __owner, __nusers, __kind.
inline std::vector<uint8_t> mutex_bytes(uint32_t lock, int owner, int kind = 0) {
  std::vector<uint8_t> b(32, 0);
  auto put = [&](size_t off, uint32_t v) {
    for (int i = 0; i < 4; ++i) b[off + i] = static_cast<uint8_t>(v >> (8 * i));
  };
  put(0, lock);
  put(8, static_cast<uint32_t>(owner));
  put(12, 1);
  put(16, static_cast<uint32_t>(kind));
  return b;
}

// sem_t bytes: value 0, nwaiters in the high word, private flag at +8.
inline std::vector<uint8_t> sem_bytes(uint32_t nwaiters, uint32_t private_flag) {
  std::vector<uint8_t> b(32, 0);
  for (int i = 0; i < 4; ++i) b[4 + i] = static_cast<uint8_t>(nwaiters >> (8 * i));
  for (int i = 0; i < 4; ++i) b[8 + i] = static_cast<uint8_t>(private_flag >> (8 * i));
  return b;
}

// A thread in `state`, its progress sampled (no CPU, no I/O); with
// `blocked_s`, the BPF view of it: off CPU that long, or on CPU for 'R'.
inline ThreadInfo thread_info(int tid, const std::string& comm, char state, std::optional<double> blocked_s) {
  ThreadInfo t;
  t.tid = tid;
  t.comm = comm;
  t.state = state;
  t.progress_sampled = true;
  if (blocked_s) {
    KernelTaskView k;
    k.off_cpu_ns = static_cast<uint64_t>(*blocked_s * 1e9);
    t.kernel = k;
  }
  if (state == 'R') {
    t.syscall.mode = SyscallState::Mode::Running;
    if (t.kernel) t.kernel->on_cpu = true;
  }
  return t;
}

inline void in_syscall(ThreadInfo& t, int64_t nr, std::initializer_list<uint64_t> args) {
  t.syscall.mode = SyscallState::Mode::InSyscall;
  t.syscall.nr = nr;
  int i = 0;
  for (uint64_t a : args) t.syscall.args[i++] = a;
}

// A thread blocked in syscall `nr` for `blocked_s`.
inline ThreadInfo thread_in_syscall(int tid, const std::string& comm, double blocked_s, int64_t nr,
                                    std::initializer_list<uint64_t> args) {
  ThreadInfo t = thread_info(tid, comm, 'S', blocked_s);
  in_syscall(t, nr, args);
  return t;
}

// A thread on CPU that used `cpu_ns` between the two samples.
inline ThreadInfo thread_on_cpu(int tid, const std::string& comm, uint64_t cpu_ns) {
  ThreadInfo t = thread_info(tid, comm, 'R', 0.0);
  t.cpu_ns_end = cpu_ns;
  return t;
}

// The findings of `kind` in a diagnosis, in report order.
inline std::vector<const Finding*> of_kind(const Diagnosis& d, FindingKind kind) {
  std::vector<const Finding*> out;
  for (const auto& f : d.findings)
    if (f.kind == kind) out.push_back(&f);
  return out;
}

// A snapshot of target `target`, built process by process.
struct SnapshotBuilder {
  Snapshot s;

  explicit SnapshotBuilder(int target) {
    s.target_pid = target;
    s.sample_window_s = 0.25;
  }
  // The BPF sample's clock pair; the snapshot began `taken_before_s` earlier.
  void clock(double sampled_at_unix, uint64_t sampled_at_monotonic_ns, double taken_before_s) {
    s.taken_at_unix = sampled_at_unix - taken_before_s;
    s.sampled_at_unix = sampled_at_unix;
    s.sampled_at_monotonic_ns = sampled_at_monotonic_ns;
  }
  ProcessInfo& proc(int pid, int ppid, ProcessRole role, const std::string& comm = "python3") {
    ProcessInfo p;
    p.pid = pid;
    p.ppid = ppid;
    p.role = role;
    p.comm = comm;
    p.state = 'S';
    if (ProcessInfo* parent = find(ppid)) parent->children.push_back(pid);
    s.processes.push_back(p);
    return s.processes.back();
  }
  ProcessInfo* find(int pid) {
    for (auto& p : s.processes)
      if (p.pid == pid) return &p;
    return nullptr;
  }
  // A thread of `pid` named as its process, off CPU for `blocked_s` (a
  // minute unless told; nullopt: no BPF view).
  ThreadInfo& thread(int pid, int tid, char state = 'S', std::optional<double> blocked_s = 60.0) {
    find(pid)->threads.push_back(thread_info(tid, find(pid)->comm, state, blocked_s));
    return find(pid)->threads.back();
  }
  // A thread of `pid` on CPU, busy between the samples.
  ThreadInfo& running(int pid, int tid) {
    ThreadInfo& t = thread(pid, tid, 'R', 0.0);
    t.cpu_ns_end = 50'000'000;
    return t;
  }
  // A thread waiting on the lock at `uaddr` (private or in a shared mapping),
  // whose bytes read `bytes`.
  ThreadInfo& futex_wait(int pid, int tid, uint64_t uaddr, bool shared, std::vector<uint8_t> bytes = {},
                         std::optional<double> timeout = std::nullopt,
                         std::optional<double> blocked_s = 60.0) {
    ThreadInfo& t = thread(pid, tid, 'S', blocked_s);
    in_syscall(t, HT_NR_futex,
               {uaddr, shared ? kFutexWaitBitsetShared : kFutexWaitBitsetPrivate, 0, timeout ? 0x7000u : 0u});
    if (!bytes.empty()) {
      t.memory.futex_bytes = bytes;
      t.memory.futex_word = bytes[0] | (bytes[1] << 8) | (bytes[2] << 16) | (bytes[3] << 24);
    }
    t.memory.timeout_s = timeout;
    return t;
  }
  void fd(int pid, int fd, FdKind kind, uint64_t inode, uint32_t flags = O_RDONLY, int64_t queued = -1) {
    FdEntry f;
    f.fd = fd;
    f.kind = kind;
    f.inode = inode;
    f.flags = flags;
    f.queued_bytes = queued;
    f.link = kind == FdKind::Pipe ? "pipe:[" + std::to_string(inode) + "]"
                                  : "socket:[" + std::to_string(inode) + "]";
    find(pid)->fds.push_back(f);
  }
  // A TCP socket listening on `local` ("0.0.0.0:29500").
  void tcp_listen(uint64_t inode, const std::string& local) {
    s.sockets.push_back({inode, 0, "tcp", "LISTEN", local, "0.0.0.0:0", 0, 0, 0, false});
  }
  // A loopback TCP connection: socket `a` at 127.0.0.1:`port_a`, `b` at
  // 127.0.0.1:`port_b`, each the other's peer.
  void tcp_pair(uint64_t a, int port_a, uint64_t b, int port_b) {
    const std::string at_a = "127.0.0.1:" + std::to_string(port_a),
                      at_b = "127.0.0.1:" + std::to_string(port_b);
    s.sockets.push_back({a, 0, "tcp", "ESTABLISHED", at_a, at_b, 0, 0, b, true});
    s.sockets.push_back({b, 0, "tcp", "ESTABLISHED", at_b, at_a, 0, 0, a, true});
  }
  // An fd of `pid` open on the file `path` (inode on device 254:0).
  FdEntry& file_fd(int pid, int fd, const std::string& path, uint64_t inode, uint32_t flags = O_RDWR) {
    FdEntry f;
    f.fd = fd;
    f.kind = FdKind::File;
    f.link = path;
    f.inode = inode;
    f.flags = flags;
    f.dev_major = 254;
    f.dev_minor = 0;
    find(pid)->fds.push_back(f);
    return find(pid)->fds.back();
  }
  // A line of /proc/locks on inode `inode` of device 254:0.
  static FileLock file_lock(int64_t id, const std::string& type, int pid, uint64_t inode,
                            bool waiting = false, const std::string& mode = "WRITE") {
    FileLock l;
    l.id = id;
    l.type = type;
    l.mode = mode;
    l.pid = pid;
    l.dev_major = 254;
    l.inode = inode;
    l.waiting = waiting;
    return l;
  }
  void shared_map(int pid, uint64_t start, uint64_t inode, const std::string& path) {
    Mapping m;
    m.start = start;
    m.end = start + 4096;
    m.perms = "rw-s";
    m.dev_major = 0;
    m.dev_minor = 26;
    m.inode = inode;
    m.path = path;
    find(pid)->maps.push_back(m);
  }
};

}  // namespace hangtrace::testing
