// The job's resources: shm-exhausted (the snapshot's /dev/shm), and from a
// live window process-killed (the OOM killer, SIGBUS on a full /dev/shm, a
// signal) and memory-growth.
#include <signal.h>

#include <fmt/format.h>

#include <cstring>

#include "hangtrace/text.h"
#include "rules.h"

namespace hangtrace::rules {

std::vector<Finding> shm_exhausted_findings(const RuleContext& ctx) {
  const ShmInfo& shm = ctx.snap.shm;
  if (!shm.available || shm.size_bytes == 0) return {};
  double ratio = static_cast<double>(shm.used_bytes) / static_cast<double>(shm.size_bytes);
  if (ratio < ctx.opt.shm_full_ratio) return {};
  Finding f(FindingKind::ShmExhausted);
  f.confidence = Confidence::Certain;
  f.summary = fmt::format(
      "{} is {:.0f}% full ({} of {}): DataLoader workers cannot hand over tensors "
      "(they block or die of SIGBUS)",
      shm.mount_path.empty() ? "/dev/shm" : shm.mount_path, ratio * 100, format_bytes(shm.used_bytes),
      format_bytes(shm.size_bytes));
  nlohmann::json segments = nlohmann::json::array();
  for (const auto& seg : shm.largest) {
    segments.push_back({{"name", seg.name}, {"size_bytes", seg.allocated_bytes}, {"pids", seg.mapped_by}});
    for (int pid : seg.mapped_by) add_unique(f.pids, pid);
    f.evidence.push_back(fmt::format("{} {} held by {}", seg.name, format_bytes(seg.allocated_bytes),
                                     seg.mapped_by.empty()
                                         ? std::string("nobody (leaked)")
                                         : fmt::format("pids {}", fmt::join(seg.mapped_by, ", "))));
  }
  if (shm.unlinked_mapped_bytes)
    f.evidence.push_back(fmt::format("{} in unlinked segments still mapped (torch shared tensors)",
                                     format_bytes(shm.unlinked_mapped_bytes)));
  f.details["size_bytes"] = shm.size_bytes;
  f.details["used_bytes"] = shm.used_bytes;
  f.details["segments"] = segments;
  f.advice = {
      "Give the container a bigger /dev/shm: docker run --shm-size=16g (Kubernetes: an emptyDir with "
      "medium: Memory mounted at /dev/shm).",
      "Or torch.multiprocessing.set_sharing_strategy('file_system'), fewer num_workers / a smaller "
      "prefetch_factor, and don't keep whole batches alive longer than needed.",
  };
  return {std::move(f)};
}

// ---- process-killed ------------------------------------------------------------------
namespace {

const ProcessMeta* meta_of(const LiveObservation& live, int pid) {
  auto it = live.meta.find(pid);
  return it == live.meta.end() ? nullptr : &it->second;
}

// Killed by the OOM killer: in which memory cgroup, at what limit, how big.
void describe_oom_kill(Finding& f, nlohmann::json& details, const ProcessDeath& d, const ProcessMeta* meta,
                       const std::string& who) {
  std::string where = "the system";
  std::optional<uint64_t> limit;
  if (meta && meta->memory_limit_bytes) limit = meta->memory_limit_bytes;
  // The kernel's own figure, taken at the kill, when userspace had none
  // (a cgroup without a limit reads as PAGE_COUNTER_MAX pages, beyond this).
  constexpr uint64_t kNoLimitFrom = 1ull << 60;
  if (!limit && d.oom && d.oom->memcg_limit_bytes && d.oom->memcg_limit_bytes < kNoLimitFrom)
    limit = d.oom->memcg_limit_bytes;
  if (meta && !meta->memory_cgroup.empty()) {
    details["cgroup"] = meta->memory_cgroup;
    where = fmt::format("memory cgroup {}", meta->memory_cgroup);
  }
  if (limit) {
    details["limit_bytes"] = *limit;
    where += fmt::format(" (limit {})", format_bytes(*limit));
  }
  uint64_t rss_kb = d.oom ? d.oom->anon_rss_kb + d.oom->file_rss_kb + d.oom->shmem_rss_kb : 0;
  f.summary = fmt::format("{} was killed by the OOM killer in {}{}", who, where,
                          rss_kb ? fmt::format(" with {} resident", format_bytes(rss_kb << 10)) : "");
  if (d.oom)
    f.evidence.push_back(fmt::format("oom:mark_victim: anon {} file {} shmem {}, oom_score_adj {}",
                                     format_bytes(d.oom->anon_rss_kb << 10),
                                     format_bytes(d.oom->file_rss_kb << 10),
                                     format_bytes(d.oom->shmem_rss_kb << 10), d.oom->oom_score_adj));
  f.advice = {
      "Find what grows: keep losses as loss.item() (or loss.detach()), not the tensor with its "
      "autograd graph; "
      "don't accumulate outputs across steps.",
      "Fewer DataLoader workers / smaller prefetch_factor (each worker holds its own copy of the "
      "dataset "
      "state), or raise the memory limit of the job's cgroup/container.",
  };
}

void describe_shm_sigbus(Finding& f, const ProcessDeath& d, uint64_t shm_used, uint64_t shm_size,
                         const std::string& who) {
  f.summary = fmt::format("{} died of SIGBUS writing to a full /dev/shm ({} of {} used)", who,
                          format_bytes(shm_used), format_bytes(shm_size));
  for (const auto& t : d.shm_trouble)
    f.evidence.push_back(fmt::format("/dev/shm {} {}{} by tid {}", shm_op_name(t.shm_op),
                                     t.name.empty() ? "" : t.name + " ",
                                     t.addr ? fmt::format("at {:#x}", t.addr) : "", t.tid));
  f.advice = {
      "Give the container a bigger /dev/shm: docker run --shm-size=16g (Kubernetes: an emptyDir with "
      "medium: Memory at /dev/shm).",
      "Or torch.multiprocessing.set_sharing_strategy('file_system'), fewer num_workers / a smaller "
      "prefetch_factor, and don't keep batches alive longer than needed.",
  };
}

// Any other fatal signal: who sent it, or the kernel for a fault.
void describe_signal_kill(Finding& f, nlohmann::json& details, const ProcessDeath& d,
                          const std::string& who) {
  std::string from;
  if (d.fatal_signal && d.fatal_signal->sender_tgid && d.fatal_signal->sender_tgid != d.pid) {
    details["sender_pid"] = d.fatal_signal->sender_tgid;
    from = fmt::format(" sent by {} ({})", d.fatal_signal->sender_tgid, d.fatal_signal->sender_comm);
  } else if (d.fatal_signal && d.fatal_signal->si_code == SI_KERNEL) {
    from = " raised by the kernel (a fault in the process itself)";
  }
  f.summary = fmt::format("{} was killed by signal {}{}", who, strsignal(d.signal), from);
  f.advice = {
      "Find out why the sender stopped it (its logs), or run the worker under a debugger / with "
      "faulthandler enabled to see where it faulted."};
}

Finding process_killed(const RuleContext& ctx, const ProcessDeath& d) {
  const LiveObservation& live = *ctx.live;
  Finding f(FindingKind::ProcessKilled);
  f.confidence = Confidence::Certain;
  add_unique(f.pids, d.pid);
  const ProcessMeta* meta = meta_of(live, d.pid);
  std::string who = ctx.process_label(d.pid, d.comm);
  nlohmann::json details;
  details["pid"] = d.pid;
  details["signal"] = d.oom_victim && d.signal == 0 ? SIGKILL : d.signal;
  details["sender_pid"] = nullptr;
  details["cgroup"] = nullptr;
  details["limit_bytes"] = nullptr;
  // Its /dev/shm as the live window last read it, else the snapshot's.
  auto shm_usage = live.shm_usage.find(d.pid);
  uint64_t shm_used = shm_usage != live.shm_usage.end() ? shm_usage->second.first : ctx.snap.shm.used_bytes;
  uint64_t shm_size = shm_usage != live.shm_usage.end() ? shm_usage->second.second : ctx.snap.shm.size_bytes;
  details["shm_used_bytes"] = shm_used;
  details["shm_size_bytes"] = shm_size;
  std::string cause;
  if (d.oom_victim) {
    cause = "oom-killer";
    describe_oom_kill(f, details, d, meta, who);
  } else if (d.signal == SIGBUS &&
             (!d.shm_trouble.empty() ||
              (shm_size && static_cast<double>(shm_used) / shm_size >= ctx.opt.shm_full_ratio))) {
    cause = "sigbus-shm";
    describe_shm_sigbus(f, d, shm_used, shm_size, who);
  } else {
    cause = "signal";
    describe_signal_kill(f, details, d, who);
  }
  details["cause"] = cause;
  if (meta && !meta->cmdline.empty()) f.evidence.push_back("command: " + meta->cmdline);
  if (d.fatal_signal)
    f.evidence.push_back(fmt::format("signal {} generated by {} ({}), si_code {}", d.fatal_signal->sig,
                                     d.fatal_signal->sender_tgid, d.fatal_signal->sender_comm,
                                     d.fatal_signal->si_code));
  f.details = details;
  return f;
}

}  // namespace

std::vector<Finding> process_killed_findings(const RuleContext& ctx) {
  std::vector<Finding> out;
  if (!ctx.live) return out;
  for (const auto& d : ctx.live->deaths)
    if (d.signal != 0 || d.oom_victim) out.push_back(process_killed(ctx, d));
  return out;
}

// ---- memory-growth ---------------------------------------------------------------------
std::vector<Finding> memory_growth_findings(const RuleContext& ctx) {
  std::vector<Finding> out;
  if (!ctx.live) return out;
  for (const auto& [pid, s] : ctx.live->rss) {
    if (s.samples < 2 || s.last_bytes <= s.first_bytes) continue;
    uint64_t growth = s.last_bytes - s.first_bytes;
    if (growth < ctx.opt.memory_growth_min_bytes ||
        growth < static_cast<uint64_t>(ctx.opt.memory_growth_min_ratio * static_cast<double>(s.first_bytes)))
      continue;
    double secs = s.last_ts_ns > s.first_ts_ns ? (s.last_ts_ns - s.first_ts_ns) / 1e9 : 0;
    double rate = secs > 0 ? growth / secs : 0;
    Finding f(FindingKind::MemoryGrowth);
    f.confidence = Confidence::Certain;
    f.severity = pid == ctx.snap.target_pid ? Severity::Critical : Severity::Warning;
    add_unique(f.pids, pid);
    std::string who = ctx.process_label(pid, s.comm);
    f.summary = fmt::format("{} grew its resident memory by {} in {:.1f} s ({}/s, {} -> {})", who,
                            format_bytes(growth), secs, format_bytes(static_cast<uint64_t>(rate)),
                            format_bytes(s.first_bytes), format_bytes(s.last_bytes));
    const ProcessMeta* meta = meta_of(*ctx.live, pid);
    if (meta && meta->memory_limit_bytes && rate > 0 && *meta->memory_limit_bytes > s.last_bytes) {
      double left = (*meta->memory_limit_bytes - s.last_bytes) / rate;
      f.evidence.push_back(fmt::format("at this rate it reaches the cgroup limit of {} in {:.0f} s",
                                       format_bytes(*meta->memory_limit_bytes), left));
    }
    f.evidence.push_back(fmt::format("{} RSS samples", s.samples));
    f.details = {{"pid", pid},
                 {"rss_start_bytes", s.first_bytes},
                 {"rss_end_bytes", s.last_bytes},
                 {"growth_bytes_per_s", rate}};
    f.advice = {
        "A training loop that keeps tensors with their autograd graph grows without bound: log "
        "loss.item() (or loss.detach().cpu()), not loss; don't append outputs/losses to lists across "
        "steps.",
        "Check for caches keyed by batch, and for DataLoader workers copying a large dataset object "
        "(copy-on-read of Python objects).",
    };
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace hangtrace::rules
