// process-killed from the kernel's own log: a process of the job that the
// OOM killer took, that segfaulted or trapped, or that a machine-check or an
// NVIDIA Xid error hit -- before hangtrace attached, when no live window saw
// it die. Joined to the job by pid (a process of the snapshot) or by memory
// cgroup (one of the job's processes' own), and only since the job started.
#include <fmt/format.h>

#include <set>

#include "hangtrace/jobs.h"
#include "hangtrace/text.h"
#include "rules.h"

namespace hangtrace::rules {

namespace {

// The memory cgroups the job's own processes are in: the root and a
// container's "/" name every process, never one job.
std::set<std::string> job_memory_cgroups(const Snapshot& snap) {
  std::set<std::string> out;
  for (const auto& p : snap.processes)
    if (p.role != ProcessRole::Peer && !p.memory_cgroup.empty() && p.memory_cgroup != "/")
      out.insert(p.memory_cgroup);
  return out;
}

// Seconds since the oldest process of the job started; nullopt if unknown.
std::optional<double> job_age_s(const Snapshot& snap) {
  std::optional<double> age;
  for (const auto& p : snap.processes)
    if (p.role != ProcessRole::Peer && p.age_s) age = std::max(age.value_or(0), *p.age_s);
  return age;
}

bool died_of(KernelLogEvent::Kind k) { return k != KernelLogEvent::Kind::HungTask; }

std::string what_happened(const KernelLogEvent& e) {
  switch (e.kind) {
    case KernelLogEvent::Kind::OomKill:
      return "was killed by the OOM killer";
    case KernelLogEvent::Kind::Segfault:
      return "died of a segfault";
    case KernelLogEvent::Kind::Trap:
      return "died of a trap (a fault the kernel raised)";
    case KernelLogEvent::Kind::MemoryFailure:
      return "was killed for a hardware memory error";
    case KernelLogEvent::Kind::GpuXid:
      return fmt::format("hit NVIDIA Xid {}", e.xid);
    case KernelLogEvent::Kind::HungTask:
      return "hung in the kernel";
  }
  return "died";
}

}  // namespace

std::vector<Finding> kernel_log_death_findings(const RuleContext& ctx) {
  std::vector<Finding> out;
  if (ctx.snap.kernel_log_read_at_s <= 0) return out;
  const std::set<std::string> cgroups = job_memory_cgroups(ctx.snap);
  const std::optional<double> job_age = job_age_s(ctx.snap);
  std::set<int> seen_live;
  if (ctx.live)
    for (const auto& d : ctx.live->deaths) seen_live.insert(d.pid);
  for (const auto& e : ctx.snap.kernel_events) {
    if (!died_of(e.kind) || e.pid <= 0 || seen_live.count(e.pid)) continue;
    const double ago = ctx.snap.kernel_log_read_at_s - static_cast<double>(e.ts_us) / 1e6;
    // Before the job's oldest process started: another job's (a pid reused).
    if (ago < 0 || (job_age && ago > *job_age + 1.0)) continue;
    const ProcessInfo* p = ctx.snap.process(e.pid);
    const bool by_pid = p && p->role != ProcessRole::Peer;
    const bool by_cgroup = !e.memcg.empty() && cgroups.count(e.memcg);
    if (!by_pid && !by_cgroup) continue;
    Finding f(FindingKind::ProcessKilled);
    f.confidence = Confidence::Certain;
    f.severity = Severity::Critical;
    f.pids = {e.pid};
    std::string who = p ? jobs::member_role(ctx.snap, e.pid) : "";
    who = fmt::format("{} ({}){}", e.pid, e.comm.empty() ? "?" : e.comm, who.empty() ? "" : ", " + who);
    std::string where;
    if (!e.memcg.empty()) where = fmt::format(" in memory cgroup {}", e.memcg);
    if (e.limit_bytes) where += fmt::format(" (limit {})", format_bytes(*e.limit_bytes));
    f.summary = fmt::format("{} {}{} {} ago, before hangtrace attached (the kernel log)", who,
                            what_happened(e), where, format_seconds(ago));
    if (!p) {
      // The job's ranks here, against its world size: which rank is gone
      // is what the survivors' collective wait says.
      jobs::JobShape shape = jobs::job_shape(ctx.snap);
      if (!shape.ranks.empty() && shape.ranks.front().world_size &&
          static_cast<int>(shape.ranks.size()) < *shape.ranks.front().world_size)
        f.evidence.push_back(fmt::format("the job has {} of its {} ranks on this host now",
                                         shape.ranks.size(), *shape.ranks.front().world_size));
      f.evidence.push_back(
          fmt::format("pid {} is gone: it was in the job's memory cgroup {}", e.pid, e.memcg));
    }
    f.evidence.push_back("kernel: " + e.message);
    f.details = {{"pid", e.pid},
                 {"comm", e.comm},
                 {"event", kernel_log_event_name(e.kind)},
                 {"source", "kernel log"},
                 {"ago_s", ago},
                 {"cgroup", e.memcg.empty() ? nlohmann::json(nullptr) : nlohmann::json(e.memcg)},
                 {"limit_bytes", e.limit_bytes ? nlohmann::json(*e.limit_bytes) : nlohmann::json(nullptr)},
                 {"message", e.message}};
    if (e.kind == KernelLogEvent::Kind::OomKill)
      f.advice = {
          "Find what grows: keep losses as loss.item() (or loss.detach()), not the tensor with its autograd "
          "graph; don't accumulate outputs across steps; fewer DataLoader workers or a smaller "
          "prefetch_factor; or raise the memory limit of the job's cgroup/container.",
          "The processes that waited for it wait forever: give collectives and queue reads a timeout "
          "(init_process_group(timeout=...), DataLoader(timeout=...)) so a death fails the job loudly."};
    else if (e.kind == KernelLogEvent::Kind::GpuXid)
      f.advice = {
          "An Xid is the GPU or its driver failing: the message names it (79: the GPU fell off the bus, "
          "48/63/64/94/95: ECC errors, 13/31/43: the program's fault); drain the node for the hardware "
          "ones and restart the job from a checkpoint."};
    else
      f.advice = {
          "A native crash: run the job with PYTHONFAULTHANDLER=1 (and a core dump) to see where; the "
          "other processes that waited for it wait forever unless their waits have a timeout."};
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace hangtrace::rules
