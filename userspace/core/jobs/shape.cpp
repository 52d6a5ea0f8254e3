// A job's shape from its snapshot: launcher, ranks and their workers, and
// what each named pid is in it (jobs.h).
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "hangtrace/collectives.h"
#include "hangtrace/jobs.h"

namespace hangtrace::jobs {

namespace {

// The process of `snap` whose subtree holds `pid` and that is a rank, or null.
const ProcessInfo* rank_above(const Snapshot& snap, int pid) {
  // Bounded by the tree's size: a ppid loop in a hostile snapshot ends it.
  for (size_t step = 0; step <= snap.processes.size(); ++step) {
    const ProcessInfo* p = snap.process(pid);
    if (!p || p->role == ProcessRole::Peer) return nullptr;
    if (is_rank_process(snap, *p)) return p;
    if (p->pid == snap.target_pid) return nullptr;
    pid = p->ppid;
  }
  return nullptr;
}

bool runs_dataloader(const ProcessInfo& p) {
  for (const auto& t : p.threads)
    for (const auto& f : t.python_stack)
      if (f.file.find("torch/utils/data/_utils/worker.py") != std::string::npos) return true;
  return false;
}

std::string rank_name(const ProcessInfo& p) {
  std::string s = fmt::format("rank {}", *p.rank);
  if (p.local_rank) s += fmt::format(" (local rank {})", *p.local_rank);
  return s;
}

}  // namespace

bool is_rank_process(const Snapshot& snap, const ProcessInfo& p) {
  if (p.role == ProcessRole::Peer || !p.rank) return false;
  const ProcessInfo* parent = snap.process(p.ppid);
  return !(parent && parent->role != ProcessRole::Peer && parent->rank == p.rank);
}

bool is_launcher(const Snapshot& snap, const ProcessInfo& p) {
  if (p.pid != snap.target_pid || p.rank) return false;
  for (int child : p.children)
    if (const ProcessInfo* c = snap.process(child); c && is_rank_process(snap, *c)) return true;
  return false;
}

JobShape job_shape(const Snapshot& snap) {
  JobShape shape;
  shape.root = snap.target_pid;
  std::map<int, RankGroup> by_rank_pid;
  for (const auto& p : snap.processes) {
    if (!is_rank_process(snap, p)) continue;
    RankGroup g;
    g.rank = *p.rank;
    g.local_rank = p.local_rank;
    g.world_size = p.world_size;
    g.source = p.rank_source;
    g.backend = collective_backend(p);
    g.pid = p.pid;
    by_rank_pid.emplace(p.pid, std::move(g));
  }
  for (const auto& p : snap.processes) {
    if (by_rank_pid.count(p.pid)) continue;
    if (const ProcessInfo* r = rank_above(snap, p.pid)) by_rank_pid[r->pid].workers.push_back(p.pid);
  }
  for (auto& [pid, g] : by_rank_pid) shape.ranks.push_back(std::move(g));
  std::sort(shape.ranks.begin(), shape.ranks.end(), [](const RankGroup& a, const RankGroup& b) {
    return std::tie(a.rank, a.pid) < std::tie(b.rank, b.pid);
  });
  if (const ProcessInfo* root = snap.process(snap.target_pid); root && is_launcher(snap, *root))
    shape.launcher = root->pid;
  return shape;
}

std::string member_role(const Snapshot& snap, int pid) {
  const ProcessInfo* p = snap.process(pid);
  const int job = snap.target_pid;
  if (!p) return fmt::format("not in job {}", job);
  if (p->role == ProcessRole::Peer) return fmt::format("a peer of job {} (the other end of its waits)", job);
  if (pid == job) {
    if (is_launcher(snap, *p)) return fmt::format("the launcher of job {} ({})", job, p->comm);
    return p->rank ? fmt::format("{} and the root of job {}", rank_name(*p), job)
                   : fmt::format("the main process of job {}", job);
  }
  if (is_rank_process(snap, *p)) return fmt::format("{} of job {}", rank_name(*p), job);
  const char* kind = runs_dataloader(*p) ? "a DataLoader worker" : "a worker";
  if (const ProcessInfo* r = rank_above(snap, pid))
    return fmt::format("{} of rank {} of job {}", kind, *r->rank, job);
  if (p->ppid == job) return fmt::format("{} of job {}", kind, job);
  return fmt::format("a descendant of job {} (child of {})", job, p->ppid);
}

}  // namespace hangtrace::jobs
