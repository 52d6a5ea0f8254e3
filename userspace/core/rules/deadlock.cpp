// Which threads can never move on (the knot of analysis.h's OR model), and
// deadlock-cycle: a set of them each waiting for another of the set.
#include <fmt/format.h>

#include <algorithm>
#include <deque>
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

// The dependency graph once, on positions in the ascending list of threads:
// the releasers of a private futex are every thread of its process, so a
// process's n parked threads are n * n dependencies, and depends_on (a set
// per call) for each of the three passes below was most of a diagnosis.
struct Dependencies {
  std::vector<int> tids;                // ascending, as g.threads
  std::vector<std::vector<int>> edges;  // position -> the positions it depends on, ascending
};

Dependencies dependencies(const WaitGraph& g) {
  Dependencies d;
  for (const auto& [tid, w] : g.threads) d.tids.push_back(tid);
  d.edges.resize(d.tids.size());
  for (size_t v = 0; v < d.tids.size(); ++v) {
    for (int r : g.depends_on(d.tids[v])) {
      auto it = std::lower_bound(d.tids.begin(), d.tids.end(), r);
      // A releaser that is not a thread of the graph frees nobody.
      if (it != d.tids.end() && *it == r) d.edges[v].push_back(static_cast<int>(it - d.tids.begin()));
    }
  }
  return d;
}

// The blocked threads no thread that can move on reaches through the
// releasers of what they wait on.
std::set<int> deadlocked(const WaitGraph& g, const Dependencies& deps, bool timed_is_live) {
  const size_t n = deps.tids.size();
  std::vector<std::vector<int>> dependents(n);  // releaser -> threads it could free
  for (size_t v = 0; v < n; ++v)
    for (int r : deps.edges[v]) dependents[static_cast<size_t>(r)].push_back(static_cast<int>(v));
  std::deque<int> queue;
  std::vector<char> can_progress(n, 0);
  std::vector<const ThreadWait*> waits;
  for (const auto& [tid, w] : g.threads) waits.push_back(&w);
  for (size_t v = 0; v < n; ++v) {
    if (can_move_on(g, *waits[v], timed_is_live) && waits[v]->activity != Activity::Dead) {
      can_progress[v] = 1;
      queue.push_back(static_cast<int>(v));
    }
  }
  while (!queue.empty()) {
    int r = queue.front();
    queue.pop_front();
    for (int t : dependents[static_cast<size_t>(r)])
      if (!can_progress[static_cast<size_t>(t)]) {
        can_progress[static_cast<size_t>(t)] = 1;
        queue.push_back(t);
      }
  }
  std::set<int> out;
  for (size_t v = 0; v < n; ++v)
    if ((waits[v]->activity == Activity::Blocked || waits[v]->activity == Activity::TimedWait) &&
        !can_progress[v])
      out.insert(deps.tids[v]);
  return out;
}

// Tarjan's strongly connected components of the dependency graph among
// `nodes`, without recursion (a chain of thousands of threads is a deep
// one): the components and their members in the order of the recursive form.
std::vector<std::vector<int>> strongly_connected(const Dependencies& deps, const std::set<int>& nodes) {
  const size_t n = deps.tids.size();
  std::vector<char> member(n, 0);
  for (size_t v = 0; v < n; ++v) member[v] = nodes.count(deps.tids[v]) ? 1 : 0;
  std::vector<std::vector<int>> sccs;
  std::vector<int> index(n, -1), low(n, 0);
  std::vector<char> on_stack(n, 0);
  std::vector<int> stack;
  std::vector<std::pair<int, size_t>> work;  // (node, next edge): the recursion's frames
  int counter = 0;
  auto visit = [&](int v) {
    index[static_cast<size_t>(v)] = low[static_cast<size_t>(v)] = counter++;
    stack.push_back(v);
    on_stack[static_cast<size_t>(v)] = 1;
    work.emplace_back(v, 0);
  };
  for (size_t root = 0; root < n; ++root) {
    if (!member[root] || index[root] >= 0) continue;
    visit(static_cast<int>(root));
    while (!work.empty()) {
      const int u = work.back().first;
      const size_t i = work.back().second;
      const auto& out = deps.edges[static_cast<size_t>(u)];
      if (i < out.size()) {
        ++work.back().second;
        const int w = out[i];
        if (!member[static_cast<size_t>(w)]) continue;
        if (index[static_cast<size_t>(w)] < 0)
          visit(w);
        else if (on_stack[static_cast<size_t>(w)])
          low[static_cast<size_t>(u)] = std::min(low[static_cast<size_t>(u)], index[static_cast<size_t>(w)]);
        continue;
      }
      if (low[static_cast<size_t>(u)] == index[static_cast<size_t>(u)]) {
        std::vector<int> comp;
        int w;
        do {
          w = stack.back();
          stack.pop_back();
          on_stack[static_cast<size_t>(w)] = 0;
          comp.push_back(deps.tids[static_cast<size_t>(w)]);
        } while (w != u);
        sccs.push_back(std::move(comp));
      }
      work.pop_back();
      if (!work.empty()) {
        const size_t parent = static_cast<size_t>(work.back().first);
        low[parent] = std::min(low[parent], low[static_cast<size_t>(u)]);
      }
    }
  }
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
  const Dependencies deps = dependencies(graph);
  k.strict = deadlocked(graph, deps, true);
  k.lenient = deadlocked(graph, deps, false);
  k.sccs = strongly_connected(deps, k.lenient);
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
