// waits-for-input: a thread of the job reading what only a person can type
// -- a terminal, or stdin inside a debugger (pdb, breakpoint(), ipdb, pudb,
// code.interact) -- whatever stdin is connected to. A job stopped at a
// breakpoint left in one rank looks like a hung collective from every other
// rank; this names the rank and what it waits for.
#include <fmt/format.h>

#include <algorithm>

#include "hangtrace/jobs.h"
#include "hangtrace/stacks.h"
#include "rules.h"

namespace hangtrace::rules {

namespace {

// What `fd` of `p` is, for the finding: "a terminal (/dev/pts/3)", "a pipe
// (pipe:[812])", ...
std::string describe_fd(const ProcessInfo& p, int fd) {
  for (const auto& f : p.fds) {
    if (f.fd != fd) continue;
    if (is_terminal_path(f.link)) return fmt::format("a terminal ({})", f.link);
    switch (f.kind) {
      case FdKind::Pipe:
        return fmt::format("a pipe ({})", f.link);
      case FdKind::Socket:
        return fmt::format("a socket ({})", f.link);
      default:
        return f.link == "/dev/null" ? "/dev/null" : fmt::format("{}", f.link);
    }
  }
  return "an fd hangtrace could not read";
}

}  // namespace

std::vector<Finding> person_input_findings(const RuleContext& ctx) {
  std::vector<Finding> out;
  for (const auto& p : ctx.snap.processes) {
    if (p.role == ProcessRole::Peer) continue;
    for (const auto& t : p.threads) {
      if (!ctx.in_tree(t.tid)) continue;
      const ThreadWait* w = ctx.wait_of(t.tid);
      if (!w || !w->input_fd) continue;
      const std::string_view console = interactive_console(t);
      const int fd = *w->input_fd;
      Finding f(FindingKind::WaitsForInput);
      f.pids = {p.pid};
      f.tids = {t.tid};
      const std::string who = ctx.thread_label(t.tid);
      const std::string member = jobs::member_role(ctx.snap, p.pid);
      const std::string source = describe_fd(p, fd);
      const std::string what = !console.empty() ? fmt::format("{} waits for a command", console)
                                                : std::string("it waits for a line to be typed");
      const std::string fd_text = fd == 0 ? "stdin" : fmt::format("fd {}", fd);
      f.summary = fmt::format("{} waits for a person: {} on {}, which is {}", who, what, fd_text, source);
      f.evidence.push_back(fmt::format("{} is {}", p.pid, member));
      if (!t.python_stack.empty()) {
        const UserFrame& top = t.python_stack.front();
        f.evidence.push_back(
            fmt::format("innermost Python frame: {} ({}:{})", top.function, top.file, top.line));
      }
      ctx.add_thread_evidence(f, t.tid);
      f.chain.push_back({who, "reads", fmt::format("{} ({})", fd_text, source)});
      f.chain.push_back({fd_text, "needs", "a person to type"});
      f.chain_tids = {t.tid};
      // The job's main thread, or a rank's, stops the job; another thread
      // reading a terminal may be a console beside the work.
      const bool main_thread = t.tid == p.pid;
      f.severity = main_thread ? Severity::Critical : Severity::Warning;
      f.confidence = Confidence::Certain;
      f.details = {{"pid", p.pid},
                   {"tid", t.tid},
                   {"rank", p.rank ? nlohmann::json(*p.rank) : nlohmann::json(nullptr)},
                   {"fd", fd},
                   {"source", source},
                   {"terminal", w->input_terminal},
                   {"debugger", console.empty() ? nlohmann::json(nullptr) : nlohmann::json(console)}};
      if (console == "pdb" || console == "ipdb" || console == "pudb")
        f.advice = {
            fmt::format("{} stopped at a breakpoint (a breakpoint() or pdb.set_trace() left in the code, "
                        "or post-mortem after an exception): attach to its terminal and continue, or "
                        "remove the breakpoint; other ranks wait for it in their next collective.",
                        who),
            "Keep breakpoints out of multi-rank runs, or guard them (if rank == 0 and "
            "os.environ.get(\"DEBUG\")); PYTHONBREAKPOINT=0 disables breakpoint() for a whole job."};
      else
        f.advice = {
            fmt::format("{} reads {} ({}): type what it asks for, or give the job its input another "
                        "way (a config file, an argument, stdin=subprocess.DEVNULL for batch runs).",
                        who, fd_text, source)};
      out.push_back(std::move(f));
    }
  }
  return out;
}

}  // namespace hangtrace::rules
