// What every rule family (rules.h) reads: the snapshot and what was traced,
// the wait-for graph, which threads can never move on, the findings made so
// far, and the helpers findings are worded with (thread labels, wait chains,
// evidence lines). Internal to hangtrace_core.
#pragma once

#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hangtrace/analysis.h"

namespace hangtrace::rules {

// The threads that can never move on (deadlock.cpp): nothing that is running,
// sleeping on a timer or waiting on something outside can reach them through
// the releasers of what they wait on.
struct Knot {
  std::set<int> strict;   // timed waits count as able to move on
  std::set<int> lenient;  // timed waits that made no progress count as stuck (retry loops)
  // Strongly connected components of the dependency graph among `lenient`.
  std::vector<std::vector<int>> sccs;
};

// One hop of a wait chain: the thread reached, and the object it was reached
// through (the releaser of `via` is `tid`).
struct Hop {
  int tid = 0;
  std::string via;
};
using WaitPath = std::vector<Hop>;

struct RuleContext {
  const Snapshot& snap;
  const AnalysisOptions& opt;
  const LiveObservation* live;  // null: snapshot only
  const WaitGraph& graph;
  Knot knot;
  // The findings made so far, in the order of the rule list (diagnose.cpp).
  std::vector<Finding> findings;
  const StallProfile* profile = nullptr;  // live windows: the stall profile (rules/slow.cpp)

  // ---- lookups ------------------------------------------------------------------
  const ThreadWait* wait_of(int tid) const;
  const WaitObject& object(const std::string& id) const { return graph.objects.at(id); }
  int pid_of(int tid) const;
  // Peers (processes outside the job holding the other end of something) are
  // context for the graph; findings are about the job itself.
  bool in_tree(int tid) const;
  // Stuck for good: no thread that could end its wait can move on, timed
  // waits counted as able to.
  bool stuck(int tid) const { return knot.strict.count(tid) > 0; }
  // Certain when every thread is stuck for good, else probable.
  Confidence confidence_for(const std::vector<int>& tids) const;

  // ---- labels ---------------------------------------------------------------------
  // "main 212 (python)", "thread 215 (pt_autograd_0) of main 212"
  std::string thread_label(int tid) const;
  // The label of `tid`, and how many other threads could release `o` too.
  std::string releaser_label(const WaitObject& o, int tid) const;
  // A process that may have left the snapshot (it died while traced).
  std::string process_label(int pid, const std::string& comm) const;

  // ---- chains -----------------------------------------------------------------------
  // Shortest wait chain from `from` to `to`: thread -> object -> releaser
  // thread -> ...; `from` itself not included, empty when `to` is not reachable.
  WaitPath wait_path(int from, int to) const;
  std::vector<ChainStep> chain_steps(int from, const WaitPath& path) const;
  bool reachable_from_main(int tid) const;
  // `pid` is a fork()ed copy of its parent (same executable and command line,
  // as DataLoader workers are), not a process that exec'd or spawned.
  bool is_fork_child(int pid) const;
  // `tid`'s Python stack has a frame in a file ending `file`
  // ("subprocess.py"), of `function` when given ("wait" matches 3.11's
  // qualified "Popen.wait" too): which library call a wait is inside.
  bool runs_python(int tid, std::string_view file, std::string_view function = {}) const;
  // The chain from the target's main thread to `cause_tid` (when it waits on
  // it), then `cause_tid`'s wait on `cause_object` (when given).
  void add_main_chain(Finding& f, int cause_tid, const std::string& cause_object) const;
  // What `tid` waits on down to its cause: the part of a finding's chain from
  // `tid` on, else its own wait and who could end it.
  std::vector<ChainStep> chain_from(int tid) const;

  // ---- evidence ---------------------------------------------------------------------
  // "<thread> blocked in <syscall> for 12.3 s; kernel: a <- b <- c <- d"
  void add_thread_evidence(Finding& f, int tid) const;
};

void add_unique(std::vector<int>& v, int x);

}  // namespace hangtrace::rules
