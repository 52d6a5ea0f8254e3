// Locks in the wait-for graph: which futex a thread waits on, what kind of
// lock its word says it is, and who could unlock it.
#include <linux/futex.h>

#include <fmt/format.h>

#include "graph_builder.h"

namespace hangtrace::graph {

namespace {

constexpr int kPidMax = 4194304;  // PID_MAX_LIMIT on 64-bit

// glibc's pthread_mutex_t begins with __lock, __count, __owner, __nusers,
// __kind (4 bytes each); __kind holds the mutex type in its low bits and
// PTHREAD_MUTEX_PSHARED_BIT (128). A sem_t holds its value, the number of
// waiters (where a mutex has __count), then FUTEX_PRIVATE_FLAG or 0 (where a
// mutex has __owner).
constexpr size_t kCountOrWaitersOffset = 4, kOwnerOffset = 8, kUsersOffset = 12, kKindOffset = 16;
constexpr size_t kMutexBytes = 20;
constexpr int32_t kMutexKindBits = 0x7f, kMutexPsharedBit = 0x80;

// Reads a little-endian u32 from the futex bytes.
std::optional<uint32_t> word_at(const std::vector<uint8_t>& b, size_t off) {
  if (b.size() < off + 4) return std::nullopt;
  return static_cast<uint32_t>(b[off]) | (static_cast<uint32_t>(b[off + 1]) << 8) |
         (static_cast<uint32_t>(b[off + 2]) << 16) | (static_cast<uint32_t>(b[off + 3]) << 24);
}

// What the bytes at the futex say it is. Everything here was read from the
// target: an owner is taken only when the whole layout is plausible.
struct LockWord {
  std::string type = "futex";  // "PI mutex", "pthread mutex", "semaphore"
  std::optional<int> owner;    // a mutex's owner TID (PI futexes keep it in the word)
  std::optional<uint32_t> semaphore_waiters;
};

LockWord read_lock_word(const FutexOp& op, const WaitMemory& memory) {
  LockWord lock;
  const auto& bytes = memory.futex_bytes;
  std::optional<uint32_t> word = memory.futex_word;
  if (!word) word = word_at(bytes, 0);
  if (op.is_pi && word) {
    lock.type = "PI mutex";
    int tid = static_cast<int>(*word & kFutexTidMask);
    if (tid > 0) lock.owner = tid;
  } else if (word && bytes.size() >= kMutexBytes) {
    uint32_t count_or_nwaiters = *word_at(bytes, kCountOrWaitersOffset);
    int32_t owner_field = static_cast<int32_t>(*word_at(bytes, kOwnerOffset));
    uint32_t nusers = *word_at(bytes, kUsersOffset);
    int32_t kind = static_cast<int32_t>(*word_at(bytes, kKindOffset));
    bool plausible_kind = (kind & ~(kMutexKindBits | kMutexPsharedBit)) == 0;
    if ((*word == 1 || *word == 2) && owner_field > 0 && owner_field < kPidMax && nusers >= 1 &&
        nusers < 1u << 16 && plausible_kind) {
      lock.type = "pthread mutex";
      lock.owner = owner_field;
    } else if (*word == 0 && count_or_nwaiters >= 1 && count_or_nwaiters < 1u << 20 &&
               (owner_field == 0 || owner_field == FUTEX_PRIVATE_FLAG)) {
      lock.type = "semaphore";
      lock.semaphore_waiters = count_or_nwaiters;
    }
  }
  return lock;
}

// The shared, file- or shm-backed mapping `uaddr` lies in (the last one
// listed, as the kernel's own lookup would find it), or null.
const Mapping* shared_mapping_of(const ProcessInfo& p, uint64_t uaddr) {
  const Mapping* found = nullptr;
  for (const auto& m : p.maps)
    if (m.shared() && uaddr >= m.start && uaddr < m.end && m.inode != 0) found = &m;
  return found;
}

// `p` maps the object behind `m` (the same device and inode).
bool maps_object(const ProcessInfo& p, const Mapping& m) {
  for (const auto& x : p.maps)
    if (x.shared() && x.inode == m.inode && x.dev_major == m.dev_major && x.dev_minor == m.dev_minor)
      return true;
  return false;
}

}  // namespace

std::string GraphBuilder::futex_object(const ProcessInfo& p, const ThreadInfo& t, ThreadWait& w) {
  const uint64_t uaddr = t.syscall.nr == HT_NR_futex_waitv ? 0 : t.syscall.args[0];
  FutexOp op = decode_futex_op(t.syscall.nr == HT_NR_futex ? static_cast<uint32_t>(t.syscall.args[1]) : 0);
  if (t.syscall.nr == HT_NR_futex && !op.is_wait) return "";

  if (t.python_lock && t.syscall.nr == HT_NR_futex) return python_lock_object(p, *t.python_lock, w);

  // A futex in a shared mapping is keyed by the backing object, so waits in
  // different processes on one lock meet in one node (as the kernel's
  // futex hash does); anything else is keyed by the process.
  FutexLocation where;
  where.address = uaddr;
  where.pid = p.pid;
  if (const Mapping* m = !op.is_private && uaddr ? shared_mapping_of(p, uaddr) : nullptr) {
    where.shared = true;
    where.mapping = *m;
    where.file_offset = uaddr - m->start + m->offset;
  }
  const LockWord lock = read_lock_word(op, t.memory);
  std::string id, label;
  if (where.shared) {
    const Mapping& m = where.mapping;
    id = fmt::format("futex:shared:{}:{}:{}:{:#x}", m.dev_major, m.dev_minor, m.inode, where.file_offset);
    label = fmt::format("{} {}+{:#x}", lock.type, m.path.empty() ? "[shared anonymous]" : m.path,
                        where.file_offset);
  } else {
    id = fmt::format("futex:private:{}:{:#x}", p.pid, uaddr);
    label = fmt::format("{} {:#x} in {}", lock.type, uaddr, process_label(p.pid));
  }
  // The first waiter names the object; every waiter adds what its copy of
  // the word says.
  WaitObject& o = object(id, ObjectKind::Futex, label);
  if (!o.futex) o.futex = where;
  if (lock.semaphore_waiters)
    o.notes.push_back(
        fmt::format("semaphore value 0, {} waiter(s): no owner is recorded", *lock.semaphore_waiters));
  if (lock.owner && !o.owner_tid) {  // the first waiter's reading: notes said once
    std::optional<int> owner = owner_on_host(p, where, *lock.owner, o);
    o.owner_tid = owner ? *owner : *lock.owner;
    o.owner_unresolved = !owner;
  }
  std::string held_by;
  if (lock.owner)
    held_by = o.owner_unresolved ? fmt::format(" held by TID {} of its pid namespace", *o.owner_tid)
                                 : fmt::format(" held by TID {}", *o.owner_tid);
  w.summary = fmt::format("waits on {}{}", o.label, held_by);
  if (where.shared) o.holder_pids.push_back(p.pid);
  return id;
}

// A thread parked on a PyMutex (CPython 3.14+): its futex is a semaphore of
// its own, so the lock is the node every waiter of it meets in. A Lock
// records no owner (any thread may release it); an RLock does.
std::string GraphBuilder::python_lock_object(const ProcessInfo& p, const PythonLockWait& lock,
                                             ThreadWait& w) {
  const std::string id = fmt::format("pylock:{}:{:#x}", p.pid, lock.mutex);
  std::string label;
  if (lock.kind == "critical section")
    label = fmt::format("critical section on {} {:#x} in {}", lock.object_type, lock.object,
                        process_label(p.pid));
  else if (lock.object)
    label = fmt::format("{} {:#x} in {}", lock.kind, lock.object, process_label(p.pid));
  else
    label = fmt::format("{} {:#x} in {}", lock.kind, lock.mutex, process_label(p.pid));
  WaitObject& o = object(id, ObjectKind::Futex, label);
  if (!o.futex) {
    FutexLocation where;
    where.address = lock.mutex;
    where.pid = p.pid;
    o.futex = where;
    if (lock.kind == "threading.Lock")
      o.notes.push_back("a threading.Lock records no owner: any thread of the process may release it");
    else if (lock.kind == "critical section")
      o.notes.push_back(
          fmt::format("the per-object lock of a free-threaded build: held by a thread inside a critical "
                      "section on that {}",
                      lock.object_type));
  }
  if (lock.owner_tid && !o.owner_tid) {
    std::optional<int> owner = owner_on_host(p, *o.futex, static_cast<int>(lock.owner_tid), o);
    o.owner_tid = owner ? *owner : static_cast<int>(lock.owner_tid);
    o.owner_unresolved = !owner;
  }
  w.summary = fmt::format("waits on {}{}", o.label,
                          o.owner_tid ? fmt::format(" held by TID {}{}", *o.owner_tid,
                                                    o.owner_unresolved ? " of its pid namespace" : "")
                                      : std::string());
  return id;
}

// A lock whose word names its owner can be unlocked by that thread alone,
// and only if it shares the lock's memory: the same process for a private
// lock, a process mapping the same object for a shared one.
std::optional<int> GraphBuilder::owner_on_host(const ProcessInfo& waiter, const FutexLocation& where,
                                               int owner, WaitObject& o) {
  if (waiter.ns_pids.size() <= 1) return owner;  // the host's own numbering
  // First the threads that share the lock; then those of the job in the
  // same namespace depth (a lock copied by fork names its parent's thread).
  for (bool sharing : {true, false}) {
    for (const auto& q : snap_.processes) {
      if (q.ns_pids.size() != waiter.ns_pids.size()) continue;
      const bool shares = where.shared ? maps_object(q, where.mapping) : q.pid == where.pid;
      if (sharing ? !shares : (shares || q.role == ProcessRole::Peer)) continue;
      for (const auto& t : q.threads) {
        if (t.ns_tid != owner) continue;
        if (t.tid != owner)
          o.notes.push_back(
              fmt::format("owner TID {} in the pid namespace of process {} is TID {} on the host", owner,
                          process_label(waiter.pid), t.tid));
        return t.tid;
      }
    }
  }
  o.notes.push_back(
      fmt::format("owner TID {} (in the pid namespace of process {}) is not a live thread of any process "
                  "sharing the lock",
                  owner, process_label(waiter.pid)));
  return std::nullopt;
}

void GraphBuilder::release_by_owner(WaitObject& o, const FutexLocation& where, int owner) {
  o.releasers_certain = true;
  if (o.owner_unresolved) return;  // no thread has that id where it was taken: said by owner_on_host
  auto it = graph_.tid_to_pid.find(owner);
  if (it == graph_.tid_to_pid.end()) {
    o.notes.push_back(fmt::format("owner TID {} is not a live thread of any traced process", owner));
    return;
  }
  const ProcessInfo* owner_process = snap_.process(it->second);
  bool shares =
      owner_process && (where.shared ? maps_object(*owner_process, where.mapping) : it->second == where.pid);
  if (!shares)
    o.notes.push_back(
        fmt::format("owner TID {} is a thread of process {}, not of {}: the lock word was copied while held "
                    "(fork) and nobody in this process can unlock it",
                    owner, it->second, where.pid));
  if (shares && alive(*owner_process)) o.releasers.push_back(owner);
}

// A lock with no recorded owner (a semaphore, a condition, a plain futex):
// any live thread that shares its memory might post it.
void GraphBuilder::release_by_any_thread(WaitObject& o, const FutexLocation& where) {
  if (!where.shared) {
    add_releaser_process(o, where.pid);
    return;
  }
  for (const auto& p : snap_.processes)
    if (alive(p) && maps_object(p, where.mapping)) add_releaser_process(o, p.pid);
}

void GraphBuilder::resolve_futex_releasers(WaitObject& o) {
  if (o.owner_tid)
    release_by_owner(o, *o.futex, *o.owner_tid);
  else
    release_by_any_thread(o, *o.futex);
}

}  // namespace hangtrace::graph
