// The Python-level locks threads park on (CPython 3.14+: threading.Lock and
// RLock, and the free-threaded build's per-object locks, are PyMutexes).
//
// A contended PyMutex locker (Python/parking_lot.c, _PyParkingLot_Park)
// links a `struct wait_entry { void *park_arg; uintptr_t addr; _PySemaphore
// sema; ... }` on its own stack into a hash bucket and sleeps on `sema`, a
// glibc sem_t whose futex word is its first four bytes. So the futex a
// parked thread sleeps on is its own, 16 bytes into the entry, and the lock
// is the address 8 bytes before it. Every read is checked: the futex lies
// just above the thread's stack pointer, its word says "no token", the lock
// byte says "locked, with parked waiters", and the object around the lock is
// named only when its type says what it is.
#include "python_locks.h"

#include <linux/futex.h>

#include <cctype>

#include "hangtrace/syscalls.h"
#include "procmem.h"

namespace hangtrace::python {

namespace {

constexpr uint64_t kSemaphoreInEntry = 16;      // offsetof(struct wait_entry, sema)
constexpr uint64_t kMutexInEntry = 8;           // offsetof(struct wait_entry, addr)
constexpr uint8_t kLocked = 1, kHasParked = 2;  // PyMutex _bits: _Py_LOCKED, _Py_HAS_PARKED
// How far above the stack pointer at the syscall the entry can be: a few
// frames (the semaphore wait, the park, the lock call).
constexpr uint64_t kMaxEntryAboveSp = 64 * 1024;
// PyObject's ob_mutex in the free-threaded header: after ob_tid and ob_flags.
constexpr uint64_t kObMutexInHeader = 10;

// A type name as CPython spells them ("dict", "_thread.lock"), not bytes
// that happened to follow a pointer.
bool type_like(const std::string& name) {
  if (name.empty()) return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.') return false;
  return true;
}

}  // namespace

void find_lock_waits(ProcessInfo& p, Walker& walker,
                     const std::unordered_map<uint64_t, int>& tid_of_pthread) {
  const PyOffsets& o = walker.offsets();
  if (o.minor < 14 || !o.stack_refs) return;
  for (ThreadInfo& t : p.threads) {
    if (t.syscall.nr != HT_NR_futex) continue;
    const FutexOp op = decode_futex_op(static_cast<uint32_t>(t.syscall.args[1]));
    if (!op.is_wait || op.is_pi) continue;
    const uint64_t uaddr = t.syscall.args[0];
    if (uaddr < kSemaphoreInEntry ||
        (t.syscall.sp && (uaddr < t.syscall.sp || uaddr - t.syscall.sp > kMaxEntryAboveSp)))
      continue;
    if (t.memory.futex_word && *t.memory.futex_word != 0) continue;  // a semaphore with a token is no sleep
    auto entry = walker.read_ptr(uaddr - kSemaphoreInEntry + kMutexInEntry, "wait entry");
    if (!entry || *entry < 4096 || *entry >= (uint64_t{1} << 47)) continue;
    const uint64_t mutex = *entry;
    auto bits = walker.memory().read(mutex, 1);
    if (!bits || bits->size() != 1 || ((*bits)[0] & (kLocked | kHasParked)) != (kLocked | kHasParked))
      continue;
    PythonLockWait lock;
    lock.mutex = mutex;
    lock.kind = "PyMutex";
    // threading.Lock and RLock: the mutex is the first field after the header.
    if (mutex >= o.object_size && plausible_pointer(mutex - o.object_size)) {
      const uint64_t object = mutex - o.object_size;
      const std::string type = walker.type_name(object);
      if (type == "_thread.lock" || type == "_thread.RLock") {
        lock.object = object;
        lock.object_type = type;
        lock.kind = type == "_thread.lock" ? "threading.Lock" : "threading.RLock";
        // _PyRecursiveMutex {PyMutex mutex; unsigned long long thread; ...}:
        // the owner as PyThread_get_thread_ident_ex, its pthread_t.
        if (type == "_thread.RLock") {
          if (auto owner = walker.read_ptr(mutex + 8, "RLock owner")) {
            auto it = tid_of_pthread.find(*owner);
            if (it != tid_of_pthread.end()) lock.owner_tid = it->second;
          }
        }
      }
    }
    // A free-threaded object's own lock (Py_BEGIN_CRITICAL_SECTION).
    if (lock.object == 0 && o.free_threaded && mutex >= kObMutexInHeader) {
      const uint64_t object = mutex - kObMutexInHeader;
      if (plausible_pointer(object)) {
        std::string type = walker.type_name(object);
        if (type_like(type)) {
          lock.kind = "critical section";
          lock.object = object;
          lock.object_type = std::move(type);
        }
      }
    }
    t.python_lock = std::move(lock);
  }
}

}  // namespace hangtrace::python
