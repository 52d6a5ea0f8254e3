// The daemon's jobs: which processes the selectors match (a scan of /proc
// every --scan-every), the processes each job has (followed on fork, dropped
// on exit), and what is kept of the dead for the next bundles.
#include "daemon.h"

#include <linux/capability.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "hangtrace/bundle.h"
#include "hangtrace/procfs.h"
#include "hangtrace/text.h"
#include "process_meta.h"
#include "task_iter.h"

namespace hangtrace::cli {

void Daemon::add_process(Job& job, int pid, bool from_fork) {
  if (pid <= 0 || !job.pids.insert(pid).second) return;
  job_of_[pid] = job.root;
  role_of_[pid] = pid == job.root ? "main" : "worker";
  if (!from_fork) tracer_->trace_tgid(pid);
  // A forked worker has its parent's command line and cgroup: read only what
  // was not forked (a fork per worker per epoch must stay cheap).
  auto root_meta = job.meta.find(job.root);
  if (from_fork && root_meta != job.meta.end()) {
    ProcessMeta m = root_meta->second;
    m.pid = pid;
    job.meta[pid] = std::move(m);
  } else {
    job.meta[pid] = read_process_meta(pid);
  }
  log(1, fmt::format("job {}: process {} joins ({})", job.root, pid, from_fork ? "forked" : "found"));
}

void Daemon::drop_process(int pid) {
  auto owner = job_of_.find(pid);
  if (owner == job_of_.end()) return;
  int root = owner->second;
  job_of_.erase(owner);
  forget_after_metrics_.push_back(pid);
  log(1, fmt::format("job {}: process {} leaves", root, pid));
  if (auto it = jobs_.find(root); it != jobs_.end()) {
    Job& job = it->second;
    // What is known of the dead stays for the next bundles (its death's), a
    // bounded number of them.
    if (auto m = job.meta.find(pid); m != job.meta.end() && pid != root) {
      job.dead_meta.push_back(std::move(m->second));
      job.meta.erase(m);
      if (job.dead_meta.size() > 64) job.dead_meta.pop_front();
    }
    it->second.pids.erase(pid);
  }
}

void Daemon::pick_up(int root, const std::vector<daemon::ProcessEntry>& processes) {
  auto entry = std::find_if(processes.begin(), processes.end(), [&](const auto& p) { return p.pid == root; });
  if (entry == processes.end()) return;
  if (ended_jobs_.count({root, entry->start_ticks})) return;
  Job job(*entry);
  job.recorder =
      std::make_unique<daemon::FlightRecorder>(static_cast<uint64_t>(options_.recorder_minutes * 60e9),
                                               options_.recorder_records, options_.recorder_bytes);
  job.watch = std::make_unique<daemon::ProgressWatch>(static_cast<uint64_t>(options_.hang_after_s * 1e9));
  job.tracked_since_ns = now_ns();
  auto& j = jobs_.emplace(root, std::move(job)).first->second;
  add_process(j, root, false);
  for (int pid : daemon::descendants_of(root, processes)) add_process(j, pid, false);
  report_gpu_hook_errors();
  log(0, fmt::format("tracking job {} ({}): {}; {} process(es)", root, j.comm, j.matched_by, j.pids.size()));
}

void Daemon::end_job(int root, const std::string& why) {
  auto it = jobs_.find(root);
  if (it == jobs_.end()) return;
  Job& job = it->second;
  write_due_incidents(job, ~0ull);  // every pending one, now
  for (int pid : std::vector<int>(job.pids.begin(), job.pids.end())) drop_process(pid);
  ended_jobs_.insert({root, job.start_ticks});
  log(0, fmt::format("job {} ({}) ended: {}", root, job.comm, why));
  jobs_.erase(root);
}

void Daemon::report_gpu_hook_errors() {
  // The tracer finds the GPU libraries the jobs map (ModuleRescan::UntilCuda).
  // A library whose uprobes failed is said once: otherwise only its bundles
  // would tell ("0 uprobes").
  for (const auto& h : tracer_->hooks()) {
    if (h.concern != "gpu" || h.active || h.reason.empty() || h.reason.starts_with("standby") ||
        !reported_hook_errors_.insert(h.attach).second)
      continue;
    bool denied = h.reason.find("Permission denied") != std::string::npos && !has_capability(CAP_SYS_ADMIN);
    log(0, fmt::format(
               "warning: {}: {}{}", h.attach, h.reason,
               denied ? " (this kernel allows uprobes only with CAP_SYS_ADMIN: see docs/deploy.md)" : ""));
  }
}

std::string identity_pass_mismatch(const procfs::ProcFs& proc) {
  // It sees the initial pid and time namespaces; /proc shows the daemon's.
  auto identities = sample_process_identities();
  if (!identities) return fmt::format("failed: {}", identities.error());
  auto self = proc.stat(getpid());
  if (!self) return fmt::format("cannot be checked: {}", self.error());
  for (const auto& st : *identities)
    if (st.pid == getpid())
      return st.start_time_ticks == self->start_time_ticks && st.ppid == self->ppid && st.comm == self->comm
                 ? ""
                 : "sees this process with another start time or parent (another time or pid namespace)";
  return "does not see this process under its pid here (another pid namespace)";
}

void Daemon::say_cut_cmdlines(const std::vector<daemon::ProcessEntry>& processes) {
  if (!matcher_->wants_cmdline()) return;
  constexpr size_t kSaidAtDefault = 5;
  std::map<int, uint64_t> still;
  for (const auto& p : processes) {
    if (!p.cmdline_cut || !p.matched_by.empty()) continue;
    still[p.pid] = p.start_ticks;
    auto said = cut_said_.find(p.pid);
    if (said != cut_said_.end() && said->second == p.start_ticks) continue;
    log(cut_lines_ < kSaidAtDefault ? 0 : 1,
        fmt::format(
            "pid {} ({}): its command line is longer than {}; --match searched its first {} only and did "
            "not match{}",
            p.pid, p.comm, format_bytes(procfs::kMaxCmdlineBytes), format_bytes(procfs::kMaxCmdlineBytes),
            cut_lines_ + 1 == kSaidAtDefault ? " (more such processes are said at -v)" : ""));
    ++cut_lines_;
  }
  cut_said_ = std::move(still);
}

void Daemon::scan() {
  uint64_t started = now_ns();
  auto processes = scanner_->scan();
  if (!scanner_->identity_error().empty())
    log(1, fmt::format("the scan read /proc instead: {}", scanner_->identity_error()));
  if (!processes) {
    log(0, processes.error());
    return;
  }
  say_cut_cmdlines(*processes);
  std::map<int, uint64_t> start_of;
  std::map<int, int> parent_of;
  for (const auto& p : *processes) {
    start_of[p.pid] = p.start_ticks;
    parent_of[p.pid] = p.ppid;
  }
  // Never the daemon itself, nor what started it (its command line names
  // the pattern too).
  std::set<int> self = {getpid()};
  for (int pid = getppid(); pid > 1 && self.insert(pid).second;)
    pid = parent_of.count(pid) ? parent_of[pid] : 0;
  // Nor another hangtrace (a second daemon, a `hangtrace --pid`): the same
  // executable file.
  auto own = proc_.self_exe_file();
  for (auto& p : *processes) {
    if (p.matched_by.empty()) continue;
    if (self.count(p.pid)) {
      p.matched_by.clear();
    } else if (own && runs_file(p, *own)) {
      p.matched_by.clear();
    }
  }
  // Jobs whose root is gone (its exit record lost to a full ring buffer, or
  // never traced), and processes that went without a record.
  std::vector<int> gone_roots;
  for (auto& [root, job] : jobs_) {
    auto s = start_of.find(root);
    if (s == start_of.end() || s->second != job.start_ticks) gone_roots.push_back(root);
  }
  for (int root : gone_roots) end_job(root, "its main process is gone");
  std::erase_if(ended_jobs_, [&](const auto& e) {
    auto s = start_of.find(e.first);
    return s == start_of.end() || s->second != e.second;
  });
  const daemon::ChildIndex children = daemon::children_of(*processes);
  for (auto& [root, job] : jobs_) {
    for (int pid : std::vector<int>(job.pids.begin(), job.pids.end()))
      if (!start_of.count(pid)) drop_process(pid);
    // Workers forked while a fork record was lost.
    for (int pid : daemon::descendants_of(root, children))
      if (!job.pids.count(pid)) add_process(job, pid, false);
  }
  report_gpu_hook_errors();
  const auto roots = daemon::job_roots(*processes);
  std::map<int, std::set<int>> tracked;
  for (const auto& [root, job] : jobs_) tracked[root] = job.pids;
  for (int root : daemon::superseded_jobs(tracked, roots))
    end_job(root, "it launches ranks, each a job of its own");
  for (int root : roots)
    if (!jobs_.count(root) && !job_of_.count(root)) pick_up(root, *processes);
  metrics_->scan_took(static_cast<double>(now_ns() - started) / 1e9);
}

std::optional<std::string> Daemon::bundled_before(const Job& job, const std::string& trigger) const {
  // A restarted daemon finds the bundle its predecessor wrote for the same
  // hang of the same process (pid and start time): it does not write another.
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(options_.bundle_dir, ec)) {
    std::ifstream in(entry.path() / "meta.json");
    if (!in) continue;
    auto j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded()) continue;
    auto m = bundle_meta_from_json(j);
    if (m && m->trigger == trigger && m->job_pid == job.root && m->job_start_ticks == job.start_ticks &&
        m->hostname == hostname_)
      return m->cause;
  }
  return std::nullopt;
}

}  // namespace hangtrace::cli
