#include "hangtrace/process_scanner.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <set>

#include "hangtrace/procfs.h"

namespace hangtrace::daemon {

ProcessScanner::ProcessScanner(std::string proc_root, const JobMatcher& matcher, unsigned full_every)
    : proc_root_(std::move(proc_root)), matcher_(matcher), full_every_(full_every ? full_every : 1) {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur != RLIM_INFINITY)
    max_stat_fds_ = static_cast<size_t>(r.rlim_cur) / 2;
  else
    max_stat_fds_ = 16384;
}

ProcessScanner::~ProcessScanner() { close_stats(); }

void ProcessScanner::close_stat(int pid) {
  if (auto it = stat_fds_.find(pid); it != stat_fds_.end()) {
    close(it->second);
    stat_fds_.erase(it);
  }
}

Result<procfs::ProcStat> ProcessScanner::read_stat(int pid) {
  char buf[4096];
  if (auto it = stat_fds_.find(pid); it != stat_fds_.end()) {
    ssize_t n = pread(it->second, buf, sizeof buf, 0);
    if (n > 0)
      if (auto st = procfs::parse_stat(std::string_view(buf, static_cast<size_t>(n)))) return st;
    close_stat(pid);  // gone (ESRCH), or a reused pid: opened anew
  }
  const std::string path = fmt::format("{}/{}/stat", proc_root_, pid);
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error(fmt::format("failed to read {}: {}", path, std::strerror(errno)));
  ssize_t n = pread(fd, buf, sizeof buf, 0);
  if (n <= 0) {
    const int e = n < 0 ? errno : 0;
    close(fd);
    return make_error(fmt::format("failed to read {}: {}", path, e ? std::strerror(e) : "empty"));
  }
  auto st = procfs::parse_stat(std::string_view(buf, static_cast<size_t>(n)));
  if (st && stat_fds_.size() < max_stat_fds_)
    stat_fds_[pid] = fd;
  else
    close(fd);
  return st;
}

void ProcessScanner::close_stats() {
  for (const auto& [pid, fd] : stat_fds_) close(fd);
  stat_fds_.clear();
}

void ProcessScanner::set_identity_source(IdentitySource source) {
  identities_ = std::move(source);
  if (identities_) close_stats();
}

bool ProcessScanner::entry_for(const procfs::ProcFs& proc, const procfs::ProcStat& stat, ProcessEntry& e) {
  const int pid = stat.pid;
  e.pid = pid;
  e.ppid = stat.ppid;
  e.start_ticks = stat.start_time_ticks;
  e.comm = stat.comm;
  auto k = known_.find(pid);
  // The same process with the same image, not due for its refresh (spread
  // over the scans by pid): its command line is the one read before.
  const bool same = k != known_.end() && k->second.start_ticks == stat.start_time_ticks &&
                    k->second.comm == stat.comm && k->second.start_stack == stat.start_stack &&
                    k->second.arg_start == stat.arg_start && k->second.arg_end == stat.arg_end &&
                    (scans_ + static_cast<uint64_t>(pid)) % full_every_ != 0;
  std::optional<procfs::BoundedText> read;
  if (!same) {
    auto text = proc.cmdline_text(pid);
    ++cmdlines_read_;
    if (!text || text->text.empty()) {  // gone, a zombie, or exiting
      known_.erase(pid);
      return false;
    }
    read = std::move(*text);
    keep_cmdline(e, *read);
  } else {
    e.cmdline = k->second.kept.cmdline;
    e.cmdline_digest = k->second.kept.cmdline_digest;
    e.cmdline_cut = k->second.kept.cmdline_cut;
  }
  MatchInputs inputs = read_match_inputs(proc, pid, matcher_);
  Known& entry = known_[pid];
  if (!same || !same_cmdline(entry.kept, e) || entry.inputs.cgroup != inputs.cgroup ||
      entry.inputs.device_fds != inputs.device_fds) {
    // Matched on what was read, not on the kept part: a process that only
    // changed its cgroup or GPU fds has its command line read again.
    if (!read) {
      auto text = proc.cmdline_text(pid);
      ++cmdlines_read_;
      if (!text || text->text.empty()) {
        known_.erase(pid);
        return false;
      }
      read = std::move(*text);
      keep_cmdline(e, *read);
    }
    auto why = matcher_.match(read->text, read->cut, inputs.cgroup, inputs.device_fds);
    ++matches_made_;
    ProcessEntry kept;
    kept.cmdline = e.cmdline;
    kept.cmdline_digest = e.cmdline_digest;
    kept.cmdline_cut = e.cmdline_cut;
    entry = Known{stat.start_time_ticks,
                  stat.start_stack,
                  stat.arg_start,
                  stat.arg_end,
                  stat.comm,
                  std::move(kept),
                  std::move(inputs),
                  why ? *why : std::string()};
  }
  e.matched_by = entry.matched_by;
  return true;
}

Result<std::vector<ProcessEntry>> ProcessScanner::scan() {
  const procfs::ProcFs proc(proc_root_);
  std::optional<std::vector<procfs::ProcStat>> identities;
  if (identities_) {
    auto got = identities_();
    identity_error_ = got ? std::string() : got.error();
    if (got) identities = std::move(*got);
  }
  auto pids = proc.pids();
  if (!pids) return make_error(pids.error());
  ++scans_;
  std::vector<ProcessEntry> out;
  out.reserve(pids->size());
  std::set<int> seen;
  auto consider = [&](const procfs::ProcStat& stat) {
    if (stat.is_kernel_thread()) return false;
    seen.insert(stat.pid);
    ProcessEntry e;
    if (!entry_for(proc, stat, e)) return true;
    out.push_back(std::move(e));
    return true;
  };
  // A pid /proc lists that the pass left out is read from its stat file: a
  // kernel thread (remembered: its pid is not read again while listed), a
  // zombie, or a process the iterator did not visit (it skips pid 1 on some
  // kernels).
  auto from_stat_file = [&](int pid) {
    if (identities && not_processes_.count(pid)) return;
    auto stat = read_stat(pid);
    if (stat && stat->is_kernel_thread() && identities) not_processes_.insert(pid);
    if (!stat || !consider(*stat)) close_stat(pid);
  };
  if (identities) {
    // Both in pid order: merged. A pid of the pass that /proc no longer
    // lists (it exited in between) finds no command line and is left out.
    auto id = identities->begin();
    for (int pid : *pids) {
      for (; id != identities->end() && id->pid < pid; ++id) consider(*id);
      if (id != identities->end() && id->pid == pid) {
        close_stat(pid);
        consider(*id++);
      } else {
        from_stat_file(pid);
      }
    }
    for (; id != identities->end(); ++id) consider(*id);
    const std::set<int> listed(pids->begin(), pids->end());
    std::erase_if(not_processes_, [&](int pid) { return !listed.count(pid); });
  } else {
    not_processes_.clear();
    for (int pid : *pids) from_stat_file(pid);
  }
  std::erase_if(known_, [&](const auto& kv) { return !seen.count(kv.first); });
  for (auto it = stat_fds_.begin(); it != stat_fds_.end();) {
    if (seen.count(it->first)) {
      ++it;
      continue;
    }
    close(it->second);
    it = stat_fds_.erase(it);
  }
  return out;
}

}  // namespace hangtrace::daemon
