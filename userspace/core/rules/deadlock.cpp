// Which threads can never move on (the knot of analysis.h's OR model), and
// deadlock-cycle: a set of them each waiting for another of the set.
#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <set>

#include "rules.h"

namespace hangtrace::rules {

namespace {

bool waits_for_gil(const WaitGraph& g, const ThreadWait& w) {
  return std::any_of(w.objects.begin(), w.objects.end(),
                     [&](const std::string& id) { return g.objects.at(id).kind == ObjectKind::Gil; });
}

// Whether one of the objects `w` waits on (any one ends it) is ready or
// outside the snapshot; a wait on nothing resolved may end too.
bool wait_can_end(const WaitGraph& g, const ThreadWait& w) {
  for (const auto& id : w.objects) {
    const WaitObject& o = g.objects.at(id);
    if (o.ready || o.external) return true;
  }
  return w.objects.empty();  // a wait we could not resolve: don't guess
}

// A thread that can move on by itself: running, on a timer, in I/O, woken
// after its wait was read, or waiting on something ready or outside the
// snapshot. With `timed_is_live`, a timed wait counts too (it may end by its
// timeout and do something else); without, only a timed wait that made
// progress between the samples does.
bool can_move_on(const WaitGraph& g, const ThreadWait& w, bool timed_is_live) {
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
      // A retry loop wakes at each timeout: only CPU or I/O tells it moves.
      if (timed_is_live || w.progressed) return true;
      return wait_can_end(g, w);
    case Activity::Blocked:
      // A wait with no timeout ends only when released (or interrupted): a
      // thread that ran after it was read is not in it for good -- the
      // wait read may have been one instant of a contended lock. A GIL
      // waiter wakes every switch interval by design: it waits on the
      // holder, woken or not.
      if (w.woke && !waits_for_gil(g, w)) return true;
      return wait_can_end(g, w);
  }
  return true;
}

// The threads of the graph, ascending, and their positions in that list.
struct Positions {
  std::vector<int> tids;  // ascending, as g.threads
  std::optional<size_t> of(int tid) const {
    auto it = std::lower_bound(tids.begin(), tids.end(), tid);
    if (it == tids.end() || *it != tid) return std::nullopt;  // not a thread of the graph
    return static_cast<size_t>(it - tids.begin());
  }
};

Positions positions(const WaitGraph& g) {
  Positions p;
  for (const auto& [tid, w] : g.threads) p.tids.push_back(tid);
  return p;
}

// The blocked threads no thread that can move on reaches through the
// releasers of what they wait on. Propagated over objects, not thread
// pairs: a thread that can move on frees every object it can release, and
// an object freed frees its waiters -- linear in the waits, where the pairs
// are n * n for a process's threads parked on their own private futexes.
std::set<int> deadlocked(const WaitGraph& g, const Positions& pos, bool timed_is_live) {
  const size_t n = pos.tids.size();
  std::map<int, std::vector<const WaitObject*>> by_tid;  // named releaser -> objects
  std::map<int, std::vector<std::pair<const WaitObject*, const ReleaserProcess*>>> by_pid;
  for (const auto& [id, o] : g.objects) {
    for (int r : o.releasers) by_tid[r].push_back(&o);
    for (const auto& rp : o.releaser_processes) by_pid[rp.pid].push_back({&o, &rp});
  }
  std::vector<char> can_progress(n, 0);
  std::vector<const ThreadWait*> waits;
  for (const auto& [tid, w] : g.threads) waits.push_back(&w);
  std::deque<size_t> queue;
  auto progress = [&](size_t v) {
    if (can_progress[v]) return;
    can_progress[v] = 1;
    queue.push_back(v);
  };
  std::set<const WaitObject*> freed;
  auto free_object = [&](const WaitObject* o) {
    if (!freed.insert(o).second) return;
    for (int t : o->waiters)
      if (auto v = pos.of(t)) progress(*v);
  };
  for (size_t v = 0; v < n; ++v)
    if (can_move_on(g, *waits[v], timed_is_live) && waits[v]->activity != Activity::Dead) progress(v);
  while (!queue.empty()) {
    const int r = pos.tids[queue.front()];
    queue.pop_front();
    if (auto it = by_tid.find(r); it != by_tid.end())
      for (const WaitObject* o : it->second) free_object(o);
    // An entry stands for the live threads of its process outside `except`.
    auto pid = g.tid_to_pid.find(r);
    if (pid == g.tid_to_pid.end()) continue;
    auto it = by_pid.find(pid->second);
    auto live = g.live_threads.find(pid->second);
    if (it == by_pid.end() || live == g.live_threads.end() ||
        !std::binary_search(live->second.begin(), live->second.end(), r))
      continue;
    // Entries that stay are those `r` is excepted from: each waits for
    // another thread, so the list shrinks by what is freed or by its waiters.
    auto& entries = it->second;
    size_t kept = 0;
    for (auto& entry : entries) {
      if (freed.count(entry.first)) continue;
      if (std::binary_search(entry.second->except.begin(), entry.second->except.end(), r))
        entries[kept++] = entry;
      else
        free_object(entry.first);
    }
    entries.resize(kept);
  }
  std::set<int> out;
  for (size_t v = 0; v < n; ++v)
    if ((waits[v]->activity == Activity::Blocked || waits[v]->activity == Activity::TimedWait) &&
        !can_progress[v])
      out.insert(pos.tids[v]);
  return out;
}

// Tarjan's strongly connected components of the dependency graph among
// `nodes`, without recursion (a chain of thousands of threads is a deep
// one): the components and their members in the order of the recursive form.
//
// The recursive form reads a node's dependencies in ascending order, visits
// the unvisited ones and lowers the node's `low` by the index of those on
// the stack. It is read here without listing them (a process's n parked
// threads depend on each other n * n times): the next child is the lowest
// unvisited dependency past the last one, found in the process's set of
// unvisited threads; and the stacked ones that matter are those stacked
// before the node (a later one has a higher index), which stay stacked
// while it is, so their lowest index is asked once, as the node finishes.
class Components {
 public:
  Components(const WaitGraph& g, const Positions& pos, const std::set<int>& nodes)
      : g_(g),
        pos_(pos),
        n_(pos.tids.size()),
        member_(n_, 0),
        index_(n_, -1),
        low_(n_, 0),
        on_stack_(n_, 0),
        pid_(n_, 0) {
    for (size_t v = 0; v < n_; ++v) {
      member_[v] = nodes.count(pos.tids[v]) ? 1 : 0;
      auto it = g.tid_to_pid.find(pos.tids[v]);
      pid_[v] = it == g.tid_to_pid.end() ? pos.tids[v] : it->second;
    }
    for (const auto& [pid, live] : g.live_threads)
      for (int tid : live)
        if (auto v = pos.of(tid); v && member_[*v]) unvisited_[pid].insert(unvisited_[pid].end(), *v);
  }

  std::vector<std::vector<int>> run() {
    for (size_t root = 0; root < n_; ++root) {
      if (!member_[root] || index_[root] >= 0) continue;
      visit(root);
      while (!work_.empty()) {
        Frame& f = work_.back();
        if (auto child = next_child(f)) {
          visit(*child);
          continue;
        }
        const size_t u = f.node;
        low_[u] = std::min(low_[u], lowest_stacked_before(f));
        for (const auto& e : f.entries) exhausted_.insert(e.rp);  // every thread it stands for is visited
        if (low_[u] == index_[u]) pop_component(u);
        work_.pop_back();
        if (!work_.empty()) low_[work_.back().node] = std::min(low_[work_.back().node], low_[u]);
      }
    }
    return std::move(sccs_);
  }

 private:
  struct Entry {
    const ReleaserProcess* rp = nullptr;
    std::optional<size_t> hint;  // the lowest candidate found so far: nothing lower past `after` is one
    bool done = false;
  };
  struct Named {
    const int *begin = nullptr, *at = nullptr, *end = nullptr;  // ascending; `at`: the next to read
  };
  struct Frame {
    size_t node = 0;
    std::optional<size_t> after;  // the last dependency read
    std::vector<Named> named;     // the objects' `releasers`
    std::vector<Entry> entries;
  };

  void visit(size_t v) {
    index_[v] = low_[v] = counter_++;
    stack_.push_back(v);
    on_stack_[v] = 1;
    unvisited_[pid_[v]].erase(v);
    stacked_[pid_[v]].insert({index_[v], v});
    Frame f;
    f.node = v;
    if (auto w = g_.threads.find(pos_.tids[v]); w != g_.threads.end())
      for (const auto& id : w->second.objects) {
        const WaitObject& o = g_.objects.at(id);
        const int* begin = o.releasers.data();
        if (!o.releasers.empty()) f.named.push_back({begin, begin, begin + o.releasers.size()});
        for (const auto& rp : o.releaser_processes) f.entries.push_back({&rp, std::nullopt, false});
      }
    work_.push_back(std::move(f));
  }

  bool excepted(const Entry& e, size_t v, size_t u) const {
    return v == u || std::binary_search(e.rp->except.begin(), e.rp->except.end(), pos_.tids[v]);
  }

  // The lowest member dependency of f's node past f.after that is not
  // visited yet; becomes f.after.
  std::optional<size_t> next_child(Frame& f) {
    std::optional<size_t> best;
    auto consider = [&](size_t v) {
      if (!best || v < *best) best = v;
    };
    for (auto& named : f.named) {
      for (; named.at != named.end; ++named.at) {
        auto v = pos_.of(*named.at);
        if (!v || (f.after && *v <= *f.after)) continue;
        if (*v == f.node || !member_[*v] || index_[*v] >= 0) continue;
        break;
      }
      if (named.at != named.end) consider(*pos_.of(*named.at));
    }
    for (auto& e : f.entries) {
      if (e.done || exhausted_.count(e.rp)) continue;
      if (e.hint && index_[*e.hint] < 0) {
        consider(*e.hint);
        continue;
      }
      const std::set<size_t>& unvisited = unvisited_[e.rp->pid];
      auto it = e.hint ? unvisited.upper_bound(*e.hint)
                       : (f.after ? unvisited.upper_bound(*f.after) : unvisited.begin());
      while (it != unvisited.end() && excepted(e, *it, f.node)) ++it;
      if (it == unvisited.end()) {
        e.done = true;
        continue;
      }
      e.hint = *it;
      consider(*it);
    }
    if (best) f.after = best;
    return best;
  }

  // The lowest index among f's node's dependencies on the stack below it.
  int lowest_stacked_before(const Frame& f) const {
    const size_t u = f.node;
    int lowest = index_[u];
    for (const auto& named : f.named)
      for (const int* at = named.begin; at != named.end; ++at)
        if (auto v = pos_.of(*at); v && on_stack_[*v]) lowest = std::min(lowest, index_[*v]);
    for (const auto& e : f.entries) {
      auto it = stacked_.find(e.rp->pid);
      if (it == stacked_.end()) continue;
      for (const auto& [index, v] : it->second) {
        if (index >= lowest) break;
        if (!excepted(e, v, u)) {
          lowest = index;
          break;
        }
      }
    }
    return lowest;
  }

  void pop_component(size_t u) {
    std::vector<int> comp;
    size_t w;
    do {
      w = stack_.back();
      stack_.pop_back();
      on_stack_[w] = 0;
      stacked_[pid_[w]].erase({index_[w], w});
      comp.push_back(pos_.tids[w]);
    } while (w != u);
    sccs_.push_back(std::move(comp));
  }

  const WaitGraph& g_;
  const Positions& pos_;
  const size_t n_;
  std::vector<char> member_;
  std::vector<int> index_, low_;
  std::vector<char> on_stack_;
  std::vector<int> pid_;
  std::map<int, std::set<size_t>> unvisited_;  // pid -> its live member threads not visited
  std::map<int, std::set<std::pair<int, size_t>>>
      stacked_;  // pid -> (index, node) of its threads on the stack
  std::set<const ReleaserProcess*> exhausted_;
  std::vector<size_t> stack_;
  std::vector<Frame> work_;  // the recursion's frames
  std::vector<std::vector<int>> sccs_;
  int counter_ = 0;
};

std::vector<std::vector<int>> strongly_connected(const WaitGraph& g, const Positions& pos,
                                                 const std::set<int>& nodes) {
  return Components(g, pos, nodes).run();
}

// BFS within `members` from start back to start; returns the hops of the
// cycle. Releasers in other processes are tried first so the drawn cycle
// shows the cross-process wait rather than a thread's own helper threads.
WaitPath shortest_cycle(const RuleContext& ctx, int start, const std::set<int>& members) {
  std::map<int, Hop> parent;
  std::deque<int> q{start};
  std::optional<Hop> closing;
  ReleaserWalk walk(ctx.graph, [&](int tid) { return members.count(tid) > 0; });
  walk.mark(start);
  while (!q.empty() && !closing) {
    int t = q.front();
    q.pop_front();
    const auto& objects = ctx.wait_of(t)->objects;
    for (const auto& id : objects)
      if (is_releaser(ctx.graph, ctx.object(id), start)) {
        closing = Hop{t, id};
        break;
      }
    if (closing) break;
    const int own = ctx.pid_of(t);
    for (bool other : {true, false})
      for (const auto& id : objects)
        for (int r : walk.expand(ctx.object(id), [&](int pid) { return (pid != own) == other; })) {
          parent[r] = {t, id};
          q.push_back(r);
        }
    for (const auto& id : objects) walk.expand(ctx.object(id));  // all reached now: not expanded again
  }
  WaitPath hops;
  if (!closing) return hops;
  hops.push_back({start, closing->via});
  for (int t = closing->tid; t != start; t = parent[t].tid) hops.push_back({t, parent[t].via});
  std::reverse(hops.begin(), hops.end());
  return hops;
}

// A component worth a finding: in the job, and a real cycle. One process
// holding both ends of its own pipe (multiprocessing queues) forms cycles
// that explain nothing; a cycle must cross processes, go through locks whose
// owners are known, or be a thread waiting on a lock it owns itself.
bool is_deadlock_cycle(const RuleContext& ctx, const std::vector<int>& comp) {
  if (std::none_of(comp.begin(), comp.end(), [&](int t) { return ctx.in_tree(t); })) return false;
  bool self_loop = false;
  if (comp.size() == 1) {
    for (const auto& id : ctx.wait_of(comp[0])->objects) {
      const WaitObject& o = ctx.object(id);
      if (o.owner_tid && *o.owner_tid == comp[0]) self_loop = true;
    }
    if (!self_loop) return false;
  }
  std::set<int> pids;
  for (int t : comp) pids.insert(ctx.pid_of(t));
  bool owner_edges_only = true;
  for (int t : comp)
    for (const auto& id : ctx.wait_of(t)->objects)
      if (!ctx.object(id).owner_tid) owner_edges_only = false;
  return pids.size() >= 2 || owner_edges_only || self_loop;
}

// The fix from the cycle's edges: a wait for a child to exit is broken by
// reading what the child writes (subprocess: communicate(); multiprocessing:
// get() before join()); a lock in the cycle by not holding it across the
// wait.
std::vector<std::string> cycle_advice(const RuleContext& ctx, const WaitPath& cycle, int start) {
  std::vector<std::string> out;
  bool has_lock = false;
  int waiter = start;
  for (const auto& [t, via] : cycle) {
    const WaitObject& o = ctx.object(via);
    if (o.kind == ObjectKind::Futex || o.kind == ObjectKind::FileLock) has_lock = true;
    if (o.kind == ObjectKind::Child) {
      const int child_pid = ctx.pid_of(t);
      const std::string role = job_role_text(ctx.snap, ctx.snap.process(child_pid));
      const std::string parent = ctx.thread_label(waiter), child = ctx.thread_label(child_pid);
      if (ctx.runs_python(waiter, "subprocess.py") || role == "subprocess") {
        out.push_back(fmt::format(
            "{} waits for {} to exit (Popen.wait()) while the child blocks writing to a pipe only the "
            "parent reads: use communicate() (it reads stdout/stderr while it waits), or send the "
            "child's output to a file or subprocess.DEVNULL instead of PIPE.",
            parent, child));
      } else if (ctx.runs_python(waiter, "multiprocessing/process.py", "join") ||
                 role == "multiprocessing child" || role == "DataLoader worker") {
        out.push_back(fmt::format(
            "{} joins {} (Process.join()) before reading what the child put on a multiprocessing Queue: "
            "a process that put items on a queue does not exit until its feeder thread has written them "
            "to the queue's pipe, and that pipe is full. get() every item before join() (\"joining "
            "processes that use queues\" in the multiprocessing docs), or join with a timeout.",
            parent, child));
      } else {
        out.push_back(
            fmt::format("{} waits for {} to exit while the child waits for it: read what the "
                        "child writes (or answer it) while waiting, and wait for its exit last.",
                        parent, child));
      }
    }
    waiter = t;
  }
  if (has_lock || out.empty())
    out.push_back(
        "Break the cycle: never hold a lock (multiprocessing.Lock, threading.Lock) while waiting for "
        "another process or thread that may need the same lock; release it before q.get()/next(loader).");
  out.push_back(
      "Give the waits a timeout so the job fails loudly instead of hanging (DataLoader(timeout=...), "
      "Queue.get(timeout=...), Popen.wait(timeout=...)).");
  return out;
}

}  // namespace

Knot find_knot(const WaitGraph& graph) {
  Knot k;
  const Positions pos = positions(graph);
  k.strict = deadlocked(graph, pos, true);
  k.lenient = deadlocked(graph, pos, false);
  k.sccs = strongly_connected(graph, pos, k.lenient);
  return k;
}

std::vector<Finding> deadlock_cycle_findings(const RuleContext& ctx) {
  std::vector<Finding> out;
  for (const auto& comp : ctx.knot.sccs) {
    if (!is_deadlock_cycle(ctx, comp)) continue;
    std::set<int> members(comp.begin(), comp.end());
    int start = members.count(ctx.snap.target_pid) ? ctx.snap.target_pid : *members.begin();
    WaitPath cycle = shortest_cycle(ctx, start, members);
    Finding f(FindingKind::DeadlockCycle);
    std::vector<int> cycle_tids;
    for (const auto& hop : cycle) cycle_tids.push_back(hop.tid);
    f.confidence = ctx.confidence_for(cycle_tids);
    std::vector<std::string> drawn;
    int prev = start;
    for (const auto& [t, via] : cycle) {
      const WaitObject& o = ctx.object(via);
      f.chain.push_back({ctx.thread_label(prev), "waits on", o.label});
      f.chain.push_back({o.label, "can be released by", ctx.releaser_label(o, t)});
      drawn.push_back(ctx.thread_label(prev));
      drawn.push_back(o.label);
      add_unique(f.tids, prev);
      add_unique(f.pids, ctx.pid_of(prev));
      add_unique(f.chain_tids, prev);
      prev = t;
    }
    drawn.push_back(ctx.thread_label(start));
    for (int t : comp) {
      add_unique(f.tids, t);
      add_unique(f.pids, ctx.pid_of(t));
    }
    f.details["cycle"] = drawn;
    f.details["threads_in_knot"] = comp.size();
    f.summary = fmt::format("deadlock: {}", fmt::join(drawn, " -> "));
    bool has_timed = false;
    for (int t : cycle_tids) {
      ctx.add_thread_evidence(f, t);
      if (ctx.wait_of(t)->activity == Activity::TimedWait) has_timed = true;
    }
    for (const auto& hop : cycle)
      for (const auto& n : ctx.object(hop.via).notes) f.evidence.push_back(n);
    if (has_timed)
      f.evidence.push_back(fmt::format(
          "some waits have timeouts, but no thread in the cycle used CPU or did I/O in {:.2f} s: a "
          "retry loop that goes back to the same wait",
          ctx.snap.sample_window_s));
    f.advice = cycle_advice(ctx, cycle, start);
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace hangtrace::rules
