// Which threads can never move on (the knot of analysis.h's OR model), and
// deadlock-cycle: a set of them each waiting for another of the set.
#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <optional>

#include "rules.h"

namespace hangtrace::rules {

namespace {

// A thread that can move on by itself: running, on a timer, in I/O, or
// waiting on something ready or outside the snapshot. With `timed_is_live`,
// a timed wait counts too (it may end by its timeout and do something else);
// without, only a timed wait that made progress between the samples does.
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
      if (timed_is_live || w.progressed) return true;
      [[fallthrough]];
    case Activity::Blocked:
      for (const auto& id : w.objects) {
        const WaitObject& o = g.objects.at(id);
        if (o.ready || o.external) return true;
      }
      return w.objects.empty();  // a wait we could not resolve: don't guess
  }
  return true;
}

// The blocked threads no thread that can move on reaches through the
// releasers of what they wait on.
std::set<int> deadlocked(const WaitGraph& g, bool timed_is_live) {
  std::map<int, std::vector<int>> dependents;  // releaser -> threads it could free
  std::deque<int> queue;
  std::set<int> can_progress;
  for (const auto& [tid, w] : g.threads) {
    for (int r : g.depends_on(tid)) dependents[r].push_back(tid);
    if (can_move_on(g, w, timed_is_live) && w.activity != Activity::Dead) {
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
  for (const auto& [tid, w] : g.threads)
    if ((w.activity == Activity::Blocked || w.activity == Activity::TimedWait) && !can_progress.count(tid))
      out.insert(tid);
  return out;
}

// Tarjan's strongly connected components of the dependency graph among `nodes`.
std::vector<std::vector<int>> strongly_connected(const WaitGraph& g, const std::set<int>& nodes) {
  std::vector<std::vector<int>> sccs;
  std::map<int, int> index, low;
  std::set<int> on_stack;
  std::vector<int> stack;
  int counter = 0;
  std::function<void(int)> strong = [&](int v) {
    index[v] = low[v] = counter++;
    stack.push_back(v);
    on_stack.insert(v);
    for (int w : g.depends_on(v)) {
      if (!nodes.count(w)) continue;
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
  return sccs;
}

// BFS within `members` from start back to start; returns the hops of the
// cycle. Releasers in other processes are tried first so the drawn cycle
// shows the cross-process wait rather than a thread's own helper threads.
WaitPath shortest_cycle(const RuleContext& ctx, int start, const std::set<int>& members) {
  std::map<int, Hop> parent;
  std::deque<int> q{start};
  std::optional<Hop> closing;
  std::set<int> visited{start};
  while (!q.empty() && !closing) {
    int t = q.front();
    q.pop_front();
    std::vector<Hop> next;
    for (const auto& id : ctx.wait_of(t)->objects)
      for (int r : ctx.object(id).releasers)
        if (members.count(r)) next.push_back({r, id});
    std::stable_sort(next.begin(), next.end(), [&](const Hop& a, const Hop& b) {
      return (ctx.pid_of(a.tid) != ctx.pid_of(t)) > (ctx.pid_of(b.tid) != ctx.pid_of(t));
    });
    for (auto& [r, id] : next) {
      if (r == start) {
        closing = Hop{t, id};
        break;
      }
      if (visited.insert(r).second) {
        parent[r] = {t, id};
        q.push_back(r);
      }
    }
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

}  // namespace

Knot find_knot(const WaitGraph& graph) {
  Knot k;
  k.strict = deadlocked(graph, true);
  k.lenient = deadlocked(graph, false);
  k.sccs = strongly_connected(graph, k.lenient);
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
    f.advice = {
        "Break the cycle: never hold a lock (multiprocessing.Lock, threading.Lock) while waiting for "
        "another process or thread that may need the same lock; release it before q.get()/next(loader).",
        "Give the waits a timeout so the job fails loudly instead of hanging (DataLoader(timeout=...), "
        "Queue.get(timeout=...)).",
    };
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace hangtrace::rules
