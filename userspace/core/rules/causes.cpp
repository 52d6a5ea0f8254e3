// Findings grouped by cause: a finding whose threads wait, through the
// wait-for graph, on the threads of another finding is explained by it (the
// peer rank's five socket waits by the rank that is stopped, the main
// thread's wait for a batch by the worker stuck on a mount). The root of
// each such chain leads its group, the findings it explains follow it, and
// the first root is the verdict: the cause at the far end of the chain, not
// the first wait on the way to it.
#include <algorithm>
#include <deque>
#include <set>

#include "rules.h"

namespace hangtrace::rules {

namespace {

// More findings than this are grouped only among the first ones: the
// grouping is one walk of the graph per finding.
constexpr size_t kMaxGroupedFindings = 64;

// The threads `f`'s waits reach: every releaser along the wait-for graph
// from its threads, and what it waits for outside the graph (a
// collective's absent ranks), the finding's own threads aside. One walk per
// finding, not per pair: the releasers of a process's private locks are all
// its threads, so a walk can cover a large part of a big job's graph.
std::set<int> reached_by(const RuleContext& ctx, const Finding& f) {
  ReleaserWalk walk(ctx.graph);
  std::deque<int> queue;
  for (int t : f.tids)
    if (!walk.reached(t)) {
      walk.mark(t);
      queue.push_back(t);
    }
  std::set<int> reached(f.waits_for_tids.begin(), f.waits_for_tids.end());
  // The finding's own threads are marked reached from the start: meets()
  // never counts them. The walk expands each object once.
  while (!queue.empty()) {
    const int t = queue.front();
    queue.pop_front();
    const ThreadWait* w = ctx.wait_of(t);
    if (!w) continue;
    for (const auto& id : w->objects) {
      for (int r : walk.expand(ctx.object(id))) {
        reached.insert(r);
        queue.push_back(r);
      }
    }
  }
  return reached;
}

// `reached` holds a thread of `target` that is not also one of `source`'s.
bool meets(const std::set<int>& reached, const Finding& source, const Finding& target) {
  return std::any_of(target.tids.begin(), target.tids.end(), [&](int t) {
    return reached.count(t) > 0 && std::find(source.tids.begin(), source.tids.end(), t) == source.tids.end();
  });
}

// `outer` names every thread of `inner` and more: inner is one wait inside
// outer's knot (a pipe nobody in a starved pool will write, the GIL
// holder's own read), and outer the diagnosis that explains it.
bool contains(const Finding& outer, const Finding& inner) {
  if (inner.tids.empty() || outer.tids.size() <= inner.tids.size()) return false;
  return std::all_of(inner.tids.begin(), inner.tids.end(), [&](int t) {
    return std::find(outer.tids.begin(), outer.tids.end(), t) != outer.tids.end();
  });
}

}  // namespace

void group_by_cause(const RuleContext& ctx, std::vector<Finding>& findings) {
  const size_t n = std::min(findings.size(), kMaxGroupedFindings);
  // b explains a when b is at least as severe (a warning explains no
  // critical) and either contains a, or a's waits lead to b's threads and
  // b's do not lead back to a's.
  std::vector<std::vector<char>> reaches(n, std::vector<char>(n, 0));
  for (size_t a = 0; a < n; ++a) {
    const std::set<int> reached = reached_by(ctx, findings[a]);
    for (size_t b = 0; b < n; ++b)
      if (a != b) reaches[a][b] = meets(reached, findings[a], findings[b]);
  }
  auto explains = [&](size_t b, size_t a) {
    if (findings[b].severity < findings[a].severity) return false;
    if (contains(findings[b], findings[a])) return true;
    return !contains(findings[a], findings[b]) && reaches[a][b] && !reaches[b][a];
  };
  // Each finding's root: follow the first explainer (in report order) while
  // there is one; a loop of explanations leaves each of its findings a root.
  std::vector<size_t> root(n);
  for (size_t a = 0; a < n; ++a) {
    size_t at = a;
    std::set<size_t> path{a};
    bool loop = false;
    for (;;) {
      size_t next = n;
      for (size_t b = 0; b < n && next == n; ++b)
        if (explains(b, at)) next = b;
      if (next == n) break;
      if (!path.insert(next).second) {
        loop = true;
        break;
      }
      at = next;
    }
    root[a] = loop ? a : at;
  }
  // Roots in report order, each followed by what it explains.
  std::vector<size_t> order;
  for (size_t r = 0; r < n; ++r) {
    if (root[r] != r) continue;
    order.push_back(r);
    for (size_t a = 0; a < n; ++a)
      if (a != r && root[a] == r) order.push_back(a);
  }
  std::vector<Finding> grouped;
  grouped.reserve(findings.size());
  for (size_t i : order) grouped.push_back(std::move(findings[i]));
  for (size_t i = n; i < findings.size(); ++i) grouped.push_back(std::move(findings[i]));
  findings = std::move(grouped);
  number_findings(findings);
  // caused_by: the group root's id, now that ids follow the new order.
  std::string root_id;
  for (size_t i = 0; i < order.size(); ++i) {
    const size_t was = order[i];
    if (root[was] == was)
      root_id = findings[i].id;
    else
      findings[i].caused_by = root_id;
  }
}

}  // namespace hangtrace::rules
