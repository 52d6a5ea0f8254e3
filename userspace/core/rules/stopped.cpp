// stopped: a process of the job (or one outside it that the job waits on)
// that is not running at all -- stopped by a
// signal (SIGSTOP, SIGTSTP; state T), held in a ptrace stop by a debugger
// or strace (state t), or frozen by its cgroup's freezer (state D or S, so
// only the cgroup tells) -- releases nothing until someone resumes it, so every
// wait that leads to it (a peer rank in all_reduce, the main thread waiting
// for a worker's batch) is stuck behind it. It is the root cause of what
// waits on it, so it goes ahead of those findings.
#include <fmt/format.h>

#include "hangtrace/text.h"
#include "rules.h"

namespace hangtrace::rules {

namespace {

bool is_stopped(const ProcessInfo& p, const ThreadInfo& t) {
  return t.state == 'T' || t.state == 't' || (!p.frozen_cgroup.empty() && t.state != 'Z' && t.state != 'X');
}

// Why `t` of `p` is stopped, in words, and what resumes it.
std::pair<std::string, std::string> stop_cause(const ProcessInfo& p, const ThreadInfo& t) {
  const int pid = p.pid;
  if (!p.frozen_cgroup.empty()) {
    const bool v1 = p.frozen_cgroup.rfind("freezer:", 0) == 0;
    const std::string path = v1 ? p.frozen_cgroup.substr(8) : p.frozen_cgroup;
    return {fmt::format("frozen by the cgroup freezer of {} ({})", path,
                        v1 ? "freezer.state FROZEN" : "cgroup.freeze 1"),
            v1 ? fmt::format("Thaw it: 'echo THAWED > /sys/fs/cgroup/freezer{}/freezer.state' (or 'docker "
                             "unpause' / the scheduler's resume for that container or job).",
                             path)
               : fmt::format("Thaw it: 'echo 0 > /sys/fs/cgroup{}/cgroup.freeze' (or 'docker unpause' / the "
                             "scheduler's resume for that container or job).",
                             path)};
  }
  if (t.tracer_pid > 0) {
    std::string tracer = t.tracer_comm.empty() ? std::to_string(t.tracer_pid)
                                               : fmt::format("{} ({})", t.tracer_pid, t.tracer_comm);
    return {fmt::format("{} by its tracer {}", t.state == 't' ? "in a ptrace stop" : "stopped", tracer),
            fmt::format("Continue or detach the debugger/tracer {} (gdb: 'continue' or 'detach'; strace: "
                        "end it), or kill it: its tracee {} then runs on.",
                        tracer, pid)};
  }
  return {
      "stopped by a signal (SIGSTOP, SIGTSTP, SIGTTIN or SIGTTOU; a job-control stop, or a scheduler's "
      "suspend)",
      fmt::format("Resume it with 'kill -CONT {}', and find out who stopped it: a Ctrl-Z in its "
                  "terminal, a job scheduler's suspend, or a script sending SIGSTOP.",
                  pid)};
}

}  // namespace

std::vector<Finding> stopped_findings(const RuleContext& ctx) {
  std::vector<Finding> out;
  for (const auto& p : ctx.snap.processes) {
    std::vector<const ThreadInfo*> stopped;
    for (const auto& t : p.threads)
      if (is_stopped(p, t)) stopped.push_back(&t);
    if (stopped.empty()) continue;
    const ThreadInfo* lead = p.thread(p.pid);
    if (!lead || !is_stopped(p, *lead)) lead = stopped.front();
    const bool whole = stopped.size() == p.threads.size();
    Finding f(FindingKind::Stopped);
    f.confidence = Confidence::Certain;
    add_unique(f.pids, p.pid);
    for (const auto* t : stopped) add_unique(f.tids, t->tid);
    auto [cause, advice] = stop_cause(p, *lead);
    // Live tracing saw the stop signal: its sender, by name.
    const TraceEvent* stop_signal = nullptr;
    if (ctx.live)
      if (auto it = ctx.live->stop_signals.find(p.pid); it != ctx.live->stop_signals.end())
        stop_signal = &it->second;
    const char* stop_name = stop_signal ? signal_name(stop_signal->sig) : nullptr;
    if (!stop_name) stop_signal = nullptr;
    if (stop_signal && p.frozen_cgroup.empty() && lead->tracer_pid == 0) {
      cause = fmt::format("stopped by {} from {} ({})", stop_name, stop_signal->sender_tgid,
                          stop_signal->sender_comm);
      advice = fmt::format("Resume it with 'kill -CONT {}', and find out why {} ({}) stopped it.", p.pid,
                           stop_signal->sender_tgid, stop_signal->sender_comm);
    }
    // Who waits on it: the main thread's chain, when it leads here.
    ctx.add_main_chain(f, lead->tid, "");
    // Threads of the job whose wait chain reaches a stopped thread. Not only
    // the knot's: a stopped task counts as able to move on (a SIGCONT ends
    // it), so what waits on it is blocked, not deadlocked.
    std::vector<int> waiting;
    for (const auto& [tid, w] : ctx.graph.threads) {
      if (!ctx.in_tree(tid) || ctx.pid_of(tid) == p.pid || w.progressed) continue;
      if (w.activity != Activity::Blocked && w.activity != Activity::TimedWait &&
          w.activity != Activity::DiskWait)
        continue;
      for (const auto* t : stopped)
        if (!ctx.wait_path(tid, t->tid).empty()) {
          waiting.push_back(tid);
          break;
        }
    }
    // A process outside the job (the reader of its stdout pipe, the holder
    // of a lock it waits for) matters when the job waits on it.
    // ... and it has held the job up past --stall-after (a pipe's reader
    // paused for a moment is no finding).
    if (p.role == ProcessRole::Peer) {
      std::erase_if(waiting, [&](int tid) {
        const ThreadWait* w = ctx.wait_of(tid);
        return !w || !w->blocked_s || *w->blocked_s < ctx.opt.stall_after_s;
      });
      if (waiting.empty()) continue;
    }
    // A whole process stopped freezes its part of the job; one stopped
    // thread of a running process (a debugger on one thread) may not.
    f.severity = whole || !waiting.empty() || !f.chain.empty() ? Severity::Critical : Severity::Warning;
    f.summary = fmt::format(
        "{} is {}{}: it runs nothing until resumed{}", ctx.thread_label(p.pid),
        whole ? "" : fmt::format("{} of {} threads ", stopped.size(), p.threads.size()), cause,
        waiting.empty() ? ""
                        : fmt::format(", and {} thread{} of the job wait{} on it", waiting.size(),
                                      waiting.size() > 1 ? "s" : "", waiting.size() > 1 ? "" : "s"));
    for (const auto* t : stopped)
      f.evidence.push_back(fmt::format("{} in state {} ({}){}", ctx.thread_label(t->tid), t->state,
                                       t->state == 't'   ? "ptrace stop"
                                       : t->state == 'T' ? "stopped"
                                                         : "frozen",
                                       t->tracer_pid ? fmt::format(", TracerPid {}", t->tracer_pid) : ""));
    for (size_t i = 0; i < waiting.size() && i < 8; ++i)
      f.evidence.push_back(fmt::format("{} waits on it", ctx.thread_label(waiting[i])));
    if (waiting.size() > 8) f.evidence.push_back(fmt::format("... and {} more", waiting.size() - 8));
    f.advice = {advice};
    f.details = {
        {"stopped_tids", f.tids},
        {"whole_process", whole},
        {"tracer_pid", lead->tracer_pid ? nlohmann::json(lead->tracer_pid) : nlohmann::json(nullptr)},
        {"tracer_comm",
         lead->tracer_comm.empty() ? nlohmann::json(nullptr) : nlohmann::json(lead->tracer_comm)},
        {"frozen_cgroup",
         p.frozen_cgroup.empty() ? nlohmann::json(nullptr) : nlohmann::json(p.frozen_cgroup)},
        {"waiting_tids", waiting},
        {"signal", stop_signal ? nlohmann::json(stop_name) : nlohmann::json(nullptr)},
        {"sender_pid", stop_signal ? nlohmann::json(stop_signal->sender_tgid) : nlohmann::json(nullptr)},
        {"sender_comm", stop_signal ? nlohmann::json(stop_signal->sender_comm) : nlohmann::json(nullptr)}};
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace hangtrace::rules
