// Wait-for graph -> findings and a verdict.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <set>

#include "hangtrace/abi.h"
#include "hangtrace/analysis.h"
#include "hangtrace/text.h"
#include "gpu_rules.h"

namespace hangtrace {

const char* severity_name(Severity s) {
  switch (s) {
    case Severity::Info:
      return "info";
    case Severity::Warning:
      return "warning";
    case Severity::Critical:
      return "critical";
  }
  return "info";
}

const char* confidence_name(Confidence c) { return c == Confidence::Certain ? "certain" : "probable"; }

int exit_status_for(const Diagnosis& d) {
  for (const auto& f : d.findings)
    if (f.severity == Severity::Critical) return 2;
  return 0;
}

namespace {

class Analyzer {
 public:
  Analyzer(const Snapshot& s, const AnalysisOptions& o, const LiveObservation* live)
      : snap_(s), opt_(o), live_(live) {
    d_.graph = build_wait_graph(s);
  }

  Diagnosis run() {
    compute_deadlocked();
    terminal_causes();
    cycles();
    network_waits();
    shm_exhausted();
    if (live_) {
      process_killed();
      memory_growth();
    }
    gpu_and_collectives();
    finish();
    return std::move(d_);
  }

 private:
  const Snapshot& snap_;
  AnalysisOptions opt_;
  const LiveObservation* live_;
  Diagnosis d_;
  std::set<int> strict_, lenient_;  // deadlocked: timed waits live / not live
  std::set<std::string> explained_objects_;
  std::vector<std::vector<int>> sccs_;

  const WaitGraph& g() const { return d_.graph; }

  // ---- labels ---------------------------------------------------------------
  std::string role_of(int pid) const {
    const ProcessInfo* p = snap_.process(pid);
    if (!p) return "process";
    if (p->role == ProcessRole::Target) return "main";
    if (p->role == ProcessRole::Peer) return "peer";
    return p->ppid == snap_.target_pid ? "worker" : "descendant";
  }

  std::string thread_label(int tid) const {
    auto it = g().tid_to_pid.find(tid);
    int pid = it == g().tid_to_pid.end() ? tid : it->second;
    const ProcessInfo* p = snap_.process(pid);
    std::string comm = p ? p->comm : "?";
    if (tid == pid) return fmt::format("{} {} ({})", role_of(pid), pid, comm);
    std::string tcomm;
    if (p)
      for (const auto& t : p->threads)
        if (t.tid == tid) tcomm = t.comm;
    return fmt::format("thread {} ({}) of {} {}", tid, tcomm, role_of(pid), pid);
  }

  std::string releaser_label(const WaitObject& o, int tid) const {
    size_t others = o.releasers.size() > 1 ? o.releasers.size() - 1 : 0;
    return others ? fmt::format("{} (or {} other thread{})", thread_label(tid), others, others > 1 ? "s" : "")
                  : thread_label(tid);
  }

  const ThreadWait* wait_of(int tid) const {
    auto it = g().threads.find(tid);
    return it == g().threads.end() ? nullptr : &it->second;
  }

  // Peers (processes outside the job holding the other end of something) are
  // context for the graph; findings are about the job itself.
  bool in_tree(int tid) const {
    const ProcessInfo* p = snap_.process(pid_of(tid));
    return p && p->role != ProcessRole::Peer;
  }

  int pid_of(int tid) const {
    auto it = g().tid_to_pid.find(tid);
    return it == g().tid_to_pid.end() ? tid : it->second;
  }

  // ---- which threads can never move on ----------------------------------------
  bool live(const ThreadWait& w, bool timed_is_live) const {
    switch (w.activity) {
      case Activity::Running:
      case Activity::Sleeping:
      case Activity::DiskWait:
      case Activity::Stopped:
      case Activity::Unknown:
        return true;
      case Activity::Dead:
        return false;
      case Activity::TimedWait:
        if (timed_is_live || w.progressed) return true;
        [[fallthrough]];
      case Activity::Blocked:
        for (const auto& id : w.objects) {
          const WaitObject& o = g().objects.at(id);
          if (o.ready || o.external) return true;
        }
        return w.objects.empty();  // a wait we could not resolve: don't guess
    }
    return true;
  }

  std::set<int> deadlocked(bool timed_is_live) const {
    std::map<int, std::vector<int>> dependents;  // releaser -> threads it could free
    std::deque<int> queue;
    std::set<int> can_progress;
    for (const auto& [tid, w] : g().threads) {
      for (int r : g().depends_on(tid)) dependents[r].push_back(tid);
      if (live(w, timed_is_live) && w.activity != Activity::Dead) {
        can_progress.insert(tid);
        queue.push_back(tid);
      }
    }
    while (!queue.empty()) {
      int r = queue.front();
      queue.pop_front();
      for (int t : dependents[r])
        if (can_progress.insert(t).second) queue.push_back(t);
    }
    std::set<int> out;
    for (const auto& [tid, w] : g().threads)
      if ((w.activity == Activity::Blocked || w.activity == Activity::TimedWait) && !can_progress.count(tid))
        out.insert(tid);
    return out;
  }

  // Strongly connected components of the dependency graph among stuck threads.
  void compute_sccs() {
    std::vector<int> nodes(lenient_.begin(), lenient_.end());
    std::map<int, int> index, low;
    std::set<int> on_stack;
    std::vector<int> stack;
    auto& sccs = sccs_;
    int counter = 0;
    std::function<void(int)> strong = [&](int v) {
      index[v] = low[v] = counter++;
      stack.push_back(v);
      on_stack.insert(v);
      for (int w : g().depends_on(v)) {
        if (!lenient_.count(w)) continue;
        if (!index.count(w)) {
          strong(w);
          low[v] = std::min(low[v], low[w]);
        } else if (on_stack.count(w)) {
          low[v] = std::min(low[v], index[w]);
        }
      }
      if (low[v] == index[v]) {
        std::vector<int> comp;
        int w;
        do {
          w = stack.back();
          stack.pop_back();
          on_stack.erase(w);
          comp.push_back(w);
        } while (w != v);
        sccs.push_back(comp);
      }
    };
    for (int v : nodes)
      if (!index.count(v)) strong(v);
  }

  void compute_deadlocked() {
    strict_ = deadlocked(true);
    lenient_ = deadlocked(false);
    d_.deadlocked_tids.assign(strict_.begin(), strict_.end());
    for (int t : lenient_)
      if (!strict_.count(t)) d_.probably_deadlocked_tids.push_back(t);
    compute_sccs();
  }

  Confidence confidence_for(const std::vector<int>& tids) const {
    for (int t : tids)
      if (!strict_.count(t)) return Confidence::Probable;
    return Confidence::Certain;
  }

  // ---- chains -------------------------------------------------------------------
  // Shortest wait chain from `from` to `to` through the graph: thread -> object ->
  // releaser thread -> ...; empty when `to` is not reachable.
  std::vector<ChainStep> chain(int from, int to) const { return chain_steps(from, wait_path(from, to)); }

  // The hops of that chain: (thread reached, object it was reached through),
  // `from` itself not included; empty when `to` is not reachable.
  std::vector<std::pair<int, std::string>> wait_path(int from, int to) const {
    if (from == to) return {};
    std::map<int, std::pair<int, std::string>> parent;  // tid -> (prev tid, via object)
    std::deque<int> q{from};
    parent[from] = {from, ""};
    while (!q.empty()) {
      int t = q.front();
      q.pop_front();
      if (t == to) break;
      const ThreadWait* w = wait_of(t);
      if (!w) continue;
      for (const auto& id : w->objects) {
        const WaitObject& o = g().objects.at(id);
        for (int r : o.releasers)
          if (!parent.count(r)) {
            parent[r] = {t, id};
            q.push_back(r);
          }
      }
    }
    if (!parent.count(to)) return {};
    std::vector<std::pair<int, std::string>> path;
    for (int t = to; t != from; t = parent[t].first) path.push_back({t, parent[t].second});
    std::reverse(path.begin(), path.end());
    return path;
  }

  std::vector<ChainStep> chain_steps(int from, const std::vector<std::pair<int, std::string>>& path) const {
    std::vector<ChainStep> steps;
    int prev = from;
    for (auto& [t, via] : path) {
      const WaitObject& o = g().objects.at(via);
      steps.push_back({thread_label(prev), "waits on", o.label});
      steps.push_back({o.label, "can be released by", releaser_label(o, t)});
      prev = t;
    }
    return steps;
  }

  void add_main_chain(Finding& f, int cause_tid, const std::string& cause_object) {
    const int main_tid = snap_.target_pid;
    std::vector<std::pair<int, std::string>> path = wait_path(main_tid, cause_tid);
    if (!path.empty() || main_tid == cause_tid) {
      f.chain = chain_steps(main_tid, path);
      f.details["main_waits_on_it"] = true;
      f.chain_tids = {main_tid};
      for (const auto& hop : path) add_unique(f.chain_tids, hop.first);
    }
    if (!cause_object.empty()) {
      const WaitObject& o = g().objects.at(cause_object);
      f.chain.push_back({thread_label(cause_tid), "waits on", o.label});
    }
  }

  bool reachable_from_main(int tid) const {
    return tid == snap_.target_pid || !chain(snap_.target_pid, tid).empty();
  }

  void add_thread_evidence(Finding& f, int tid) const {
    const ThreadWait* w = wait_of(tid);
    if (!w) return;
    std::string line = fmt::format("{} {} in {} {}", thread_label(tid), activity_name(w->activity),
                                   w->syscall_text.empty() ? "?" : w->syscall_text, for_duration(w->blocked_s));
    if (!w->kernel_stack.empty()) {
      std::vector<std::string> top(w->kernel_stack.begin(),
                                   w->kernel_stack.begin() + std::min<size_t>(4, w->kernel_stack.size()));
      line += fmt::format("; kernel: {}", fmt::join(top, " <- "));
    }
    f.evidence.push_back(line);
  }

  static void add_unique(std::vector<int>& v, int x) {
    if (std::find(v.begin(), v.end(), x) == v.end()) v.push_back(x);
  }

  // ---- orphaned-lock and dead-peer --------------------------------------------
  void terminal_causes() {
    // Group per object; forked copies of one private lock share an address and
    // an owner, so they become one finding.
    std::map<std::string, std::vector<std::string>> groups;
    for (const auto& [id, o] : g().objects) {
      if (o.ready || o.external) continue;
      bool waiters_stuck = !o.waiters.empty();
      bool job_waits = false;
      for (int t : o.waiters) {
        waiters_stuck = waiters_stuck && lenient_.count(t);
        job_waits = job_waits || in_tree(t);
      }
      if (!job_waits) continue;
      if (!waiters_stuck) continue;
      // A thread waiting on a mutex it owns itself is a cycle of one (cycles()).
      if (o.owner_tid && std::count(o.waiters.begin(), o.waiters.end(), *o.owner_tid)) continue;
      bool no_releaser = o.releasers.empty();
      bool self_only = o.only_self_holders && o.kind != ObjectKind::Futex;
      if (!no_releaser && !self_only) continue;
      std::string key = id;
      if (o.kind == ObjectKind::Futex && id.rfind("futex:private:", 0) == 0) {
        key = "futex-private:" + id.substr(id.rfind(':') + 1) + ":" +
              (o.owner_tid ? std::to_string(*o.owner_tid) : "-");
      }
      groups[key].push_back(id);
    }
    // A process whose threads only wait on each other (every thread that could
    // unlock its main thread's lock is itself stuck inside the process): the
    // main thread's lock is the probable root.
    for (const auto& comp : sccs_) {
      std::set<int> pids;
      for (int t : comp) pids.insert(pid_of(t));
      if (pids.size() != 1 || comp.size() < 2) continue;
      bool sink = true;
      for (int t : comp)
        for (int r : g().depends_on(t)) sink = sink && std::count(comp.begin(), comp.end(), r);
      int pid = *pids.begin();
      if (!sink || !std::count(comp.begin(), comp.end(), pid)) continue;
      for (const auto& id : wait_of(pid)->objects) {
        const WaitObject& o = g().objects.at(id);
        if (o.kind != ObjectKind::Futex || id.rfind("futex:private:", 0) != 0 || o.owner_tid) continue;
        groups["futex-private:" + id.substr(id.rfind(':') + 1) + ":-"].push_back(id);
      }
    }
    for (auto& [key, ids] : groups) {
      std::sort(ids.begin(), ids.end());
      ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    }
    for (const auto& [key, ids] : groups) {
      const WaitObject& first = g().objects.at(ids.front());
      Finding f;
      std::vector<int> waiters;
      for (const auto& id : ids)
        for (int t : g().objects.at(id).waiters) add_unique(waiters, t);
      std::sort(waiters.begin(), waiters.end());
      for (int t : waiters) {
        add_unique(f.tids, t);
        add_unique(f.pids, pid_of(t));
      }
      // Certain when every thread that could release it is itself in a wait
      // with no timeout inside the same closed set (strict knot).
      std::vector<int> involved = waiters;
      for (const auto& id : ids)
        for (int r : g().objects.at(id).releasers) add_unique(involved, r);
      f.confidence = confidence_for(involved);
      f.severity = Severity::Critical;
      for (const auto& id : ids) explained_objects_.insert(id);
      std::string who = waiters.size() == 1 ? thread_label(waiters[0])
                                            : fmt::format("{} threads ({})", waiters.size(),
                                                          thread_label(waiters[0]) + ", ...");
      if (first.kind == ObjectKind::Futex) {
        f.kind = "orphaned-lock";
        f.rank = 10;
        bool foreign_owner = false;
        std::string reason;
        if (first.owner_tid) {
          auto it = g().tid_to_pid.find(*first.owner_tid);
          foreign_owner = it != g().tid_to_pid.end() && it->second != pid_of(waiters[0]);
          reason = foreign_owner
                       ? fmt::format(
                             "the lock's owner TID {} is a thread of process {}, not of the waiter: "
                             "the lock was copied in its locked state by fork()",
                             *first.owner_tid, it->second)
                       : fmt::format("the lock's owner TID {} is not alive", *first.owner_tid);
        } else if (first.id.rfind("futex:private:", 0) == 0) {
          const ProcessInfo* p = snap_.process(pid_of(waiters[0]));
          size_t n = p ? p->threads.size() : 0;
          reason = n <= 1 ? "the waiting process has a single thread and the lock is private to it: "
                            "nobody can ever unlock it (a lock inherited across fork in its locked state)"
                          : "every other thread that could unlock it is itself stuck";
        } else {
          reason = "every process that maps this lock is stuck";
        }
        f.details["reason"] = reason;
        f.details["owner_tid"] = first.owner_tid ? nlohmann::json(*first.owner_tid) : nlohmann::json(nullptr);
        f.details["lock"] = first.label;
        f.summary = fmt::format("{} wait{} forever on {} that no live thread can release: {}", who,
                                waiters.size() == 1 ? "s" : "", first.label, reason);
        f.advice = {
            "A lock was held (by another thread) at the moment the process forked; the child got a copy "
            "that is locked forever. Start DataLoader workers with multiprocessing_context='spawn' (or "
            "'forkserver'), or torch.multiprocessing.set_start_method('spawn').",
            "Or make sure no thread holds a lock when workers are forked: create the DataLoader iterator "
            "(and persistent_workers) before starting background threads, and don't take locks in "
            "Dataset.__getitem__ that the main process also uses.",
        };
      } else {
        f.kind = "dead-peer";
        f.rank = 12;
        std::string reason;
        if (first.kind == ObjectKind::Child)
          reason = "no child that could end this wait is alive";
        else if (first.only_self_holders)
          reason =
              "the other end is held only by the waiting process itself (an unused copy of the "
              "other end was never closed), and nothing in it will write";
        else
          reason = "no live process holds the other end";
        f.summary = fmt::format("{} waits on {} but {}", who, first.label, reason);
        // "pipe:[N]" without the end, "socket:[N]", "child:N": names people grep for.
        std::string object_name = first.id;
        if (first.kind == ObjectKind::Pipe) object_name = first.id.substr(0, first.id.rfind(':'));
        f.details["object"] = object_name;
        f.details["reason"] = reason;
        for (int pid : f.pids) {
          const ProcessInfo* p = snap_.process(pid);
          if (!p) continue;
          for (int c : p->children) {
            const ProcessInfo* cp = snap_.process(c);
            if (cp && (cp->state == 'Z' || cp->state == 'X'))
              f.evidence.push_back(
                  fmt::format("child {} ({}) has exited and was not reaped (zombie){}", c, cp->comm,
                              cp->exit_signal ? fmt::format(", exit code {}", *cp->exit_signal) : ""));
          }
        }
        f.advice = {
            "Close the unused end of every pipe/socketpair right after fork (the reader never sees EOF "
            "while any process, itself included, holds the write end).",
            "Find out why the peer went away (exit status, OOM kill: dmesg / journalctl -k), and give "
            "blocking reads a timeout (DataLoader(timeout=...), socket.settimeout).",
        };
      }
      for (const auto& n : first.notes) f.evidence.push_back(n);
      for (int t : waiters) add_thread_evidence(f, t);
      std::string cause_object = ids.front();
      for (const auto& id : ids)
        if (std::count(g().objects.at(id).waiters.begin(), g().objects.at(id).waiters.end(), waiters.front()))
          cause_object = id;
      add_main_chain(f, waiters.front(), cause_object);
      if (!f.chain.empty() || reachable_from_main(waiters.front())) f.rank -= 5;
      d_.findings.push_back(std::move(f));
    }
  }

  // ---- deadlock-cycle -------------------------------------------------------------
  void cycles() {
    const auto& sccs = sccs_;
    for (auto& comp : sccs) {
      if (std::none_of(comp.begin(), comp.end(), [&](int t) { return in_tree(t); })) continue;
      std::set<int> members(comp.begin(), comp.end());
      std::set<int> pids;
      for (int t : comp) pids.insert(pid_of(t));
      bool self_loop = false;
      if (comp.size() == 1) {
        // A thread waiting on a lock it owns itself.
        const ThreadWait* w = wait_of(comp[0]);
        for (const auto& id : w->objects) {
          const WaitObject& o = g().objects.at(id);
          if (o.owner_tid && *o.owner_tid == comp[0]) self_loop = true;
        }
        if (!self_loop) continue;
      }
      // One process holding both ends of its own pipe (multiprocessing queues)
      // forms cycles that explain nothing; a cycle must cross processes or go
      // through locks whose owners are known.
      bool owner_edges_only = true;
      for (int t : comp)
        for (const auto& id : wait_of(t)->objects) {
          const WaitObject& o = g().objects.at(id);
          if (!o.owner_tid) owner_edges_only = false;
        }
      if (pids.size() < 2 && !owner_edges_only && !self_loop) continue;

      int start = members.count(snap_.target_pid) ? snap_.target_pid : *members.begin();
      std::vector<std::pair<int, std::string>> cycle = shortest_cycle(start, members);
      Finding f;
      f.kind = "deadlock-cycle";
      f.severity = Severity::Critical;
      f.rank = 20;
      std::vector<int> cycle_tids;
      for (auto& [t, via] : cycle) cycle_tids.push_back(t);
      f.confidence = confidence_for(cycle_tids);
      std::vector<std::string> drawn;
      int prev = start;
      for (auto& [t, via] : cycle) {
        const WaitObject& o = g().objects.at(via);
        f.chain.push_back({thread_label(prev), "waits on", o.label});
        f.chain.push_back({o.label, "can be released by", releaser_label(o, t)});
        drawn.push_back(thread_label(prev));
        drawn.push_back(o.label);
        explained_objects_.insert(via);
        add_unique(f.tids, prev);
        add_unique(f.pids, pid_of(prev));
        add_unique(f.chain_tids, prev);
        prev = t;
      }
      drawn.push_back(thread_label(start));
      for (int t : comp) {
        add_unique(f.tids, t);
        add_unique(f.pids, pid_of(t));
      }
      f.details["cycle"] = drawn;
      f.details["threads_in_knot"] = comp.size();
      f.summary = fmt::format("deadlock: {}", fmt::join(drawn, " -> "));
      bool has_timed = false;
      for (int t : cycle_tids) {
        add_thread_evidence(f, t);
        const ThreadWait* w = wait_of(t);
        if (w->activity == Activity::TimedWait) has_timed = true;
      }
      for (auto& [t, via] : cycle)
        for (const auto& n : g().objects.at(via).notes) f.evidence.push_back(n);
      if (has_timed)
        f.evidence.push_back(fmt::format(
            "some waits have timeouts, but no thread in the cycle used CPU or did I/O in {:.2f} s: a "
            "retry loop that goes back to the same wait",
            snap_.sample_window_s));
      f.advice = {
          "Break the cycle: never hold a lock (multiprocessing.Lock, threading.Lock) while waiting for "
          "another process or thread that may need the same lock; release it before q.get()/next(loader).",
          "Give the waits a timeout so the job fails loudly instead of hanging (DataLoader(timeout=...), "
          "Queue.get(timeout=...)).",
      };
      d_.findings.push_back(std::move(f));
    }
  }

  // BFS within `members` from start back to start; returns (thread, via object)
  // hops. Releasers in other processes are tried first so the drawn cycle shows
  // the cross-process wait rather than a thread's own helper threads.
  std::vector<std::pair<int, std::string>> shortest_cycle(int start, const std::set<int>& members) const {
    std::map<int, std::pair<int, std::string>> parent;
    std::deque<int> q{start};
    std::optional<std::pair<int, std::string>> closing;
    std::set<int> visited{start};
    while (!q.empty() && !closing) {
      int t = q.front();
      q.pop_front();
      std::vector<std::pair<int, std::string>> next;
      for (const auto& id : wait_of(t)->objects)
        for (int r : g().objects.at(id).releasers)
          if (members.count(r)) next.push_back({r, id});
      std::stable_sort(next.begin(), next.end(), [&](const auto& a, const auto& b) {
        return (pid_of(a.first) != pid_of(t)) > (pid_of(b.first) != pid_of(t));
      });
      for (auto& [r, id] : next) {
        if (r == start) {
          closing = std::make_pair(t, id);
          break;
        }
        if (visited.insert(r).second) {
          parent[r] = {t, id};
          q.push_back(r);
        }
      }
    }
    std::vector<std::pair<int, std::string>> hops;
    if (!closing) return hops;
    hops.push_back({start, closing->second});
    for (int t = closing->first; t != start; t = parent[t].first) hops.push_back({t, parent[t].second});
    std::reverse(hops.begin(), hops.end());
    // hops[i] = (thread reached, object through which it was reached)
    return hops;
  }

  // ---- network-wait -----------------------------------------------------------------
  // What the live window saw between `pid` and `remote`: retransmits (any of
  // its sockets to that address: a retry loop opens a new one each time) and
  // connects that failed (SYN_SENT -> CLOSE).
  void add_tcp_evidence(Finding& f, int pid, const std::string& remote) {
    size_t retransmits = 0, failed = 0;
    int state = 0;
    for (const auto& e : live_->tcp) {
      if (e.tgid != pid || e.remote != remote) continue;
      if (e.type == HT_EV_TCP_RETRANSMIT) {
        ++retransmits;
        state = e.new_state;
      } else if (e.type == HT_EV_TCP_STATE && e.old_state == 2 /* SYN_SENT */ &&
                 e.new_state == 7 /* CLOSE */) {
        ++failed;
      }
    }
    if (retransmits) {
      const char* why = state == 2   ? ": the SYN is never answered"
                        : state == 1 ? ": sent data is never acknowledged"
                                     : "";
      f.evidence.push_back(
          fmt::format("live: {} TCP retransmit{} to {} in the {:.1f} s window (last in {}{})", retransmits,
                      retransmits == 1 ? "" : "s", remote, live_->duration_s, tcp_state_name(state), why));
    }
    if (failed)
      f.evidence.push_back(
          fmt::format("live: {} connect{} to {} failed (SYN_SENT -> CLOSE) in the {:.1f} s window", failed,
                      failed == 1 ? "" : "s", remote, live_->duration_s));
  }

  void network_waits() {
    for (const auto& [tid, w] : g().threads) {
      if (w.activity != Activity::Blocked && w.activity != Activity::TimedWait) continue;
      if (!in_tree(tid)) continue;
      for (const auto& id : w.objects) {
        const WaitObject& o = g().objects.at(id);
        if (o.kind != ObjectKind::TcpSocket && o.kind != ObjectKind::UdpSocket) continue;
        if (o.ready || o.remote.empty() || o.remote.find(":0") == o.remote.size() - 2) continue;
        if (w.blocked_s && *w.blocked_s < opt_.stall_after_s) continue;
        Finding f;
        f.kind = "network-wait";
        f.rank = 30;
        f.confidence = Confidence::Certain;
        add_unique(f.tids, tid);
        add_unique(f.pids, w.pid);
        bool main_waits = reachable_from_main(tid);
        f.severity = main_waits && w.blocked_s ? Severity::Critical : Severity::Warning;
        std::vector<int> peer_pids;
        for (int pid : o.holder_pids) add_unique(peer_pids, pid);
        f.details["local"] = o.local;
        f.details["remote"] = o.remote;
        f.details["peer_pids"] = peer_pids;
        f.details["blocked_s"] = w.blocked_s ? nlohmann::json(*w.blocked_s) : nlohmann::json(nullptr);
        f.details["remote_on_this_host"] = !o.external;
        std::string peer_text;
        if (!peer_pids.empty()) {
          std::vector<std::string> parts;
          for (int pid : peer_pids) {
            const ThreadWait* pw = wait_of(pid);
            parts.push_back(fmt::format("{}{}", thread_label(pid), pw ? ", which " + pw->summary : ""));
          }
          peer_text = fmt::format("; the other end is held by {}", fmt::join(parts, "; "));
        } else if (o.external) {
          peer_text = "; the other end is not on this host";
        }
        f.summary = fmt::format("{} has been waiting on the network {} ({} -> {}){}", thread_label(tid),
                                for_duration(w.blocked_s), o.local, o.remote, peer_text);
        add_thread_evidence(f, tid);
        for (int pid : peer_pids) add_thread_evidence(f, pid);
        for (const auto& n : o.notes) f.evidence.push_back(n);
        if (live_) add_tcp_evidence(f, w.pid, o.remote);
        if (main_waits) add_main_chain(f, tid, id);
        f.advice = {
            "Give network calls a timeout (socket.settimeout, requests.get(..., timeout=...), "
            "socket.setdefaulttimeout) so a silent server fails the step instead of hanging it.",
            "Download datasets and weights before training starts (and cache them); check proxy and "
            "firewall settings on this node.",
            "For torch.distributed/gloo: pass timeout= to init_process_group and set "
            "TORCH_DISTRIBUTED_DEBUG=DETAIL (NCCL_DEBUG=INFO for NCCL) to see which rank is missing.",
        };
        explained_objects_.insert(id);
        d_.findings.push_back(std::move(f));
      }
    }
  }

  // ---- shm-exhausted ------------------------------------------------------------------
  void shm_exhausted() {
    const ShmInfo& shm = snap_.shm;
    if (!shm.available || shm.size_bytes == 0) return;
    double ratio = static_cast<double>(shm.used_bytes) / static_cast<double>(shm.size_bytes);
    if (ratio < opt_.shm_full_ratio) return;
    Finding f;
    f.kind = "shm-exhausted";
    f.severity = Severity::Critical;
    f.confidence = Confidence::Certain;
    f.rank = 8;
    f.summary = fmt::format(
        "{} is {:.0f}% full ({} of {}): DataLoader workers cannot hand over tensors "
        "(they block or die of SIGBUS)",
        shm.mount_path.empty() ? "/dev/shm" : shm.mount_path, ratio * 100, format_bytes(shm.used_bytes),
        format_bytes(shm.size_bytes));
    nlohmann::json segments = nlohmann::json::array();
    for (const auto& seg : shm.largest) {
      segments.push_back({{"name", seg.name}, {"size_bytes", seg.allocated_bytes}, {"pids", seg.mapped_by}});
      for (int pid : seg.mapped_by) add_unique(f.pids, pid);
      f.evidence.push_back(fmt::format("{} {} held by {}", seg.name, format_bytes(seg.allocated_bytes),
                                       seg.mapped_by.empty()
                                           ? std::string("nobody (leaked)")
                                           : fmt::format("pids {}", fmt::join(seg.mapped_by, ", "))));
    }
    if (shm.unlinked_mapped_bytes)
      f.evidence.push_back(fmt::format("{} in unlinked segments still mapped (torch shared tensors)",
                                       format_bytes(shm.unlinked_mapped_bytes)));
    f.details["size_bytes"] = shm.size_bytes;
    f.details["used_bytes"] = shm.used_bytes;
    f.details["segments"] = segments;
    f.advice = {
        "Give the container a bigger /dev/shm: docker run --shm-size=16g (Kubernetes: an emptyDir with "
        "medium: Memory mounted at /dev/shm).",
        "Or torch.multiprocessing.set_sharing_strategy('file_system'), fewer num_workers / a smaller "
        "prefetch_factor, and don't keep whole batches alive longer than needed.",
    };
    d_.findings.push_back(std::move(f));
  }

  // ---- process-killed ---------------------------------------------------------------
  std::string process_label(int pid, const std::string& comm) const {
    if (snap_.process(pid)) return thread_label(pid);
    std::string role = pid == snap_.target_pid ? "main" : "process";
    if (const ProcessInfo* p = snap_.process(snap_.target_pid)) {
      for (int c : p->children)
        if (c == pid) role = "worker";
    }
    if (live_) {
      for (const auto& [fpid, m] : live_->meta)
        if (fpid == pid && role == "process") role = "traced process";
    }
    return fmt::format("{} {} ({})", role, pid, comm);
  }

  void process_killed() {
    for (const auto& d : live_->deaths) {
      if (d.signal == 0 && !d.oom_victim) continue;
      Finding f;
      f.kind = "process-killed";
      f.severity = Severity::Critical;
      f.confidence = Confidence::Certain;
      f.rank = 3;
      add_unique(f.pids, d.pid);
      const ProcessMeta* meta = nullptr;
      if (auto it = live_->meta.find(d.pid); it != live_->meta.end()) meta = &it->second;
      std::string who = process_label(d.pid, d.comm);
      std::string cause;
      nlohmann::json details;
      details["pid"] = d.pid;
      details["signal"] = d.oom_victim && d.signal == 0 ? 9 : d.signal;
      details["sender_pid"] = nullptr;
      details["cgroup"] = nullptr;
      details["limit_bytes"] = nullptr;
      auto shm_usage = live_->shm_usage.find(d.pid);
      uint64_t shm_used =
          shm_usage != live_->shm_usage.end() ? shm_usage->second.first : snap_.shm.used_bytes;
      uint64_t shm_size =
          shm_usage != live_->shm_usage.end() ? shm_usage->second.second : snap_.shm.size_bytes;
      details["shm_used_bytes"] = shm_used;
      details["shm_size_bytes"] = shm_size;
      if (d.oom_victim) {
        cause = "oom-killer";
        std::string where = "the system";
        std::optional<uint64_t> limit;
        if (meta && meta->memory_limit_bytes) limit = meta->memory_limit_bytes;
        // The kernel's own figure, taken at the kill, when userspace had none.
        if (!limit && d.oom && d.oom->memcg_limit_bytes && d.oom->memcg_limit_bytes < (1ull << 60))
          limit = d.oom->memcg_limit_bytes;
        if (meta && !meta->memory_cgroup.empty()) {
          details["cgroup"] = meta->memory_cgroup;
          where = fmt::format("memory cgroup {}", meta->memory_cgroup);
        }
        if (limit) {
          details["limit_bytes"] = *limit;
          where += fmt::format(" (limit {})", format_bytes(*limit));
        }
        uint64_t rss_kb = d.oom ? d.oom->anon_rss_kb + d.oom->file_rss_kb + d.oom->shmem_rss_kb : 0;
        f.summary = fmt::format("{} was killed by the OOM killer in {}{}", who, where,
                                rss_kb ? fmt::format(" with {} resident", format_bytes(rss_kb << 10)) : "");
        if (d.oom)
          f.evidence.push_back(fmt::format("oom:mark_victim: anon {} file {} shmem {}, oom_score_adj {}",
                                           format_bytes(d.oom->anon_rss_kb << 10),
                                           format_bytes(d.oom->file_rss_kb << 10),
                                           format_bytes(d.oom->shmem_rss_kb << 10), d.oom->oom_score_adj));
        f.advice = {
            "Find what grows: keep losses as loss.item() (or loss.detach()), not the tensor with its "
            "autograd graph; "
            "don't accumulate outputs across steps.",
            "Fewer DataLoader workers / smaller prefetch_factor (each worker holds its own copy of the "
            "dataset "
            "state), or raise the memory limit of the job's cgroup/container.",
        };
      } else if (d.signal == 7 &&
                 (!d.shm_trouble.empty() ||
                  (shm_size && static_cast<double>(shm_used) / shm_size >= opt_.shm_full_ratio))) {
        cause = "sigbus-shm";
        f.summary = fmt::format("{} died of SIGBUS writing to a full /dev/shm ({} of {} used)", who,
                                format_bytes(shm_used), format_bytes(shm_size));
        for (const auto& t : d.shm_trouble)
          f.evidence.push_back(fmt::format("/dev/shm {} {}{} by tid {}", shm_op_name(t.shm_op),
                                           t.name.empty() ? "" : t.name + " ",
                                           t.addr ? fmt::format("at {:#x}", t.addr) : "", t.tid));
        f.advice = {
            "Give the container a bigger /dev/shm: docker run --shm-size=16g (Kubernetes: an emptyDir with "
            "medium: Memory at /dev/shm).",
            "Or torch.multiprocessing.set_sharing_strategy('file_system'), fewer num_workers / a smaller "
            "prefetch_factor, and don't keep batches alive longer than needed.",
        };
      } else {
        cause = "signal";
        std::string from;
        if (d.fatal_signal && d.fatal_signal->sender_tgid && d.fatal_signal->sender_tgid != d.pid) {
          details["sender_pid"] = d.fatal_signal->sender_tgid;
          from = fmt::format(" sent by {} ({})", d.fatal_signal->sender_tgid, d.fatal_signal->sender_comm);
        } else if (d.fatal_signal && d.fatal_signal->si_code == 0x80) {
          from = " raised by the kernel (a fault in the process itself)";
        }
        f.summary = fmt::format("{} was killed by signal {}{}", who, strsignal(d.signal), from);
        f.advice = {
            "Find out why the sender stopped it (its logs), or run the worker under a debugger / with "
            "faulthandler enabled to see where it faulted."};
      }
      details["cause"] = cause;
      if (meta && !meta->cmdline.empty()) f.evidence.push_back("command: " + meta->cmdline);
      if (d.fatal_signal)
        f.evidence.push_back(fmt::format("signal {} generated by {} ({}), si_code {}", d.fatal_signal->sig,
                                         d.fatal_signal->sender_tgid, d.fatal_signal->sender_comm,
                                         d.fatal_signal->si_code));
      f.details = details;
      d_.findings.push_back(std::move(f));
    }
  }

  // ---- memory-growth ------------------------------------------------------------------
  void memory_growth() {
    for (const auto& [pid, s] : live_->rss) {
      if (s.samples < 2 || s.last_bytes <= s.first_bytes) continue;
      uint64_t growth = s.last_bytes - s.first_bytes;
      if (growth < opt_.memory_growth_min_bytes ||
          growth < static_cast<uint64_t>(opt_.memory_growth_min_ratio * static_cast<double>(s.first_bytes)))
        continue;
      double secs = s.last_ts_ns > s.first_ts_ns ? (s.last_ts_ns - s.first_ts_ns) / 1e9 : 0;
      double rate = secs > 0 ? growth / secs : 0;
      Finding f;
      f.kind = "memory-growth";
      f.rank = 40;
      f.confidence = Confidence::Certain;
      f.severity = pid == snap_.target_pid ? Severity::Critical : Severity::Warning;
      add_unique(f.pids, pid);
      std::string who = process_label(pid, s.comm);
      f.summary = fmt::format("{} grew its resident memory by {} in {:.1f} s ({}/s, {} -> {})", who,
                              format_bytes(growth), secs, format_bytes(static_cast<uint64_t>(rate)),
                              format_bytes(s.first_bytes), format_bytes(s.last_bytes));
      const ProcessMeta* meta = nullptr;
      if (auto it = live_->meta.find(pid); it != live_->meta.end()) meta = &it->second;
      if (meta && meta->memory_limit_bytes && rate > 0 && *meta->memory_limit_bytes > s.last_bytes) {
        double left = (*meta->memory_limit_bytes - s.last_bytes) / rate;
        f.evidence.push_back(fmt::format("at this rate it reaches the cgroup limit of {} in {:.0f} s",
                                         format_bytes(*meta->memory_limit_bytes), left));
      }
      f.evidence.push_back(fmt::format("{} RSS samples", s.samples));
      f.details = {{"pid", pid},
                   {"rss_start_bytes", s.first_bytes},
                   {"rss_end_bytes", s.last_bytes},
                   {"growth_bytes_per_s", rate}};
      f.advice = {
          "A training loop that keeps tensors with their autograd graph grows without bound: log "
          "loss.item() (or loss.detach().cpu()), not loss; don't append outputs/losses to lists across "
          "steps.",
          "Check for caches keyed by batch, and for DataLoader workers copying a large dataset object "
          "(copy-on-read of Python objects).",
      };
      d_.findings.push_back(std::move(f));
    }
  }

  // ---- gpu-wait, gpu-starved, collective-wait (gpu_rules.cpp, collective_rules.cpp) ------
  // What `tid` waits on down to its cause: the part of a host finding's chain
  // from `tid` on, else `tid`'s own wait and who could end it.
  std::vector<ChainStep> chain_from(int tid) const {
    std::string label = thread_label(tid);
    for (const auto& f : d_.findings)
      for (size_t i = 0; i < f.chain.size(); ++i)
        if (f.chain[i].from == label) return {f.chain.begin() + static_cast<long>(i), f.chain.end()};
    std::vector<ChainStep> steps;
    const ThreadWait* w = wait_of(tid);
    if (!w) return steps;
    for (const auto& id : w->objects) {
      const WaitObject& o = g().objects.at(id);
      steps.push_back({label, "waits on", o.label});
      if (!o.releasers.empty())
        steps.push_back({o.label, "can be released by", releaser_label(o, o.releasers[0])});
      for (const auto& note : o.notes) steps.push_back({o.label, "note", note});
      break;
    }
    if (steps.empty() && !w->summary.empty()) steps.push_back({label, "waits:", w->summary});
    return steps;
  }

  void gpu_and_collectives() {
    RuleContext ctx{snap_,
                    opt_,
                    live_,
                    g(),
                    [this](int tid) { return thread_label(tid); },
                    [this](int tid) { return strict_.count(tid) > 0; },
                    [this](int tid) { return chain_from(tid); },
                    d_.findings};
    std::vector<Finding> found = collective_findings(ctx);
    for (auto& f : gpu_findings(ctx)) found.push_back(std::move(f));
    for (auto& f : found) d_.findings.push_back(std::move(f));
  }

  // What the live window saw of the stuck threads: who last woke them, and
  // since when nothing has.
  void add_live_evidence() {
    for (auto& f : d_.findings) {
      if (f.kind == "process-killed" || f.kind == "memory-growth") continue;
      std::vector<int> tids = f.tids;
      if (std::find(tids.begin(), tids.end(), snap_.target_pid) == tids.end() && !f.chain.empty())
        tids.insert(tids.begin(), snap_.target_pid);
      size_t shown = 0;
      for (int tid : tids) {
        if (shown++ >= 4) break;
        auto it = live_->last_waker.find(tid);
        if (it != live_->last_waker.end()) {
          double ago = live_->end_ns > it->second.ts_ns ? (live_->end_ns - it->second.ts_ns) / 1e9 : 0;
          f.evidence.push_back(
              fmt::format("live: {} was last woken by {} ({}, tid {}) {:.1f} s before the end of "
                          "the {:.1f} s window",
                          thread_label(tid), it->second.waker_tgid, it->second.waker_comm,
                          it->second.waker_tid, ago, live_->duration_s));
        } else {
          f.evidence.push_back(fmt::format("live: nothing woke {} during the {:.1f} s window",
                                           thread_label(tid), live_->duration_s));
        }
      }
      break;  // the verdict's finding is enough
    }
  }

  // ---- when progress stopped ------------------------------------------------------------
  // Whether the live window could have seen this thread being woken: without
  // the sched concern, "not woken" says nothing.
  bool wakeups_traced() const {
    if (live_->hooks.empty()) return true;  // hook list unknown (a saved observation): trust the events
    return std::any_of(live_->hooks.begin(), live_->hooks.end(),
                       [](const LiveHook& h) { return h.concern == "sched" && h.active; });
  }

  // The last moment the live window saw `tid` run: a wakeup, or the end of a
  // wait it came back from. CLOCK_MONOTONIC ns, 0 when none was seen.
  uint64_t last_seen_running_ns(int tid) const {
    uint64_t last = 0;
    if (auto it = live_->last_waker.find(tid); it != live_->last_waker.end()) last = it->second.ts_ns;
    if (auto it = live_->blocked.find(tid); it != live_->blocked.end() && !it->second.empty())
      last = std::max(last, it->second.back().end_ns);
    return last;
  }

  void progress_stopped() {
    const Finding& top = d_.findings.front();
    std::vector<int> stuck = top.chain_tids;
    for (int t : top.tids) add_unique(stuck, t);

    // One time axis, in seconds relative to the instant the blocked times were
    // read (negative = earlier). Older snapshots have no clock pair: live events
    // are then placed against the end of the window, which the report's
    // snapshot follows within a second.
    const double ref_unix = snap_.sampled_at_unix > 0 ? snap_.sampled_at_unix : snap_.taken_at_unix;
    uint64_t ref_mono = snap_.sampled_at_monotonic_ns;
    if (!ref_mono && live_) ref_mono = live_->end_ns;
    auto relative = [&](uint64_t mono_ns) {
      return (static_cast<double>(mono_ns) - static_cast<double>(ref_mono)) / 1e9;
    };
    auto vs_snapshot = [](double rel) {
      return rel <= 0 ? fmt::format("{:.1f} s before the snapshot", -rel)
                      : fmt::format("{:.1f} s after the snapshot", rel);
    };

    struct WaitStart {
      int tid = 0;
      double start = 0;  // relative to the reference instant
      bool timed = false, from_snapshot = false, from_live = false;
      bool start_from_live = false;  // a wakeup seen live set `start`
      std::string live_note;
    };
    std::vector<WaitStart> starts;
    for (int tid : stuck) {
      const ThreadWait* w = wait_of(tid);
      if (!w || (w->activity != Activity::Blocked && w->activity != Activity::TimedWait)) continue;
      WaitStart ws;
      ws.tid = tid;
      ws.timed = w->activity == Activity::TimedWait;
      if (w->blocked_s) {
        ws.start = -*w->blocked_s;
        ws.from_snapshot = true;
      }
      if (live_ && ref_mono) {
        const double window_start = relative(live_->start_ns);
        if (uint64_t ran = last_seen_running_ns(tid)) {
          double ran_at = relative(ran);
          const TraceEvent* waker = nullptr;
          if (auto it = live_->last_waker.find(tid); it != live_->last_waker.end()) waker = &it->second;
          std::string by = waker && waker->ts_ns == ran
                               ? (waker->waker_tgid ? fmt::format(" by {} ({}, tid {})", waker->waker_tgid,
                                                                  waker->waker_comm, waker->waker_tid)
                                                    : std::string(" from interrupt context"))
                               : std::string();
          // It ran after that moment, so its current wait cannot have begun
          // earlier; 50 ms absorbs the scheduler clock vs CLOCK_MONOTONIC.
          if (!ws.from_snapshot || ran_at > ws.start + 0.05) {
            ws.start = ran_at;
            ws.start_from_live = true;
            ws.live_note = ws.from_snapshot ? fmt::format(
                                                  "live: last woken{} {}, later than its blocked time "
                                                  "says: its wait began then",
                                                  by, vs_snapshot(ran_at))
                                            : fmt::format(
                                                  "live: last woken{} {} (no blocked time: its wait "
                                                  "began then or later)",
                                                  by, vs_snapshot(ran_at));
          } else {
            ws.live_note = fmt::format("live: last woken{} {}, then blocked", by, vs_snapshot(ran_at));
          }
          ws.from_live = true;
        } else if (ws.from_snapshot && wakeups_traced()) {
          ws.live_note =
              ws.start <= window_start + 0.05
                  ? fmt::format("live: not woken during the {:.1f} s window (blocked since before it)",
                                live_->duration_s)
                  : fmt::format("live: not woken during the {:.1f} s window", live_->duration_s);
          ws.from_live = true;
        }
      }
      if (ws.from_snapshot || ws.start_from_live) starts.push_back(std::move(ws));
    }
    if (starts.empty()) return;

    // A timed wait that returns and waits again (DataLoader polls its queue
    // every 5 s) restarts its clock without any progress: untimed waits say
    // when the job stopped; timed ones only bound it.
    bool any_untimed = std::any_of(starts.begin(), starts.end(), [](const WaitStart& s) { return !s.timed; });
    const WaitStart* last = nullptr;
    int timed_skipped = 0;
    for (const auto& s : starts) {
      if (any_untimed && s.timed) {
        ++timed_skipped;
        continue;
      }
      if (!last || s.start > last->start) last = &s;
    }

    // "Ago" counts back from the last thing observed: the snapshot, or the end
    // of a live window that came after it.
    const double observed_until = live_ && ref_mono ? std::max(0.0, relative(live_->end_ns)) : 0.0;
    ProgressStop ps;
    ps.ago_s = std::max(0.0, observed_until - last->start);
    ps.unix_time = ref_unix + last->start;
    if (ref_mono)
      ps.monotonic_ns =
          static_cast<uint64_t>(std::max(0.0, static_cast<double>(ref_mono) + last->start * 1e9));
    ps.basis = !last->from_snapshot ? "live" : last->from_live ? "snapshot+live" : "snapshot";
    ps.at_the_latest = !any_untimed;
    ps.tid = last->tid;
    ps.pid = pid_of(last->tid);
    ps.thread = thread_label(last->tid);
    if (const ProcessInfo* p = snap_.process(ps.pid))
      for (const auto& t : p->threads)
        if (t.tid == last->tid) ps.comm = t.comm;
    ps.waits_on = wait_of(last->tid)->summary;
    for (const auto& s : starts) ps.tids.push_back(s.tid);
    ps.timed_waits_not_counted = timed_skipped;
    ps.live_note = last->live_note;
    d_.progress_stopped = std::move(ps);
  }

  // ---- verdict --------------------------------------------------------------------------
  void finish() {
    std::stable_sort(d_.findings.begin(), d_.findings.end(), [](const Finding& a, const Finding& b) {
      if (a.severity != b.severity) return a.severity > b.severity;
      if (a.confidence != b.confidence) return a.confidence > b.confidence;
      return a.rank < b.rank;
    });
    for (size_t i = 0; i < d_.findings.size(); ++i) d_.findings[i].id = fmt::format("F{}", i + 1);
    if (live_) add_live_evidence();
    size_t threads = g().threads.size(), blocked = 0, timed = 0;
    for (const auto& [tid, w] : g().threads) {
      if (w.activity == Activity::Blocked) ++blocked;
      if (w.activity == Activity::TimedWait) ++timed;
    }
    if (!d_.findings.empty() && d_.findings.front().severity == Severity::Critical &&
        d_.findings.front().kind == "process-killed") {
      d_.verdict.status = "killed";
      d_.verdict.summary = fmt::format("KILLED ({}): {}", confidence_name(d_.findings.front().confidence),
                                       d_.findings.front().summary);
    } else if (!d_.findings.empty() && d_.findings.front().severity == Severity::Critical) {
      d_.verdict.status = "hang";
      d_.verdict.summary =
          fmt::format("HANG ({}, {}): {}", d_.findings.front().kind,
                      confidence_name(d_.findings.front().confidence), d_.findings.front().summary);
    } else if (!d_.findings.empty()) {
      d_.verdict.status = "suspect";
      d_.verdict.summary = fmt::format("no hang proven, but: {}", d_.findings.front().summary);
    } else {
      d_.verdict.status = "ok";
      d_.verdict.summary = fmt::format(
          "no hang found: {} threads in {} processes, {} blocked without timeout, {} in timed waits, none "
          "stuck in a wait that can never end",
          threads, snap_.processes.size(), blocked, timed);
    }
    if (d_.verdict.status == "hang" || d_.verdict.status == "suspect") progress_stopped();
  }
};

}  // namespace

Diagnosis diagnose(const Snapshot& snapshot, const AnalysisOptions& options, const LiveObservation* live) {
  return Analyzer(snapshot, options, live).run();
}

}  // namespace hangtrace
