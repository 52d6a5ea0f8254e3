// The kinds of finding hangtrace reports, each named once (Perfetto's stats.h
// style): the stable name the text and JSON reports carry ("orphaned-lock"),
// the severity a finding of the kind has unless its rule decides otherwise,
// its priority and the line that says what it means.
//
// Findings are listed by severity, then confidence, then priority (lower
// first); the first one is the verdict. Priority is internal: the reports
// never show it.
//
// Adding a kind:
//   1. one X(...) line below;
//   2. one function that makes its findings, in the file of its family under
//      userspace/core/rules/ (rules.h lists the families), called from the
//      rule list in rules/diagnose.cpp;
//   3. its name in README.md ("Finding kinds today") and its row in
//      docs/json-schema.md (finding_kinds_test fails until both name it).
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace hangtrace {

enum class Severity { Info, Warning, Critical };
const char* severity_name(Severity s);

// X(enumerator, name, default severity, priority, doc line)
#define HANGTRACE_FINDING_KINDS(X)                                                                           \
  X(WaitsForInput, "waits-for-input", Critical, 1,                                                           \
    "a thread of the job reads a terminal, or stdin inside a debugger (pdb, breakpoint()): a person must "   \
    "act (warning when not a main thread)")                                                                  \
  X(Stopped, "stopped", Critical, 2,                                                                         \
    "a process of the job (or one it waits on) stopped by a signal or a tracer (warning: a few threads "     \
    "alone)")                                                                                                \
  X(ProcessKilled, "process-killed", Critical, 3,                                                            \
    "a process of the job died of a signal or the OOM killer (live), or before hangtrace attached (kernel "  \
    "log)")                                                                                                  \
  X(CollectiveWait, "collective-wait", Critical, 4,                                                          \
    "a rank inside a collective while a peer rank of the job is not (warning while the wait is short)")      \
  X(CollectiveMismatch, "collective-mismatch", Critical, 4,                                                  \
    "every rank is in a collective, but not the same one (a collective inside `if rank == 0:`; warning "     \
    "while the waits are short)")                                                                            \
  X(RendezvousWait, "rendezvous-wait", Critical, 4,                                                          \
    "a rank still joining its process group (init_process_group, the TCPStore, an elastic rendezvous) "      \
    "past --stall-after: ranks that should have joined have not (warning before)")                           \
  X(IoStuck, "io-stuck", Critical, 5,                                                                        \
    "a read or write stuck inside a filesystem (hung FUSE/NFS/Lustre mount, dead disk) past --stall-after")  \
  X(GpuWait, "gpu-wait", Warning, 6,                                                                         \
    "a host thread in a CUDA synchronize or synchronous copy for a long time (critical when very long)")     \
  X(GilHeld, "gil-held", Critical, 5,                                                                        \
    "a thread blocked while holding its process's GIL, other Python threads waiting (warning while short)")  \
  X(ShmExhausted, "shm-exhausted", Critical, 8, "the target's /dev/shm is (nearly) full")                    \
  X(PoolSelfWait, "pool-self-wait", Critical, 9,                                                             \
    "every thread of a thread pool runs a task that waits for a result only the same pool can produce")      \
  X(OrphanedLock, "orphaned-lock", Critical, 10,                                                             \
    "a lock wait no live thread can release (its owner is dead, or in another process after fork)")          \
  X(DeadPeer, "dead-peer", Critical, 12,                                                                     \
    "a wait on a pipe, socket or child whose other end no live process holds (or only the waiter itself)")   \
  X(DeadlockCycle, "deadlock-cycle", Critical, 20,                                                           \
    "blocked threads, across processes (or one thread relocking its own mutex), each waiting for the next")  \
  X(AsyncioCycle, "asyncio-cycle", Critical, 21,                                                             \
    "asyncio tasks of a process await each other in a cycle (through gather/TaskGroup futures too)")         \
  X(AsyncioOrphanFuture, "asyncio-orphan-future", Critical, 22,                                              \
    "an asyncio task awaits a future nothing else refers to, so nothing can ever set its result")            \
  X(AsyncioLoopBlocked, "asyncio-loop-blocked", Warning, 27,                                                 \
    "an event loop's thread blocked in a synchronous call inside a task past --stall-after: no task runs")   \
  X(DnsWait, "dns-wait", Critical, 28,                                                                       \
    "a thread inside a name lookup (getaddrinfo, res_*, a socket to port 53) past --stall-after")            \
  X(NoProgress, "no-progress", Critical, 29,                                                                 \
    "a main thread off CPU past --stall-after, nothing it waits on moving (warning when a timeout may end "  \
    "it)")                                                                                                   \
  X(NetworkWait, "network-wait", Warning, 30,                                                                \
    "a thread blocked on a TCP/UDP socket past --stall-after (critical when the main thread waits on it)")   \
  X(MemoryGrowth, "memory-growth", Warning, 40,                                                              \
    "(live) a process's resident memory grew fast during the window (critical for the main process)")        \
  X(GpuStarved, "gpu-starved", Warning, 45,                                                                  \
    "the GPU is idle while the host thread that feeds it is blocked (critical when it can never move on)")   \
  X(IoBound, "io-bound", Warning, 50,                                                                        \
    "(live) slow: the main thread's critical path is dominated by file reads or writes (mount, latency)")    \
  X(LockContention, "lock-contention", Warning, 51,                                                          \
    "(live) slow: threads of the job queue on one lock, taking turns holding it, for a large share")         \
  X(CollectiveSkew, "collective-skew", Warning, 52,                                                          \
    "(live) slow: a rank's main thread waits in collectives on its peers for a large share of the window")   \
  X(GpuIdle, "gpu-idle", Warning, 53,                                                                        \
    "(live) slow: the job's GPU is idle for a large share of the window, with the host cause from the path") \
  X(DataStarved, "data-starved", Warning, 54,                                                                \
    "(live) slow: the main thread waits on its DataLoader for more than a threshold share of the window")

enum class FindingKind {
#define HANGTRACE_FINDING_KIND_ENUMERATOR(id, name, severity, priority, doc) id,
  HANGTRACE_FINDING_KINDS(HANGTRACE_FINDING_KIND_ENUMERATOR)
#undef HANGTRACE_FINDING_KIND_ENUMERATOR
};

struct FindingKindInfo {
  FindingKind kind;
  const char* name;   // stable: the reports' "kind"
  Severity severity;  // unless the rule decides otherwise
  int priority;       // ordering among findings of one severity and confidence, lower first
  const char* doc;    // one line: when a finding of this kind is made
};

inline constexpr FindingKindInfo kFindingKinds[] = {
#define HANGTRACE_FINDING_KIND_INFO(id, name, severity, priority, doc) \
  {FindingKind::id, name, Severity::severity, priority, doc},
    HANGTRACE_FINDING_KINDS(HANGTRACE_FINDING_KIND_INFO)
#undef HANGTRACE_FINDING_KIND_INFO
};

// A terminal cause (orphaned-lock, dead-peer) that the target's main thread
// waits on, directly or through others, is what stops the job: it goes this
// much ahead of its kind's priority.
inline constexpr int kMainThreadWaitsPriorityBoost = 5;

constexpr const FindingKindInfo& finding_kind_info(FindingKind kind) {
  return kFindingKinds[static_cast<size_t>(kind)];
}
constexpr const char* finding_kind_name(FindingKind kind) { return finding_kind_info(kind).name; }
// The kind of that name; none for a name no kind has.
std::optional<FindingKind> finding_kind_from_name(std::string_view name);

}  // namespace hangtrace
