// asyncio: waits the threads' stacks do not show. A process whose threads run
// an event loop (CPython 3.11+, its tasks read from outside:
// collect/python_asyncio.cpp) can stop with every thread idle in the loop's
// epoll_wait while its tasks wait on each other:
//   asyncio-cycle          tasks that await each other, directly or through
//                          a gather/TaskGroup future: none can ever finish;
//   asyncio-orphan-future  a task awaits a future nothing else refers to
//                          (every reference to it is the task's own: its
//                          fut_waiter, the future iterator, its frames'
//                          slots), so nothing can ever set its result;
//   asyncio-loop-blocked   the loop's thread is blocked in a synchronous call
//                          inside a task past --stall-after, so no other task
//                          of the loop runs.
// The await graph has an edge from each task to what its innermost
// coroutine awaits, and from X to C for every task C that lists X in its
// awaited_by (X waits for C: how a gather or TaskGroup future leads on to its
// children).
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "hangtrace/stacks.h"
#include "hangtrace/text.h"
#include "rules.h"

namespace hangtrace::rules {

namespace {

constexpr size_t kFramesShown = 6;
constexpr size_t kCyclesPerProcess = 8;
constexpr size_t kOrphansPerProcess = 8;

// N of the process's "CPython 3.N..." (0: not read).
int python_minor(const ProcessInfo& p) {
  int major = 0, minor = 0;
  const bool read = std::sscanf(p.python_interpreter.c_str(), "CPython %d.%d", &major, &minor) == 2;
  return read && major == 3 ? minor : 0;
}

// A task's suspended coroutines; none while it runs.
std::string coroutines_text(const std::vector<UserFrame>& frames) {
  return frames.empty() ? "(running)" : frames_text(frames, kFramesShown);
}

class AwaitGraph {
 public:
  explicit AwaitGraph(const ProcessInfo& p) {
    for (const auto& t : p.asyncio_tasks) tasks_[t.address] = &t;
    for (const auto& t : p.asyncio_tasks) {
      if (t.awaits) add_edge(t.address, t.awaits);
      for (uint64_t a : t.awaited_by) add_edge(a, t.address);
    }
  }

  const AsyncioTask* task(uint64_t address) const {
    auto it = tasks_.find(address);
    return it == tasks_.end() ? nullptr : it->second;
  }

  // Every cycle a depth-first walk meets (as asyncio.tools' pstree does),
  // each as the nodes along it, at most `limit`.
  std::vector<std::vector<uint64_t>> cycles(size_t limit) const {
    std::vector<std::vector<uint64_t>> out;
    std::map<uint64_t, int> color;  // 0 white, 1 on the path, 2 done
    for (const auto& [start, unused] : edges_) {
      if (color[start] != 0 || out.size() >= limit) continue;
      // Iterative DFS: the path and, per node on it, the next edge to try.
      std::vector<std::pair<uint64_t, size_t>> path{{start, 0}};
      color[start] = 1;
      while (!path.empty() && out.size() < limit) {
        auto& [node, next] = path.back();
        const auto it = edges_.find(node);
        if (it == edges_.end() || next >= it->second.size()) {
          color[node] = 2;
          path.pop_back();
          continue;
        }
        const uint64_t to = it->second[next++];
        if (color[to] == 1) {
          std::vector<uint64_t> cycle;
          size_t from = 0;
          while (path[from].first != to) ++from;
          for (size_t i = from; i < path.size(); ++i) cycle.push_back(path[i].first);
          out.push_back(std::move(cycle));
        } else if (color[to] == 0) {
          color[to] = 1;
          path.push_back({to, 0});
        }
      }
    }
    return out;
  }

 private:
  void add_edge(uint64_t from, uint64_t to) {
    auto& v = edges_[from];
    if (std::find(v.begin(), v.end(), to) == v.end()) v.push_back(to);
  }
  std::map<uint64_t, const AsyncioTask*> tasks_;
  std::map<uint64_t, std::vector<uint64_t>> edges_;
};

std::string task_label(const AsyncioTask& t) {
  return fmt::format("task {} ({:#x})", t.name.empty() ? "?" : t.name, t.address);
}

std::string node_label(const AwaitGraph& g, uint64_t address, const ProcessInfo& p) {
  if (const AsyncioTask* t = g.task(address)) return task_label(*t);
  // A future some task awaits: name it by its type.
  for (const auto& t : p.asyncio_tasks)
    if (t.awaits == address && !t.awaits_type.empty()) return fmt::format("{} {:#x}", t.awaits_type, address);
  return fmt::format("future {:#x}", address);
}

// The thread whose loop runs tasks of `p` (for the finding's threads): the
// task's own thread when known, else the process's main thread.
int loop_tid(const ProcessInfo& p, const AsyncioTask& t) { return t.tid ? t.tid : p.pid; }

void cycle_findings(const RuleContext& ctx, const ProcessInfo& p, const AwaitGraph& g,
                    std::vector<Finding>& out) {
  for (const auto& cycle : g.cycles(kCyclesPerProcess)) {
    Finding f(FindingKind::AsyncioCycle);
    f.pids = {p.pid};
    std::vector<std::string> names;
    for (uint64_t node : cycle) names.push_back(node_label(g, node, p));
    names.push_back(names.front());
    std::vector<int> tids;
    for (uint64_t node : cycle)
      if (const AsyncioTask* t = g.task(node)) add_unique(tids, loop_tid(p, *t));
    f.tids = tids;
    f.confidence = Confidence::Certain;
    f.summary =
        fmt::format("asyncio tasks of {} await each other in a cycle: {}; none of them can ever finish",
                    ctx.process_label(p.pid, p.comm), fmt::join(names, " -> "));
    for (size_t i = 0; i + 1 < names.size(); ++i) f.chain.push_back({names[i], "awaits", names[i + 1]});
    for (uint64_t node : cycle)
      if (const AsyncioTask* t = g.task(node))
        f.evidence.push_back(
            fmt::format("{} suspended at {}", task_label(*t), coroutines_text(t->coroutine_stack)));
    for (int tid : tids) ctx.add_thread_evidence(f, tid);
    f.advice = {
        "Break the cycle: a task must not await (directly, or through gather/TaskGroup/wait_for) a task that "
        "awaits it back. Pass results through an asyncio.Queue or Future that one side completes, or give "
        "the waits a timeout (asyncio.timeout) so the cycle surfaces as an error.",
        python_minor(p) >= 14
            ? "`python3.14 -m asyncio pstree PID` prints the same await graph from outside."
            : "In the process, asyncio.all_tasks() and Task.print_stack() show the same tasks and where "
              "each is suspended (from 3.14 on, `python3.14 -m asyncio pstree PID` does from outside).",
    };
    nlohmann::json nodes = nlohmann::json::array();
    for (uint64_t node : cycle) nodes.push_back(node_label(g, node, p));
    f.details = {{"cycle", nodes}};
    out.push_back(std::move(f));
  }
}

void orphan_findings(const RuleContext& ctx, const ProcessInfo& p, const AwaitGraph& g,
                     std::vector<Finding>& out) {
  size_t made = 0;
  for (const auto& t : p.asyncio_tasks) {
    if (made >= kOrphansPerProcess) break;
    // Every reference is the awaiting task's own (its fut_waiter, the
    // coroutine's future iterator, its frames' slots): nothing else can
    // reach the future to set it.
    if (!t.awaits || g.task(t.awaits) || t.awaits_refcount < 1 || t.awaits_refcount != t.awaits_own_refs)
      continue;
    if (t.awaits_type.find("Future") == std::string::npos) continue;
    ++made;
    Finding f(FindingKind::AsyncioOrphanFuture);
    f.pids = {p.pid};
    f.tids = {loop_tid(p, t)};
    f.confidence = Confidence::Probable;
    f.summary = fmt::format(
        "{} of {} awaits {} {:#x} that nothing else refers to (all {} references to it are the awaiting "
        "task's own): nothing can ever set its result",
        task_label(t), ctx.process_label(p.pid, p.comm), t.awaits_type, t.awaits, t.awaits_refcount);
    f.chain.push_back({task_label(t), "awaits", fmt::format("{} {:#x}", t.awaits_type, t.awaits)});
    f.evidence.push_back(
        fmt::format("{} suspended at {}", task_label(t), coroutines_text(t.coroutine_stack)));
    for (uint64_t a : t.awaited_by)
      f.evidence.push_back(fmt::format("{} is awaited by {}", task_label(t), node_label(g, a, p)));
    ctx.add_thread_evidence(f, loop_tid(p, t));
    f.advice = {
        "Keep a reference to the future where the code that should complete it can reach it (set_result, "
        "set_exception), or await something that is completed: a future created and awaited without being "
        "handed to anyone waits forever.",
        "Give the await a timeout (asyncio.timeout, asyncio.wait_for) so a lost completion becomes an error.",
    };
    f.details = {{"task", task_label(t)},
                 {"future", fmt::format("{:#x}", t.awaits)},
                 {"refcount", t.awaits_refcount},
                 {"own_refs", t.awaits_own_refs}};
    out.push_back(std::move(f));
  }
}

void blocked_loop_findings(const RuleContext& ctx, const ProcessInfo& p, const AwaitGraph& g,
                           std::vector<Finding>& out) {
  for (const auto& th : p.threads) {
    if (!th.asyncio_loop || !th.asyncio_running_task) continue;
    const ThreadWait* w = ctx.wait_of(th.tid);
    if (!w || w->activity == Activity::Running || w->activity == Activity::Unknown ||
        w->activity == Activity::Dead || w->progressed)
      continue;
    if (!w->blocked_s || *w->blocked_s < ctx.opt.stall_after_s) continue;
    size_t others = 0;
    for (const auto& t : p.asyncio_tasks) others += t.tid == th.tid && t.address != th.asyncio_running_task;
    Finding f(FindingKind::AsyncioLoopBlocked);
    f.pids = {p.pid};
    f.tids = {th.tid};
    f.confidence = ctx.stuck(th.tid) ? ctx.confidence_for(f.tids) : Confidence::Probable;
    if (ctx.stuck(th.tid)) f.severity = Severity::Critical;
    const AsyncioTask* running = g.task(th.asyncio_running_task);
    const std::string task =
        running ? task_label(*running) : fmt::format("task {:#x}", th.asyncio_running_task);
    f.summary = fmt::format(
        "the asyncio event loop of {} is blocked: {} {} {} inside {}, so none of the loop's {} other task{} "
        "can run",
        ctx.thread_label(th.tid), ctx.thread_label(th.tid), w->summary, for_duration(w->blocked_s), task,
        others, others == 1 ? "" : "s");
    ctx.add_main_chain(f, th.tid, "");
    ctx.add_thread_evidence(f, th.tid);
    f.advice = {
        "Do not make blocking calls in a coroutine: run them in a thread (await asyncio.to_thread(fn, ...) "
        "or "
        "loop.run_in_executor) or use the asyncio version (asyncio.sleep, asyncio streams, an async client).",
        "PYTHONASYNCIODEBUG=1 (or loop.set_debug(True)) logs every callback that holds the loop longer than "
        "slow_callback_duration.",
    };
    f.details = {{"loop_tid", th.tid}, {"running_task", task}, {"other_tasks", others}};
    out.push_back(std::move(f));
  }
}

}  // namespace

std::vector<Finding> asyncio_findings(const RuleContext& ctx) {
  std::vector<Finding> out;
  for (const auto& p : ctx.snap.processes) {
    if (p.asyncio_tasks.empty() || !ctx.in_tree(p.pid)) continue;
    const AwaitGraph g(p);
    cycle_findings(ctx, p, g, out);
    orphan_findings(ctx, p, g, out);
    blocked_loop_findings(ctx, p, g, out);
  }
  return out;
}

}  // namespace hangtrace::rules
