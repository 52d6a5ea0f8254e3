// The human report, read top-down by a tired engineer: the verdict, the
// wait chain and its fix first, then every process and thread, the findings,
// and what the live window saw.
#include <sys/wait.h>

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "hangtrace/report.h"
#include "hangtrace/stacks.h"
#include "hangtrace/text.h"
#include "report_parts.h"

namespace hangtrace {

namespace {

// The BLOCKED column: "12.3s", "2.5m", "1.2h"; "-" running, "?" unknown.
std::string blocked_text(const ThreadWait& w) {
  if (w.activity == Activity::Running) return "-";
  if (!w.blocked_s) return "?";
  double s = *w.blocked_s;
  if (s >= 3600) return fmt::format("{:.1f}h", s / 3600);
  if (s >= 120) return fmt::format("{:.1f}m", s / 60);
  return fmt::format("{:.1f}s", s);
}

// At most `n` bytes, "..." ending what was cut (the table's columns).
std::string truncate(const std::string& s, size_t n) {
  return s.size() <= n ? s : s.substr(0, n - 3) + "...";
}

// "dataset.py:88 Dataset.__getitem__ <- fetch.py:58 fetch <- ...": file names
// without their directory.
std::string python_stack_text(const std::vector<UserFrame>& stack, size_t limit) {
  return frames_text(stack, limit, [](const UserFrame& f) {
    std::string file = basename_of(f.file);
    return f.line > 0 ? fmt::format("{}:{} {}", file, f.line, f.function)
                      : fmt::format("{} {}", file, f.function);
  });
}

// The native frames of a blocked thread that say how it got into its wait:
// up to the first frame of the Python interpreter loop (beyond that the py:
// line says it better), all of them in a process without Python.
std::string native_stack_text(const std::vector<UserFrame>& stack, size_t limit) {
  auto eval = std::find_if(stack.begin(), stack.end(),
                           [](const UserFrame& f) { return is_python_eval_frame(f.function); });
  return frames_text(std::vector<UserFrame>(stack.begin(), eval), limit, user_frame_text);
}

std::string stack_text(const std::vector<UserFrame>& stack, size_t limit) {
  return frames_text(stack, limit, user_frame_text);
}

using report::LineSink;

void render_progress_stop(const ProgressStop& ps, const LineSink& line) {
  line(fmt::format("PROGRESS STOPPED: {}{}, {} ago: {} was the last to block, {}",
                   ps.at_the_latest ? "at the latest " : "", format_utc(ps.unix_time),
                   format_seconds(ps.ago_s), ps.thread, ps.waits_on));
  std::string basis =
      ps.basis == "live"
          ? "its last wakeup seen while tracing"
          : fmt::format("blocked times (kernel scheduler clock) of {} stuck thread(s)", ps.tids.size());
  if (ps.timed_waits_not_counted)
    basis += fmt::format("; {} timed wait(s) not counted (a retry loop restarts its wait)",
                         ps.timed_waits_not_counted);
  if (!ps.live_note.empty()) basis += "; " + ps.live_note;
  line("  basis: " + basis);
}

// The top finding's chain from the main thread to the cause, and its fix.
void render_top_finding(const Finding& top, const LineSink& line) {
  if (!top.chain.empty()) {
    line("");
    line("WAIT CHAIN");
    // A step hangs under the step that ended where it starts (else the root,
    // or the step before it) and is drawn there, depth first: two objects
    // one poll waits on are siblings, each with its own releasers.
    const auto& chain = top.chain;
    constexpr size_t kRoot = static_cast<size_t>(-1);
    std::vector<size_t> parent(chain.size(), kRoot);
    std::vector<std::vector<size_t>> children(chain.size() + 1);  // the root's last
    for (size_t i = 0; i < chain.size(); ++i) {
      if (chain[i].from != chain.front().from) {
        parent[i] = i == 0 ? kRoot : i - 1;
        for (size_t j = i; j-- > 0;)
          if (chain[j].to == chain[i].from) {
            parent[i] = j;
            break;
          }
      }
      children[parent[i] == kRoot ? chain.size() : parent[i]].push_back(i);
    }
    line("  " + chain.front().from);
    size_t last_depth = 1;
    std::vector<std::pair<size_t, size_t>> todo;  // (step, depth), depth first
    for (auto it = children.back().rbegin(); it != children.back().rend(); ++it) todo.push_back({*it, 1});
    while (!todo.empty()) {
      auto [i, depth] = todo.back();
      todo.pop_back();
      line(fmt::format("  {}└─ {} {}", std::string(3 * (depth - 1), ' '), chain[i].edge, chain[i].to));
      if (i + 1 == chain.size()) last_depth = depth;
      for (auto it = children[i].rbegin(); it != children[i].rend(); ++it) todo.push_back({*it, depth + 1});
    }
    const std::string last(3 * last_depth + 2, ' ');
    if (top.kind == FindingKind::OrphanedLock || top.kind == FindingKind::DeadPeer)
      line(fmt::format("{}✗ nothing alive can end this wait", last));
    else if (top.kind == FindingKind::DeadlockCycle)
      line(fmt::format("{}↺ back to the start: a cycle", last));
  }
  if (!top.advice.empty()) {
    line("");
    line("FIX");
    for (const auto& a : top.advice) line("  - " + a);
  }
}

// One listed thread: its wait, then its stacks (more of them with -v).
void render_thread(const ProcessInfo& p, const ThreadInfo& t, const ThreadWait& w, int verbosity,
                   const LineSink& line) {
  line(fmt::format("  {:<8} {:<8} {:<16} {:<11} {:>7}  {}", t.tid, p.pid, truncate(t.comm, 16),
                   activity_name(w.activity), blocked_text(w), truncate(w.summary, 90)));
  if (!t.python_stack.empty())
    line(fmt::format("    py: {}", python_stack_text(t.python_stack, verbosity > 0 ? 24 : 6)));
  else if (verbosity > 0 && !t.python_stack_error.empty())
    line(fmt::format("    py: ({})", truncate(t.python_stack_error, 120)));
  if (!t.native_stack.empty() && w.activity != Activity::Running) {
    std::string native = native_stack_text(t.native_stack, verbosity > 0 ? 24 : 6);
    if (!native.empty()) line(fmt::format("    native: {}", native));
  }
  if (verbosity > 0 && !t.native_stack.empty() && !t.python_stack.empty())
    line(fmt::format("    stack: {}", stack_text(merged_user_stack(t), 40)));
  if (verbosity > 0 && !w.syscall_text.empty())
    line(fmt::format("{:>58}{}", "", truncate(w.syscall_text, 100)));
  if (verbosity > 1 && !w.kernel_stack.empty()) {
    for (const auto& fn : w.kernel_stack) line(fmt::format("{:>58}k {}", "", fn));
  }
}

void render_processes_and_threads(const Snapshot& snap, const Diagnosis& d, int verbosity,
                                  const LineSink& line) {
  // Threads that appear in findings are always listed; the rest are grouped.
  std::set<int> interesting;
  for (const auto& f : d.findings) interesting.insert(f.tids.begin(), f.tids.end());
  line("");
  line("PROCESSES AND THREADS");
  line(fmt::format("  {:<8} {:<21} {:<5} {:>7}  {}", "PID", "ROLE", "STATE", "THREADS", "COMMAND"));
  for (const auto& p : snap.processes)
    line(fmt::format("  {:<8} {:<21} {:<5} {:>7}  {}", p.pid, job_role_text(snap, &p),
                     std::string(1, p.state), p.threads.size(),
                     truncate(p.cmdline.empty() ? p.comm : p.cmdline, 70)));
  line("");
  line(fmt::format("  {:<8} {:<8} {:<16} {:<11} {:>7}  {}", "TID", "PID", "COMM", "ACTIVITY", "BLOCKED",
                   "WAIT"));
  for (const auto& p : snap.processes) {
    std::map<std::string, std::vector<int>> grouped;  // summary -> tids
    for (const auto& t : p.threads) {
      auto it = d.graph.threads.find(t.tid);
      if (it == d.graph.threads.end()) continue;
      const ThreadWait& w = it->second;
      if (verbosity > 0 || t.tid == p.pid || interesting.count(t.tid))
        render_thread(p, t, w, verbosity, line);
      else
        grouped[fmt::format("{} {}", activity_name(w.activity), w.summary)].push_back(t.tid);
    }
    for (const auto& [summary, tids] : grouped) {
      line(fmt::format("  {:<8} {:<8} {:<16} {}", fmt::format("+{}", tids.size()), p.pid, "other threads",
                       truncate(summary, 100)));
    }
  }
}

// "5 findings caused by this: F2-F6 network-wait (5)" for the findings
// grouped under `root` (causes.cpp); "" when none.
std::string caused_line(const std::vector<Finding>& findings, const Finding& root) {
  std::vector<std::string> ids;
  std::map<std::string, int> kinds;  // kind -> how many
  for (const auto& f : findings)
    if (f.caused_by == root.id) {
      ids.push_back(f.id);
      ++kinds[finding_kind_name(f.kind)];
    }
  if (ids.empty()) return "";
  std::vector<std::string> kind_counts;
  for (const auto& [kind, n] : kinds) kind_counts.push_back(n > 1 ? fmt::format("{} ({})", kind, n) : kind);
  std::string span = ids.size() > 2 ? fmt::format("{}-{}", ids.front(), ids.back())
                                    : fmt::format("{}", fmt::join(ids, ", "));
  return fmt::format("{} finding{} caused by this: {} {}", ids.size(), ids.size() > 1 ? "s" : "", span,
                     fmt::join(kind_counts, ", "));
}

// Every finding; the fix of the first one was shown at the top. Findings
// explained by another (caused_by) are collapsed under it unless -v.
void render_findings(const std::vector<Finding>& findings, int verbosity, const LineSink& line) {
  if (findings.empty()) return;
  line("");
  line("FINDINGS");
  for (const auto& f : findings) {
    if (!f.caused_by.empty() && verbosity < 1) continue;
    line(fmt::format("[{}] {} {} {} | pids {}{}", f.id, severity_name(f.severity),
                     confidence_name(f.confidence), finding_kind_name(f.kind), fmt::join(f.pids, ", "),
                     f.caused_by.empty() ? "" : fmt::format(" | caused by {}", f.caused_by)));
    line("  " + f.summary);
    if (!f.evidence.empty()) {
      line("  evidence:");
      for (const auto& e : f.evidence) line("    - " + e);
    }
    if (&f != &findings.front() && !f.advice.empty() && f.caused_by.empty()) {
      line("  fix:");
      for (const auto& a : f.advice) line("    - " + a);
    }
    if (std::string caused = caused_line(findings, f); !caused.empty())
      line(fmt::format("  {}{}", caused, verbosity < 1 ? " (shown with -v)" : ""));
  }
}

void render_live(const Snapshot& snap, const Diagnosis& d, const LiveObservation& live, int verbosity,
                 const LineSink& line) {
  line("");
  size_t active = 0;
  for (const auto& h : live.hooks) active += h.active;
  line(fmt::format("LIVE: {:.1f} s traced, {} events, {} dropped, {} of {} hooks active{}{}", live.duration_s,
                   live.events, live.dropped, active, live.hooks.size(),
                   live.dropped ? " (ring buffer overflowed: raise --ringbuf-mb)" : "",
                   live.stacks_lost ? fmt::format(", {} stack walks lost to stack-map collisions (their "
                                                  "records show no stack)",
                                                  live.stacks_lost)
                                    : ""));
  for (const auto& dth : live.deaths) {
    if (dth.signal == 0 && !dth.oom_victim)
      line(fmt::format("  exit: {} ({}) status {}", dth.pid, dth.comm, WEXITSTATUS(dth.exit_code)));
  }
  report::render_profile(d.profile, verbosity, line);
  report::render_timelines(snap, d, live, line);
  report::render_gpu(live, verbosity, line);
  if (verbosity > 0) {
    for (const auto& h : live.hooks)
      line(fmt::format("  hook {:<8} {:<28} {:<8} {}", h.concern, h.attach, h.active ? "active" : "off",
                       h.reason));
  }
}

}  // namespace

std::string render_text(const Snapshot& snap, const Diagnosis& d, const ReportOptions& opt,
                        const LiveObservation* live) {
  std::string out;
  // Names, command lines and paths in the lines come from the target.
  const LineSink line = [&](const std::string& s) { out += terminal_escape(s) + "\n"; };
  const ProcessInfo* target = snap.process(snap.target_pid);
  line(fmt::format("hangtrace {} | pid {} ({}) | {} | kernel {} | {}", snap.hangtrace_version,
                   snap.target_pid,
                   target ? truncate(target->cmdline.empty() ? target->comm : target->cmdline, 60) : "?",
                   snap.hostname, snap.kernel_release, format_local_time(snap.taken_at_unix)));
  line("");
  line(fmt::format("VERDICT: {}", d.verdict.summary));
  if (d.progress_stopped) render_progress_stop(*d.progress_stopped, line);
  if (!d.findings.empty()) {
    if (std::string caused = caused_line(d.findings, d.findings.front()); !caused.empty())
      line("  " + caused);
    render_top_finding(d.findings.front(), line);
  }
  report::render_job(snap, line);
  render_processes_and_threads(snap, d, opt.verbosity, line);
  render_findings(d.findings, opt.verbosity, line);
  if (snap.shm.available) {
    line("");
    double pct = snap.shm.size_bytes ? 100.0 * snap.shm.used_bytes / snap.shm.size_bytes : 0;
    line(fmt::format("/dev/shm of the target: {:.1f} MiB used of {:.1f} MiB ({:.0f}%), {} segment(s) listed",
                     snap.shm.used_bytes / 1048576.0, snap.shm.size_bytes / 1048576.0, pct,
                     snap.shm.largest.size()));
  }
  if (live) render_live(snap, d, *live, opt.verbosity, line);
  if (!snap.limitations.empty()) {
    line("");
    line("NOT SEEN");
    for (const auto& l : snap.limitations) line("  - " + l);
  }
  return out;
}

}  // namespace hangtrace
