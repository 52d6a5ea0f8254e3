// no-progress: the floor under every other rule. A job whose main thread has
// been off CPU for --stall-after, with nothing it waits on (through the
// releasers, host-wide) moving, has stopped -- whether or not another rule
// could say why. It is never called healthy: the finding names the wait, what
// each process that could end it is doing instead, and how sure that is.
//
// "Moving" is what the kernel shows: a thread on CPU, or one whose CPU time
// or I/O moved between the snapshot's two samples. A releaser asleep in an
// unrelated call, stopped, or blocked on something else is not about to end
// the wait; one holding the other end of a pipe or socket is only attending
// to it when one of its waits is on that very object.
#include <fmt/format.h>

#include <algorithm>
#include <deque>

#include "hangtrace/jobs.h"
#include "hangtrace/text.h"
#include "rules.h"

namespace hangtrace::rules {

namespace {

// Processes named for one wait, at most: a pipe shared by a hundred shells is
// not a hundred lines.
constexpr size_t kMaxNamedReleasers = 5;
// Threads the walk from one main thread reaches, at most.
constexpr size_t kMaxWalk = 4096;

bool moving(const ThreadWait& w) { return w.activity == Activity::Running || w.progressed; }

bool is_data_object(const WaitObject& o) {
  switch (o.kind) {
    case ObjectKind::Pipe:
    case ObjectKind::UnixSocket:
    case ObjectKind::TcpSocket:
    case ObjectKind::UdpSocket:
    case ObjectKind::Socket:
    case ObjectKind::EventFd:
      return true;
    default:
      return false;
  }
}

// Whether `w` waits on `o` itself (the other end of the same pipe, the peer
// of the same socket): a reader in read() or poll() on the pipe a writer is
// blocked on attends to it; one asleep elsewhere does not.
bool attends_to(const RuleContext& ctx, const ThreadWait& w, const WaitObject& o) {
  if (!is_data_object(o)) return true;
  for (const auto& id : w.objects) {
    const WaitObject& mine = ctx.object(id);
    if (mine.name == o.name) return true;
    if (o.peer_socket && mine.name == fmt::format("socket:[{}]", o.peer_socket)) return true;
  }
  return false;
}

// Wrappers nested at most this deep (`sudo timeout 60 bash -c ...`).
constexpr int kMaxWrapperDepth = 8;

// A wrapper (a shell running one command, `timeout`, `sudo`) whose main
// thread only waits for its child to exit: wait4/waitid, or a pause or
// sigsuspend a child's exit ends. The job's progress is its child's. (A
// trainer in Popen.wait() is no wrapper: its wait is the job's.)
bool waits_for_its_children(const RuleContext& ctx, const ProcessInfo& p) {
  if (!jobs::is_command_wrapper(p.comm)) return false;
  const ThreadWait* w = ctx.wait_of(p.pid);
  if (!w || w->objects.empty() || p.children.empty()) return false;
  return std::any_of(w->objects.begin(), w->objects.end(),
                     [&](const std::string& id) { return ctx.object(id).kind == ObjectKind::Child; });
}

// The main threads of the job: its root's, or each rank's under a launcher.
// A root that only waits for its children hands over to theirs.
std::vector<int> main_threads(const RuleContext& ctx) {
  std::vector<int> out;
  const ProcessInfo* root = ctx.snap.process(ctx.snap.target_pid);
  for (int depth = 0; root && depth < kMaxWrapperDepth && waits_for_its_children(ctx, *root); ++depth) {
    const ProcessInfo* next = nullptr;
    for (int child : root->children)
      if (const ProcessInfo* c = ctx.snap.process(child); c && c->role != ProcessRole::Peer && !next)
        next = c;
    // Several children: the root is the job. A zombie: the wait ends now.
    if (!next || root->children.size() != 1 || next->state == 'Z' || next->state == 'X') break;
    root = next;
  }
  // A launcher's (the root's, or one a wrapper started) own main thread
  // only waits for its ranks: theirs are the job's.
  const auto starts_ranks = [&](const ProcessInfo& p) {
    return !p.rank && std::any_of(p.children.begin(), p.children.end(), [&](int c) {
      const ProcessInfo* q = ctx.snap.process(c);
      return q && jobs::is_rank_process(ctx.snap, *q);
    });
  };
  if (root && !starts_ranks(*root)) out.push_back(root->pid);
  for (const auto& p : ctx.snap.processes)
    if (p.role != ProcessRole::Peer && p.pid != ctx.snap.target_pid && jobs::is_rank_process(ctx.snap, p))
      out.push_back(p.pid);
  if (out.empty() && root) out.push_back(root->pid);
  return out;
}

bool covered(const RuleContext& ctx, int tid) {
  for (const auto& f : ctx.findings) {
    if (std::find(f.tids.begin(), f.tids.end(), tid) != f.tids.end()) return true;
    if (std::find(f.chain_tids.begin(), f.chain_tids.end(), tid) != f.chain_tids.end()) return true;
    if (f.details.contains("waiting_tids") && f.details["waiting_tids"].is_array())
      for (const auto& t : f.details["waiting_tids"])
        if (t.is_number_integer() && t.get<int>() == tid) return true;
  }
  return false;
}

// What one thread is doing, for the chain: "is stopped", "sleeps 3600 s".
std::string doing(const ThreadWait& w) {
  std::string s = w.summary.empty() ? activity_name(w.activity) : w.summary;
  if (w.blocked_s && w.activity != Activity::Running)
    s += fmt::format(" (off CPU {})", for_duration(w.blocked_s));
  return s;
}

// The threads reached from `from` through the releasers of what it waits on,
// breadth-first, `from` excluded, each with the object it was reached through.
std::vector<Hop> reached_from(const RuleContext& ctx, int from) {
  std::vector<Hop> out;
  ReleaserWalk walk(ctx.graph);
  walk.mark(from);
  std::deque<int> queue{from};
  while (!queue.empty() && out.size() < kMaxWalk) {
    const ThreadWait* w = ctx.wait_of(queue.front());
    queue.pop_front();
    if (!w) continue;
    for (const auto& id : w->objects)
      for (int r : walk.expand(ctx.object(id))) {
        out.push_back({r, id});
        queue.push_back(r);
      }
  }
  return out;
}

bool held_by_one_that_ran_recently(const RuleContext& ctx, const std::vector<Hop>& reached) {
  for (const auto& hop : reached) {
    const ThreadWait* w = ctx.wait_of(hop.tid);
    if (w && w->activity != Activity::Stopped && w->blocked_s && *w->blocked_s < ctx.opt.stall_after_s)
      return true;
  }
  return false;
}

bool job_is_working(const RuleContext& ctx, int except_tid) {
  for (const auto& [tid, w] : ctx.graph.threads)
    if (tid != except_tid && ctx.in_tree(tid) && moving(w)) return true;
  return false;
}

struct Judgement {
  bool progress = false;  // something the main thread waits on is moving
  bool may_end = false;   // the main thread only sleeps: it wakes by itself
  bool terminal_input = false;
  std::vector<std::string> unknown;  // why who can end it is not known
};

bool is_terminal(const WaitObject& o) {
  return o.kind == ObjectKind::File &&
         (o.label.rfind("/dev/pts/", 0) == 0 || o.label.rfind("/dev/tty", 0) == 0);
}

Judgement judge(const RuleContext& ctx, const ThreadWait& main_wait, const std::vector<Hop>& reached) {
  Judgement j;
  if (main_wait.activity == Activity::Sleeping) j.may_end = true;
  for (const auto& id : main_wait.objects) {
    const WaitObject& o = ctx.object(id);
    if (is_terminal(o)) j.terminal_input = true;
    if (o.ready) j.progress = true;
    if (o.external && !is_terminal(o))
      j.unknown.push_back(o.notes.empty()
                              ? fmt::format("{}: released from outside what hangtrace sees", o.label)
                              : fmt::format("{}: {}", o.label, o.notes.front()));
    if (!o.external && !o.ready && releaser_count(o) == 0 && !o.releasers_certain)
      j.unknown.push_back(fmt::format("{}: no process hangtrace can see can end it", o.label));
    // Mapping a lock is not holding it: with no owner in its word, those
    // that share it are who could post it, not who is known to hold it.
    if (o.futex && o.futex->shared && !o.owner_tid && releaser_count(o) > 0)
      j.unknown.push_back(fmt::format(
          "{}: records no owner, so which of the processes sharing it holds it is not known", o.label));
  }
  if (main_wait.objects.empty() && main_wait.activity != Activity::Sleeping &&
      main_wait.activity != Activity::Stopped)
    j.unknown.push_back(fmt::format("{}: what ends this wait is not modelled", main_wait.summary));
  for (const auto& hop : reached) {
    const ThreadWait* w = ctx.wait_of(hop.tid);
    if (!w) continue;
    if (moving(*w)) j.progress = true;  // working: it may yet write, post, exit
  }
  return j;
}

// Advice from the chain: a lock's holder wherever the chain reaches it (the
// end of the chain is what to fix: a spawned process waiting for a lock a
// process outside the job holds), and, for the main thread's own write, a
// reader that does not read.
std::vector<std::string> chain_advice(const RuleContext& ctx, const ThreadWait& main_wait,
                                      const std::vector<Hop>& reached) {
  std::vector<std::string> out;
  auto add = [&](std::string a) {
    if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(std::move(a));
  };
  for (const auto& hop : reached) {
    if (out.size() >= 2) break;
    const WaitObject& via = ctx.object(hop.via);
    const bool first_hop =
        std::find(main_wait.objects.begin(), main_wait.objects.end(), hop.via) != main_wait.objects.end();
    const ThreadWait* rw = ctx.wait_of(hop.tid);
    if (!rw) continue;
    const int pid = ctx.pid_of(hop.tid);
    const std::string who = ctx.thread_label(pid);
    const bool outside = !ctx.in_tree(hop.tid);
    // The main thread writes (a pipe's write end, or a write call): whoever
    // holds the other end has to read.
    const bool main_writes =
        main_wait.wait_class == WaitClass::FdWrite || (via.kind == ObjectKind::Pipe && hop.via.size() > 2 &&
                                                       hop.via.compare(hop.via.size() - 2, 2, ":w") == 0);
    if (via.kind == ObjectKind::FileLock) {
      add(fmt::format(
          "{} holds the {} and {}: let it finish or end it (kill {}); if it should not hold the lock at all "
          "(a tool left running, another job on the same cache), give this job its own lock or cache "
          "directory.",
          who, via.label, rw->summary, pid));
    } else if (via.kind == ObjectKind::Futex && outside) {
      add(fmt::format(
          "{}, outside the job, shares the {} and may be the one holding it ({}): if it is, make it release "
          "it or end it (kill {}). A lock shared with processes outside the job needs a timeout on the "
          "acquire (acquire(timeout=...), sem_timedwait) so that the job fails loudly instead of hanging.",
          who, via.label, rw->summary, pid));
    } else if (first_hop && main_writes && is_data_object(via) && !attends_to(ctx, *rw, via)) {
      add(fmt::format(
          "{}{} holds the other end of {} and does not read or write it ({}): make it drain it (restart the "
          "reader, e.g. the log shipper), or send the job's output to a file instead of a pipe.",
          who, outside ? ", outside the job," : "", via.label, rw->summary));
    }
  }
  const bool waits_for_signal =
      main_wait.wait_class == WaitClass::Pause ||
      std::any_of(main_wait.objects.begin(), main_wait.objects.end(),
                  [&](const std::string& id) { return ctx.object(id).kind == ObjectKind::Signal; });
  if (waits_for_signal)
    out.push_back(
        "It waits for a signal and no process here is known to send one: find which process should (a "
        "launcher, a supervisor, a 'kill -USR1' in a script), or replace the wait for a signal with a wait "
        "on something that says who ends it.");
  return out;
}

}  // namespace

std::vector<Finding> no_progress_findings(const RuleContext& ctx) {
  std::vector<Finding> out;
  for (int main_tid : main_threads(ctx)) {
    const ThreadWait* w = ctx.wait_of(main_tid);
    if (!w) continue;
    // A poll moves a little all the time: judged by what it polls for, not
    // by how long its current sleep has lasted.
    const bool polls = w->poll_period_s.has_value();
    if (!polls && (moving(*w) || !w->blocked_s || *w->blocked_s < ctx.opt.stall_after_s)) continue;
    if (w->activity == Activity::Dead || covered(ctx, main_tid)) continue;
    const std::vector<Hop> reached = reached_from(ctx, main_tid);
    Judgement j = judge(ctx, *w, reached);
    if (j.progress) continue;
    // A poll's own sleeps say nothing of how long it has waited: what it
    // polls for must have stood still for --stall-after -- every holder off
    // CPU that long (a holder that ran since may have let go).
    if (polls && held_by_one_that_ran_recently(ctx, reached)) continue;
    // A poll for what the kernel does not show (a child's exit code, a file)
    // while the rest of the job works is most likely waiting on that work.
    if (polls && w->objects.empty() && job_is_working(ctx, main_tid)) continue;
    // Polling for a lock whose holders do not move: it will not get it.
    if (polls && !w->objects.empty()) j.may_end = false;
    if (polls && w->objects.empty())
      j.unknown.push_back(
          "what it polls for is nothing the kernel shows (a file to appear, a flag, a port): read the loop");

    Finding f(FindingKind::NoProgress);
    f.pids = {ctx.pid_of(main_tid)};
    f.tids = {main_tid};
    f.chain_tids = {main_tid};
    const bool timed_out_only = j.may_end && !j.terminal_input;
    f.severity = timed_out_only ? Severity::Warning : Severity::Critical;
    f.confidence = Confidence::Probable;

    // The wait, then each process that could end it and what it does instead.
    std::vector<std::string> instead;
    std::vector<int> named_pids;
    nlohmann::json releasers = nlohmann::json::array();
    for (const auto& hop : reached) {
      const int pid = ctx.pid_of(hop.tid);
      if (std::find(named_pids.begin(), named_pids.end(), pid) != named_pids.end()) continue;
      const ThreadWait* rw = ctx.wait_of(hop.tid);
      if (!rw) continue;
      named_pids.push_back(pid);
      if (named_pids.size() > kMaxNamedReleasers) continue;
      add_unique(f.chain_tids, hop.tid);
      const WaitObject& via = ctx.object(hop.via);
      const bool attending = attends_to(ctx, *rw, via);
      const std::string what = doing(*rw);
      const std::string who = ctx.thread_label(hop.tid);
      f.chain.push_back({via.label, "can be released by", who});
      f.chain.push_back({who, "is instead", attending ? what : fmt::format("not attending to it: {}", what)});
      instead.push_back(
          fmt::format("{} {}", who, attending ? what : fmt::format("does not read or write it: {}", what)));
      releasers.push_back({{"tid", hop.tid},
                           {"pid", pid},
                           {"via", via.name},
                           {"activity", activity_name(rw->activity)},
                           {"doing", rw->summary},
                           {"attending", attending}});
    }
    if (named_pids.size() > kMaxNamedReleasers)
      instead.push_back(fmt::format("and {} more processes", named_pids.size() - kMaxNamedReleasers));

    const std::string main_label = ctx.thread_label(main_tid);
    std::vector<ChainStep> head;
    if (w->objects.empty()) {
      head.push_back({main_label, "waits:", w->summary});
    } else {
      for (const auto& id : w->objects) {
        const WaitObject& o = ctx.object(id);
        head.push_back({main_label, "waits on", o.label});
        for (const auto& note : o.notes) head.push_back({o.label, "note", note});
      }
    }
    f.chain.insert(f.chain.begin(), head.begin(), head.end());

    std::string because;
    if (j.terminal_input)
      because = "it waits for input from a terminal: a person has to type";
    else if (!instead.empty())
      because =
          fmt::format("who could end it: {}{}", fmt::join(instead, "; "),
                      j.unknown.empty() ? "" : fmt::format("; unknown: {}", fmt::join(j.unknown, "; ")));
    else if (!j.unknown.empty())
      because = fmt::format("who can end it is unknown ({})", fmt::join(j.unknown, "; "));
    else
      because = "nothing hangtrace can see can end it";
    const ProcessInfo* main_process = ctx.snap.process(ctx.pid_of(main_tid));
    const ThreadInfo* main_thread = main_process ? main_process->thread(main_tid) : nullptr;
    std::string where;  // the innermost Python frame: where it waits
    if (main_thread)
      for (const auto& fr : main_thread->python_stack)
        if (fr.kind == UserFrame::Kind::Python) {
          where = fmt::format("{}:{} ({})", fr.file, fr.line, fr.function);
          break;
        }
    if (polls)
      f.summary = fmt::format("{} polls{}: {}; {}", main_label, where.empty() ? "" : " in " + where,
                              w->summary, because);
    else
      f.summary = fmt::format("{} has not moved for {}: {}; {}", main_label,
                              format_short_duration(*w->blocked_s), w->summary, because);
    ctx.add_thread_evidence(f, main_tid);
    if (!where.empty()) f.evidence.push_back("Python: " + where);
    if (polls && main_thread && main_thread->poll)
      f.evidence.push_back(
          fmt::format("watched {}: woke {} times, found asleep in {} of {} samples, {:.1f} ms of CPU",
                      format_short_duration(main_thread->poll->watched_s), main_thread->poll->sleeps,
                      main_thread->poll->asleep, main_thread->poll->samples,
                      static_cast<double>(main_thread->poll->cpu_ns) / 1e6));
    for (const auto& u : j.unknown) f.evidence.push_back("unknown: " + u);

    if (j.terminal_input)
      f.advice.push_back(
          "Give the job no terminal to read (stdin from /dev/null, or answer the prompt in its "
          "configuration: "
          "e.g. trust_remote_code, --yes), or type the answer in its terminal.");
    else if (polls && timed_out_only)
      f.advice.push_back(
          fmt::format("The loop{} re-checks something every ~{} and has not got it: find what it waits for "
                      "(a file, a lock "
                      "taken with LOCK_NB, a port, a flag another process sets) and why that does not come; "
                      "give the loop a "
                      "deadline so the job fails loudly.",
                      where.empty() ? "" : " at " + where, format_short_duration(*w->poll_period_s)));
    else if (timed_out_only)
      f.advice.push_back(
          "The wait may end by its own timeout; if the job keeps coming back to it, find what it waits for "
          "(the chain above) and why that does not come.");
    for (const auto& a : chain_advice(ctx, *w, reached)) f.advice.push_back(a);
    if (!j.terminal_input && !timed_out_only)
      f.advice.push_back(
          "Nothing on the chain above is moving: make the process at its end do its part (continue, read, "
          "release), or end it; hangtrace --duration 10 shows who wakes whom while it stays stuck.");
    f.details = {{"stalled_s", w->blocked_s ? nlohmann::json(*w->blocked_s) : nlohmann::json()},
                 {"polls", polls},
                 {"poll_period_s", polls ? nlohmann::json(*w->poll_period_s) : nlohmann::json()},
                 {"stall_after_s", ctx.opt.stall_after_s},
                 {"main_tid", main_tid},
                 {"activity", activity_name(w->activity)},
                 {"waits", w->summary},
                 {"objects", w->objects},
                 {"releasers", releasers},
                 {"unknown", j.unknown},
                 {"terminal_input", j.terminal_input}};
    out.push_back(std::move(f));
  }
  return out;
}

std::string progress_seen(const RuleContext& ctx) {
  std::vector<std::string> parts;
  for (int main_tid : main_threads(ctx)) {
    const ThreadWait* w = ctx.wait_of(main_tid);
    if (!w) continue;
    const std::string label = ctx.thread_label(main_tid);
    if (moving(*w)) {
      parts.push_back(fmt::format("{} ran between the samples", label));
    } else if (!w->blocked_s) {
      parts.push_back(fmt::format("{}: how long it has waited is unknown (no BPF view)", label));
    } else if (*w->blocked_s < ctx.opt.stall_after_s) {
      parts.push_back(fmt::format("{} last ran {} ago (under --stall-after {})", label,
                                  format_short_duration(*w->blocked_s),
                                  format_short_duration(ctx.opt.stall_after_s)));
    } else {
      parts.push_back(fmt::format("{} has waited {}, on work that is moving", label,
                                  format_short_duration(*w->blocked_s)));
    }
    if (parts.size() >= 4) break;
  }
  return fmt::format("{}", fmt::join(parts, "; "));
}

}  // namespace hangtrace::rules
