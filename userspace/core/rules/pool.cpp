// pool-self-wait: every thread of a thread pool runs a task that waits for a
// result only the same pool can produce (a task that submits to its own
// executor and waits on the future, a ThreadPool task blocked in
// apply_async().get()), so no thread is left to run what they wait for. The
// kernel sees private futexes with no owner whose every releaser is stuck;
// the Python frames say it is a pool, whose threads and which tasks.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string_view>

#include "hangtrace/text.h"
#include "rules.h"

namespace hangtrace::rules {

namespace {

struct PoolKind {
  std::string_view name;           // what the reports call it
  std::string_view loop_file;      // the source file of the pool thread's loop ...
  std::string_view loop_function;  // ... and its function (unqualified)
};

constexpr PoolKind kPools[] = {
    {"concurrent.futures.ThreadPoolExecutor", "concurrent/futures/thread.py", "_worker"},
    {"multiprocessing.pool.ThreadPool", "multiprocessing/pool.py", "worker"},
};

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// "ThreadPoolExecutor._worker" and 3.10's "_worker" alike.
std::string_view unqualified(std::string_view function) {
  size_t dot = function.rfind('.');
  return dot == std::string_view::npos ? function : function.substr(dot + 1);
}

bool is_frame(const UserFrame& f, std::string_view file, std::string_view function) {
  return f.kind == UserFrame::Kind::Python && ends_with(f.file, file) && unqualified(f.function) == function;
}

// A pool thread's place in its pool's loop: the loop frame's index in the
// (innermost first) stack, or none when `t` is not a thread of `pool`.
std::optional<size_t> loop_frame(const ThreadInfo& t, const PoolKind& pool) {
  for (size_t i = 0; i < t.python_stack.size(); ++i)
    if (is_frame(t.python_stack[i], pool.loop_file, pool.loop_function)) return i;
  return std::nullopt;
}

// "load (pipeline.py:41)": the task's outermost frame, what the pool ran
// (past the pool's own frames: concurrent.futures' _WorkItem.run).
std::string task_text(const ThreadInfo& t, size_t loop, const PoolKind& pool) {
  for (size_t i = loop; i-- > 0;) {
    const UserFrame& f = t.python_stack[i];
    if (ends_with(f.file, pool.loop_file)) continue;
    return fmt::format("{} ({}:{})", f.function, basename_of(f.file), f.line);
  }
  return "?";
}

// "Future.result (_base.py:451)": where the task waits, its innermost frame.
std::string wait_text(const ThreadInfo& t) {
  if (t.python_stack.empty()) return "?";
  const UserFrame& f = t.python_stack.front();
  return fmt::format("{} ({}:{})", f.function, basename_of(f.file), f.line);
}

}  // namespace

std::vector<Finding> pool_self_wait_findings(const RuleContext& ctx) {
  std::vector<Finding> out;
  for (const auto& p : ctx.snap.processes) {
    if (p.role == ProcessRole::Peer || !p.is_python) continue;
    for (const PoolKind& pool : kPools) {
      std::vector<std::pair<const ThreadInfo*, size_t>> workers;  // with their loop frame
      for (const auto& t : p.threads)
        if (auto loop = loop_frame(t, pool)) workers.emplace_back(&t, *loop);
      if (workers.empty()) continue;
      // Every pool thread inside a task (not in the loop's wait for work)
      // and stuck: none is free to run the tasks they wait for.
      bool all_stuck_in_tasks = std::all_of(workers.begin(), workers.end(), [&](const auto& w) {
        return w.second > 0 && ctx.knot.lenient.count(w.first->tid);
      });
      if (!all_stuck_in_tasks) continue;
      Finding f(FindingKind::PoolSelfWait);
      add_unique(f.pids, p.pid);
      for (const auto& [t, loop] : workers) add_unique(f.tids, t->tid);
      // Every other stuck thread of the process waits on them (the main
      // thread on the outer futures).
      std::vector<int> others;
      for (const auto& t : p.threads)
        if (ctx.knot.lenient.count(t.tid) && std::find(f.tids.begin(), f.tids.end(), t.tid) == f.tids.end())
          others.push_back(t.tid);
      f.tids.insert(f.tids.end(), others.begin(), others.end());
      f.confidence = ctx.confidence_for(f.tids);
      const auto& [first, first_loop] = workers.front();
      f.summary = fmt::format(
          "all {} threads of a {} in {} run a task that waits for a result of the same pool ({} in {}): no "
          "pool thread is free to run the tasks they wait for{}",
          workers.size(), pool.name, ctx.thread_label(p.pid), task_text(*first, first_loop, pool),
          wait_text(*first),
          others.empty() ? ""
                         : fmt::format(", and {} other thread{} wait{} on the pool", others.size(),
                                       others.size() > 1 ? "s" : "", others.size() > 1 ? "" : "s"));
      for (const auto& [t, loop] : workers)
        f.evidence.push_back(fmt::format("{} runs {} and waits in {}", ctx.thread_label(t->tid),
                                         task_text(*t, loop, pool), wait_text(*t)));
      for (int tid : others) {
        const ThreadInfo* t = p.thread(tid);
        f.evidence.push_back(fmt::format("{} waits in {}", ctx.thread_label(tid), t ? wait_text(*t) : "?"));
      }
      ctx.add_main_chain(f, first->tid, "");
      f.details = {
          {"pool", pool.name},
          {"pool_tids", std::vector<int>(f.tids.begin(), f.tids.begin() + static_cast<long>(workers.size()))},
          {"waiting_tids", others}};
      f.advice = {
          fmt::format("A task must not wait on work it submits to its own pool: with as many such tasks as "
                      "pool threads, none is left to run the inner ones. Run the inner work inline (call it "
                      "directly), or give it a separate executor ({} for the outer tasks, another for the "
                      "inner).",
                      pool.name),
          "Or size the pool above the number of waiting tasks (max_workers), and give result() / get() a "
          "timeout so a starved pool fails loudly instead of hanging.",
      };
      out.push_back(std::move(f));
    }
  }
  return out;
}

}  // namespace hangtrace::rules
