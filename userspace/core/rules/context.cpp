// The helpers every rule family words its findings with (context.h).
#include "context.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <map>

#include "hangtrace/jobs.h"
#include "hangtrace/text.h"

namespace hangtrace {

std::string job_role_label(const Snapshot& snapshot, const ProcessInfo* p) {
  if (!p) return "process";
  if (p->role == ProcessRole::Peer) return "peer";
  if (p->role == ProcessRole::Target) return jobs::is_launcher(snapshot, *p) ? "launcher" : "main";
  if (jobs::is_rank_process(snapshot, *p)) return fmt::format("rank {}", *p->rank);
  if (p->ppid == snapshot.target_pid) return "worker";
  const ProcessInfo* parent = snapshot.process(p->ppid);
  return parent && jobs::is_rank_process(snapshot, *parent) ? "worker" : "descendant";
}

namespace {

// Any thread of `p` has a Python frame in a file ending `file`.
bool runs_python_file(const ProcessInfo& p, std::string_view file) {
  for (const auto& t : p.threads)
    for (const auto& f : t.python_stack)
      if (f.kind == UserFrame::Kind::Python && std::string_view(f.file).ends_with(file)) return true;
  return false;
}

}  // namespace

std::string job_role_text(const Snapshot& snapshot, const ProcessInfo* p) {
  std::string role = job_role_label(snapshot, p);
  if (!p || (role != "worker" && role != "descendant")) return role;
  if (runs_python_file(*p, "torch/utils/data/_utils/worker.py")) return "DataLoader worker";
  if (runs_python_file(*p, "multiprocessing/process.py") || jobs::is_multiprocessing_exec_child(p->cmdline))
    return "multiprocessing child";
  const ProcessInfo* parent = snapshot.process(p->ppid);
  if (parent && !p->cmdline.empty() && !parent->cmdline.empty() &&
      (p->cmdline != parent->cmdline || p->exe != parent->exe))
    return "subprocess";
  return role;
}

namespace rules {

void add_unique(std::vector<int>& v, int x) {
  if (std::find(v.begin(), v.end(), x) == v.end()) v.push_back(x);
}

// ---- lookups ----------------------------------------------------------------------
const ThreadWait* RuleContext::wait_of(int tid) const {
  auto it = graph.threads.find(tid);
  return it == graph.threads.end() ? nullptr : &it->second;
}

int RuleContext::pid_of(int tid) const {
  auto it = graph.tid_to_pid.find(tid);
  return it == graph.tid_to_pid.end() ? tid : it->second;
}

bool RuleContext::in_tree(int tid) const {
  const ProcessInfo* p = snap.process(pid_of(tid));
  return p && p->role != ProcessRole::Peer;
}

Confidence RuleContext::confidence_for(const std::vector<int>& tids) const {
  for (int t : tids)
    if (!knot.strict.count(t)) return Confidence::Probable;
  return Confidence::Certain;
}

// ---- labels -------------------------------------------------------------------------
std::string RuleContext::thread_label(int tid) const {
  int pid = pid_of(tid);
  const ProcessInfo* p = snap.process(pid);
  const std::string role = job_role_text(snap, p);
  std::string comm = p ? p->comm : "?";
  if (tid == pid) return fmt::format("{} {} ({})", role, pid, comm);
  std::string tcomm;
  if (p)
    for (const auto& t : p->threads)
      if (t.tid == tid) tcomm = t.comm;
  return fmt::format("thread {} ({}) of {} {}", tid, tcomm, role, pid);
}

std::string RuleContext::releaser_label(const WaitObject& o, int tid) const {
  const size_t count = releaser_count(o);
  size_t others = count > 1 ? count - 1 : 0;
  return others ? fmt::format("{} (or {} other thread{})", thread_label(tid), others, others > 1 ? "s" : "")
                : thread_label(tid);
}

std::string RuleContext::process_label(int pid, const std::string& comm) const {
  if (snap.process(pid)) return thread_label(pid);
  std::string role = pid == snap.target_pid ? "main" : "process";
  if (const ProcessInfo* p = snap.process(snap.target_pid)) {
    for (int c : p->children)
      if (c == pid) role = "worker";
  }
  if (live) {
    for (const auto& [fpid, m] : live->meta)
      if (fpid == pid && role == "process") role = "traced process";
  }
  return fmt::format("{} {} ({})", role, pid, comm);
}

// ---- chains -------------------------------------------------------------------------
WaitPath RuleContext::wait_path(int from, int to) const {
  if (from == to) return {};
  std::map<int, Hop> parent;  // tid -> (previous tid, via object)
  std::deque<int> q{from};
  parent[from] = {from, ""};
  ReleaserWalk walk(graph);
  walk.mark(from);
  while (!q.empty()) {
    int t = q.front();
    q.pop_front();
    if (t == to) break;
    const ThreadWait* w = wait_of(t);
    if (!w) continue;
    for (const auto& id : w->objects)
      for (int r : walk.expand(object(id))) {
        parent[r] = {t, id};
        q.push_back(r);
      }
  }
  if (!parent.count(to)) return {};
  WaitPath path;
  for (int t = to; t != from; t = parent[t].tid) path.push_back({t, parent[t].via});
  std::reverse(path.begin(), path.end());
  return path;
}

std::vector<ChainStep> RuleContext::chain_steps(int from, const WaitPath& path) const {
  std::vector<ChainStep> steps;
  int prev = from;
  for (const auto& [t, via] : path) {
    const WaitObject& o = object(via);
    steps.push_back({thread_label(prev), "waits on", o.label});
    steps.push_back({o.label, "can be released by", releaser_label(o, t)});
    prev = t;
  }
  return steps;
}

bool RuleContext::reachable_from_main(int tid) const {
  return tid == snap.target_pid || !wait_path(snap.target_pid, tid).empty();
}

bool RuleContext::runs_python(int tid, std::string_view file, std::string_view function) const {
  const ProcessInfo* p = snap.process(pid_of(tid));
  const ThreadInfo* t = p ? p->thread(tid) : nullptr;
  if (!t) return false;
  for (const auto& f : t->python_stack) {
    if (f.kind != UserFrame::Kind::Python || !std::string_view(f.file).ends_with(file)) continue;
    if (function.empty()) return true;
    const std::string_view fn(f.function);  // "Popen.wait" (3.11+) and "wait" alike
    if (fn == function || (fn.ends_with(function) && fn[fn.size() - function.size() - 1] == '.')) return true;
  }
  return false;
}

bool RuleContext::is_fork_child(int pid) const {
  const ProcessInfo* p = snap.process(pid);
  const ProcessInfo* parent = p ? snap.process(p->ppid) : nullptr;
  return parent && !p->cmdline.empty() && p->cmdline == parent->cmdline && p->exe == parent->exe;
}

void RuleContext::add_main_chain(Finding& f, int cause_tid, const std::string& cause_object) const {
  const int main_tid = snap.target_pid;
  WaitPath path = wait_path(main_tid, cause_tid);
  if (!path.empty() || main_tid == cause_tid) {
    f.chain = chain_steps(main_tid, path);
    f.details["main_waits_on_it"] = true;
    f.chain_tids = {main_tid};
    for (const auto& hop : path) add_unique(f.chain_tids, hop.tid);
  }
  if (!cause_object.empty())
    f.chain.push_back({thread_label(cause_tid), "waits on", object(cause_object).label});
}

std::vector<ChainStep> RuleContext::chain_from(int tid) const {
  std::string label = thread_label(tid);
  for (const auto& f : findings)
    for (size_t i = 0; i < f.chain.size(); ++i)
      if (f.chain[i].from == label) return {f.chain.begin() + static_cast<long>(i), f.chain.end()};
  std::vector<ChainStep> steps;
  const ThreadWait* w = wait_of(tid);
  if (!w) return steps;
  if (!w->objects.empty()) {
    const WaitObject& o = object(w->objects.front());
    steps.push_back({label, "waits on", o.label});
    if (auto first = first_releaser(graph, o))
      steps.push_back({o.label, "can be released by", releaser_label(o, *first)});
    for (const auto& note : o.notes) steps.push_back({o.label, "note", note});
  }
  if (steps.empty() && !w->summary.empty()) steps.push_back({label, "waits:", w->summary});
  return steps;
}

// ---- evidence -------------------------------------------------------------------------
void RuleContext::add_thread_evidence(Finding& f, int tid) const {
  const ThreadWait* w = wait_of(tid);
  if (!w) return;
  std::string line = fmt::format("{} {} in {} {}", thread_label(tid), activity_name(w->activity),
                                 w->syscall_text.empty() ? "?" : w->syscall_text, for_duration(w->blocked_s));
  if (!w->kernel_stack.empty()) {
    std::vector<std::string> top(w->kernel_stack.begin(),
                                 w->kernel_stack.begin() + std::min<size_t>(4, w->kernel_stack.size()));
    line += fmt::format("; kernel: {}", fmt::join(top, " <- "));
  }
  f.evidence.push_back(line);
}

}  // namespace rules
}  // namespace hangtrace
