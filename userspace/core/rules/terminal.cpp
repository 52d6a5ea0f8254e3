// Waits nothing alive can end: orphaned-lock (a futex) and dead-peer (a pipe,
// socket or child whose other end is gone, or held only by the waiter).
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "rules.h"

namespace hangtrace::rules {

namespace {

// Objects that make one finding, by a key whose text also orders the
// findings: an object's id, or for a private lock its address and owner, so
// that the fork()ed copies of one lock (one per worker) make one finding.
struct Group {
  std::vector<std::string> ids;
  // A process whose threads only wait on each other: all of them, the
  // lock's waiters first (add_locks_of_closed_processes).
  std::vector<int> knot_tids;
};
using Groups = std::map<std::string, Group>;

bool is_private_futex(const WaitObject& o) {
  return o.kind == ObjectKind::Futex && o.futex && !o.futex->shared;
}

std::string private_lock_key(const WaitObject& o) {
  return fmt::format("futex-private:{:#x}:{}", o.futex->address,
                     o.owner_tid ? std::to_string(*o.owner_tid) : "-");
}

// An asyncio event loop idles in its selector on its own wake-up channel, a
// socketpair whose other end it keeps (call_soon_threadsafe and signals,
// through signal.set_wakeup_fd, write it): no peer went away. What its tasks
// wait for is the asyncio rules' to say.
bool event_loops_wake_up(const RuleContext& ctx, const WaitObject& o) {
  if (o.waiters.empty()) return false;
  for (int tid : o.waiters) {
    const ProcessInfo* p = ctx.snap.process(ctx.pid_of(tid));
    const ThreadInfo* t = p ? p->thread(tid) : nullptr;
    if (!t || !t->asyncio_loop) return false;
  }
  return true;
}

// Objects whose waiters (some of them in the job) are all stuck and that no
// thread can release, or only the waiters' own process (a pipe end it never
// closed).
void add_unreleasable_objects(const RuleContext& ctx, Groups& groups) {
  for (const auto& [id, o] : ctx.graph.objects) {
    if (o.ready || o.external) continue;
    bool waiters_stuck = !o.waiters.empty();
    bool job_waits = false;
    for (int t : o.waiters) {
      waiters_stuck = waiters_stuck && ctx.knot.lenient.count(t);
      job_waits = job_waits || ctx.in_tree(t);
    }
    if (!job_waits || !waiters_stuck) continue;
    // A thread waiting on a mutex it owns itself is a cycle of one (deadlock.cpp).
    if (o.owner_tid && std::count(o.waiters.begin(), o.waiters.end(), *o.owner_tid)) continue;
    bool no_releaser = releaser_count(o) == 0;
    bool self_only = o.only_self_holders && o.kind != ObjectKind::Futex;
    if (!no_releaser && !self_only) continue;
    if (self_only && event_loops_wake_up(ctx, o)) continue;
    groups[is_private_futex(o) ? private_lock_key(o) : id].ids.push_back(id);
  }
}

// Every thread that could release what `comp` (threads of `pid` alone)
// waits on is one of `comp`. By object, not by dependency: a process's
// parked threads all release each other's private futexes, so a component
// of n threads has n * n of those.
bool releasers_within(const RuleContext& ctx, const std::vector<int>& comp, const std::set<int>& members,
                      int pid) {
  auto live = ctx.graph.live_threads.find(pid);
  size_t outside = 0;  // live threads of pid that are not members
  if (live != ctx.graph.live_threads.end())
    for (int t : live->second) outside += members.count(t) ? 0 : 1;
  std::set<const WaitObject*> seen;
  for (int t : comp) {
    const ThreadWait* w = ctx.wait_of(t);
    if (!w) continue;
    for (const auto& id : w->objects) {
      const WaitObject& o = ctx.object(id);
      if (!seen.insert(&o).second) continue;
      for (int r : o.releasers)
        if (!members.count(r)) return false;
      for (const auto& rp : o.releaser_processes) {
        // Another process's threads are never members; pid's threads
        // outside the component must all be excepted.
        if (rp.pid != pid) return false;
        size_t excepted_outside = 0;
        for (int x : rp.except) excepted_outside += members.count(x) ? 0 : 1;
        if (excepted_outside != outside) return false;
      }
    }
  }
  return true;
}

// A process whose threads only wait on each other (every thread that could
// unlock its main thread's lock is itself stuck inside the process): the
// main thread's lock is the probable root.
void add_locks_of_closed_processes(const RuleContext& ctx, Groups& groups) {
  for (const auto& comp : ctx.knot.sccs) {
    std::set<int> pids;
    for (int t : comp) pids.insert(ctx.pid_of(t));
    if (pids.size() != 1 || comp.size() < 2) continue;
    const std::set<int> members(comp.begin(), comp.end());
    int pid = *pids.begin();
    bool sink = releasers_within(ctx, comp, members, pid);
    if (!sink || !members.count(pid)) continue;
    // A pool waiting on itself is that finding's (pool.cpp), with its advice.
    bool pool = std::any_of(ctx.findings.begin(), ctx.findings.end(), [&](const Finding& f) {
      return f.kind == FindingKind::PoolSelfWait && std::count(f.pids.begin(), f.pids.end(), pid);
    });
    if (pool) continue;
    for (const auto& id : ctx.wait_of(pid)->objects) {
      const WaitObject& o = ctx.object(id);
      if (!is_private_futex(o) || o.owner_tid) continue;
      Group& g = groups[private_lock_key(o)];
      g.ids.push_back(id);
      for (int t : comp) add_unique(g.knot_tids, t);
    }
  }
}

// The lock came across a fork: its owner is a thread of another process (the
// parent whose copy it is), or the waiting process is a fork child (its
// parent's command line) and no live thread of its own owns the lock. A fork
// child's other threads were all started after the fork, so a knot of them
// (idle helpers parked on their own events) does not make it an in-process
// deadlock; a pool waiting on itself is pool.cpp's, before this rule.
bool lock_came_across_fork(const RuleContext& ctx, const WaitObject& lock, int waiter_pid) {
  if (lock.owner_tid && !lock.owner_unresolved) {
    auto it = ctx.graph.tid_to_pid.find(*lock.owner_tid);
    if (it != ctx.graph.tid_to_pid.end()) return it->second != waiter_pid;
  }
  return ctx.is_fork_child(waiter_pid);
}

// Certain when the waiters and every thread that could release what they
// wait on are stuck for good. A process entry holds when each of its
// process's live threads that can still move on is one it excepts.
Confidence waiters_and_releasers_stuck(const RuleContext& ctx, const std::vector<int>& waiters,
                                       const std::vector<std::string>& ids) {
  if (ctx.confidence_for(waiters) != Confidence::Certain) return Confidence::Probable;
  std::map<int, std::vector<int>> moving;  // pid -> its live threads not stuck
  auto moving_of = [&](int pid) -> const std::vector<int>& {
    auto [it, inserted] = moving.try_emplace(pid);
    auto live = ctx.graph.live_threads.find(pid);
    if (inserted && live != ctx.graph.live_threads.end())
      for (int t : live->second)
        if (!ctx.stuck(t)) it->second.push_back(t);
    return it->second;
  };
  for (const auto& id : ids) {
    const WaitObject& o = ctx.object(id);
    if (ctx.confidence_for(o.releasers) != Confidence::Certain) return Confidence::Probable;
    for (const auto& rp : o.releaser_processes)
      for (int t : moving_of(rp.pid))
        if (!std::binary_search(rp.except.begin(), rp.except.end(), t)) return Confidence::Probable;
  }
  return Confidence::Certain;
}

void describe_orphaned_lock(const RuleContext& ctx, Finding& f, const WaitObject& lock,
                            const std::vector<int>& waiters, const std::string& who, bool in_process_knot) {
  std::string reason;
  if (lock.owner_tid) {
    auto it = lock.owner_unresolved ? ctx.graph.tid_to_pid.end() : ctx.graph.tid_to_pid.find(*lock.owner_tid);
    bool foreign_owner = it != ctx.graph.tid_to_pid.end() && it->second != ctx.pid_of(waiters[0]);
    reason = foreign_owner ? fmt::format(
                                 "the lock's owner TID {} is a thread of process {}, not of the waiter: "
                                 "the lock was copied in its locked state by fork()",
                                 *lock.owner_tid, it->second)
                           : fmt::format("the lock's owner TID {} is not alive", *lock.owner_tid);
  } else if (is_private_futex(lock)) {
    const ProcessInfo* p = ctx.snap.process(ctx.pid_of(waiters[0]));
    size_t n = p ? p->threads.size() : 0;
    reason = n <= 1 ? "the waiting process has a single thread and the lock is private to it: "
                      "nobody can ever unlock it (a lock inherited across fork in its locked state)"
                    : "every other thread that could unlock it is itself stuck";
  } else {
    reason = "every process that maps this lock is stuck";
  }
  f.details["reason"] = reason;
  f.details["owner_tid"] = lock.owner_tid ? nlohmann::json(*lock.owner_tid) : nlohmann::json(nullptr);
  f.details["lock"] = lock.label;
  f.summary = fmt::format("{} wait{} forever on {} that no live thread can release: {}", who,
                          waiters.size() == 1 ? "s" : "", lock.label, reason);
  const bool fork = lock_came_across_fork(ctx, lock, ctx.pid_of(waiters[0]));
  f.details["across_fork"] = fork;
  // No owner recorded and no fork: the process's own threads hold it (a
  // thread that acquired a non-reentrant lock twice, or one that waits on
  // the others).
  if (!fork && (in_process_knot || !lock.owner_tid)) {
    f.advice = {
        "The threads of one process wait on each other: each holds, or is the only one that could signal, "
        "what another waits for. Their stacks above (py: lines) show which locks, queues, events or futures; "
        "take locks in one order everywhere, and never wait for work that only a thread now waiting "
        "could do.",
        "Give the waits a timeout (Lock.acquire(timeout=...), queue.get(timeout=...), future.result("
        "timeout=...)) so a stuck thread fails loudly, and dump the stacks on a signal (faulthandler."
        "register(signal.SIGUSR1)).",
    };
    return;
  }
  if (!fork) {
    f.advice = {
        "The lock's owner is gone while holding it: a thread that exited (or was cancelled, or a process "
        "killed) inside its critical section. Release locks in finally / with-blocks, and don't kill "
        "threads or processes that may hold a lock shared with others (a multiprocessing.Lock, a POSIX "
        "semaphore in /dev/shm).",
        "A lock shared between processes outlives a holder killed by the OOM killer or a signal: check "
        "dmesg / journalctl -k for the holder's death, and prefer robust mutexes or timeouts.",
    };
    return;
  }
  f.advice = {
      "A lock was held (by another thread) at the moment the process forked; the child got a copy "
      "that is locked forever. Start DataLoader workers with multiprocessing_context='spawn' (or "
      "'forkserver'), or torch.multiprocessing.set_start_method('spawn').",
      "Or make sure no thread holds a lock when workers are forked: create the DataLoader iterator "
      "(and persistent_workers) before starting background threads, and don't take locks in "
      "Dataset.__getitem__ that the main process also uses.",
  };
}

void describe_dead_peer(const RuleContext& ctx, Finding& f, const WaitObject& object,
                        const std::string& who) {
  std::string reason;
  if (object.kind == ObjectKind::Child)
    reason = "no child that could end this wait is alive";
  else if (object.only_self_holders)
    reason =
        "the other end is held only by the waiting process itself (an unused copy of the "
        "other end was never closed), and nothing in it will write";
  else
    reason = "no live process holds the other end";
  f.summary = fmt::format("{} waits on {} but {}", who, object.label, reason);
  f.details["object"] = object.name;
  f.details["reason"] = reason;
  for (int pid : f.pids) {
    const ProcessInfo* p = ctx.snap.process(pid);
    if (!p) continue;
    for (int c : p->children) {
      const ProcessInfo* cp = ctx.snap.process(c);
      if (cp && (cp->state == 'Z' || cp->state == 'X'))
        f.evidence.push_back(
            fmt::format("child {} ({}) has exited and was not reaped (zombie){}", c, cp->comm,
                        cp->exit_signal ? fmt::format(", exit code {}", *cp->exit_signal) : ""));
    }
  }
  // A multiprocessing Queue or Pipe: the user never sees its file
  // descriptors, and the queue keeps its own copy of the write end.
  bool in_multiprocessing_get = false;
  for (int t : f.tids)
    if (ctx.runs_python(t, "multiprocessing/queues.py") ||
        ctx.runs_python(t, "multiprocessing/connection.py"))
      in_multiprocessing_get = true;
  f.details["multiprocessing"] = in_multiprocessing_get;
  if (in_multiprocessing_get) {
    f.advice = {
        fmt::format(
            "{} waits in a multiprocessing Queue.get()/Connection.recv() that no live process will "
            "put to: its producer exited or was killed, and the queue's pipe never reports EOF (the "
            "consumer's process holds a copy of the write end itself). Call get(timeout=...) and, when "
            "it times out, check the producer's is_alive()/exitcode (or have every producer put a "
            "sentinel before it exits, also from a finally).",
            who),
        "Then find out why the producer died: its exit code above, an OOM kill in the kernel log "
        "(dmesg / journalctl -k), an exception on its stderr.",
    };
    return;
  }
  f.advice = {
      "Close the unused end of every pipe/socketpair right after fork (the reader never sees EOF "
      "while any process, itself included, holds the write end).",
      "Find out why the peer went away (exit status, OOM kill: dmesg / journalctl -k), and give "
      "blocking reads a timeout (DataLoader(timeout=...), socket.settimeout).",
  };
}

}  // namespace

std::vector<Finding> terminal_findings(const RuleContext& ctx) {
  Groups groups;
  add_unreleasable_objects(ctx, groups);
  add_locks_of_closed_processes(ctx, groups);
  for (auto& [key, g] : groups) {
    std::sort(g.ids.begin(), g.ids.end());
    g.ids.erase(std::unique(g.ids.begin(), g.ids.end()), g.ids.end());
  }
  std::vector<Finding> out;
  for (const auto& [key, g] : groups) {
    const std::vector<std::string>& ids = g.ids;
    const WaitObject& first = ctx.object(ids.front());
    Finding f(first.kind == ObjectKind::Futex ? FindingKind::OrphanedLock : FindingKind::DeadPeer);
    std::vector<int> waiters;
    for (const auto& id : ids)
      for (int t : ctx.object(id).waiters) add_unique(waiters, t);
    std::sort(waiters.begin(), waiters.end());
    for (int t : waiters) {
      add_unique(f.tids, t);
      add_unique(f.pids, ctx.pid_of(t));
    }
    for (int t : g.knot_tids) add_unique(f.tids, t);  // every stuck thread of a closed process
    // Certain when every thread that could release it is itself in a wait
    // with no timeout inside the same closed set (strict knot).
    f.confidence = waiters_and_releasers_stuck(ctx, waiters, ids);
    std::string who = waiters.size() == 1 ? ctx.thread_label(waiters[0])
                                          : fmt::format("{} threads ({})", waiters.size(),
                                                        ctx.thread_label(waiters[0]) + ", ...");
    if (f.kind == FindingKind::OrphanedLock)
      describe_orphaned_lock(ctx, f, first, waiters, who, !g.knot_tids.empty());
    else
      describe_dead_peer(ctx, f, first, who);
    for (const auto& n : first.notes) f.evidence.push_back(n);
    constexpr size_t kThreadsShown = 16;
    for (size_t i = 0; i < f.tids.size() && i < kThreadsShown; ++i) ctx.add_thread_evidence(f, f.tids[i]);
    if (f.tids.size() > kThreadsShown)
      f.evidence.push_back(fmt::format("... and {} more threads", f.tids.size() - kThreadsShown));
    std::string cause_object = ids.front();
    for (const auto& id : ids) {
      const auto& ws = ctx.object(id).waiters;
      if (std::count(ws.begin(), ws.end(), waiters.front())) cause_object = id;
    }
    ctx.add_main_chain(f, waiters.front(), cause_object);
    if (!f.chain.empty() || ctx.reachable_from_main(waiters.front()))
      f.priority -= kMainThreadWaitsPriorityBoost;
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace hangtrace::rules
