// hangtrace [--pid PID...] [--match REGEX] [--cgroup PATH]: from what the
// user named -- pids in any spelling (`--pid $(pgrep -f train)` gives the
// main process and every worker), or nothing at all -- to the jobs they
// belong to, each diagnosed by run_live, one report per job.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fmt/format.h>

#include "diagnose.h"
#include "hangtrace/jobs.h"
#include "hangtrace/procfs.h"
#include "hangtrace/text.h"
#include "privileges.h"
#include "subcommands.h"

namespace hangtrace::cli {

namespace {

// A read of a process's memory (maps, cmdline) that takes longer than this
// is stuck behind its mmap_lock: that process is left out of the search.
constexpr std::chrono::milliseconds kDiscoveryReadDeadline{500};

// "report.json" -> "report.8974.json" for the second and later jobs' files;
// devices (/dev/null) and stdout are written in place.
std::string path_for_job(const std::string& path, int root) {
  if (path.empty() || path == "-" || path.starts_with("/dev/")) return path;
  size_t slash = path.rfind('/');
  size_t dot = path.rfind('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash) || dot == slash + 1)
    return fmt::format("{}.{}", path, root);
  return fmt::format("{}.{}{}", path.substr(0, dot), root, path.substr(dot));
}

// The named pids that can be diagnosed, threads made their processes, and a
// line for each that cannot (`skipped`). nullopt: an argument is not a pid.
std::optional<std::vector<int>> usable_pids(const procfs::ProcFs& proc, const Options& opt, int self,
                                            std::vector<std::string>& skipped) {
  std::string bad;
  auto pids = jobs::parse_pid_list(opt.pid_args, &bad);
  if (!pids) {
    fail(fmt::format("--pid '{}' is not a process id (give pids as '1 2 3', '1,2,3' or --pid 1 --pid 2)",
                     bad));
    return std::nullopt;
  }
  std::vector<int> out;
  for (int pid : *pids) {
    if (auto why = jobs::unusable_pid(proc, pid, self)) {
      skipped.push_back(fmt::format("pid {}: {}", pid, *why));
      continue;
    }
    int process = pid;
    if (auto status = proc.status(pid); status && status->tgid > 0 && status->tgid != pid) {
      std::fprintf(stderr, "hangtrace: pid %d is a thread of process %d\n", pid, status->tgid);
      process = status->tgid;
    }
    if (std::find(out.begin(), out.end(), process) == out.end()) out.push_back(process);
  }
  return out;
}

// Every training job on the host, or those the selectors pick.
std::optional<std::vector<int>> discovered_pids(const procfs::ProcFs& proc, const Options& opt, int self) {
  daemon::JobSelectors selectors;
  selectors.cmdline_patterns = opt.match_patterns;
  selectors.cgroup_prefixes = opt.cgroup_paths;
  auto matcher = daemon::JobMatcher::make(selectors);
  if (!matcher) {
    fail(matcher.error());
    return std::nullopt;
  }
  auto found = jobs::discover_training_processes(proc, *matcher, self, kDiscoveryReadDeadline);
  if (!found) {
    fail(found.error());
    return std::nullopt;
  }
  for (int pid : found->stuck)
    std::fprintf(
        stderr,
        "hangtrace: pid %d left out of the search: reading its memory map blocked (a thread of it "
        "probably holds its mmap_lock while stuck in the kernel); name it with --pid to examine it\n",
        pid);
  if (opt.verbosity >= 1)
    for (size_t i = 0; i < found->pids.size(); ++i)
      std::fprintf(stderr, "hangtrace: pid %d picked: %s\n", found->pids[i],
                   terminal_escape(found->reasons[i]).c_str());
  // Said, not silently left out; a few by pid (another user's processes
  // could be many), the rest counted.
  constexpr size_t kCutNamed = 5;
  for (size_t i = 0; i < found->cut_unmatched.size() && i < kCutNamed; ++i)
    std::fprintf(
        stderr,
        "hangtrace: pid %d: its command line is longer than %s; --match searched its first %s only and "
        "did not match\n",
        found->cut_unmatched[i], format_bytes(procfs::kMaxCmdlineBytes).c_str(),
        format_bytes(procfs::kMaxCmdlineBytes).c_str());
  if (found->cut_unmatched.size() > kCutNamed)
    std::fprintf(stderr,
                 "hangtrace: %zu more processes with a command line longer than %s did not match --match\n",
                 found->cut_unmatched.size() - kCutNamed, format_bytes(procfs::kMaxCmdlineBytes).c_str());
  if (found->pids.empty()) {
    if (selectors.empty())
      fail(
          "no training job found on this host (no process maps libtorch or holds a GPU): name one with "
          "--pid PID or --match REGEX");
    else
      fail(fmt::format("no process matches{}{}", opt.match_patterns.empty() ? "" : " --match",
                       opt.cgroup_paths.empty() ? "" : " --cgroup"));
    return std::nullopt;
  }
  return found->pids;
}

std::string job_line(const procfs::ProcFs& proc, const jobs::JobRequest& job) {
  std::string what = "?";
  if (auto cmdline = proc.cmdline(job.root); cmdline && !cmdline->empty())
    what = cmdline->size() > 80 ? cmdline->substr(0, 77) + "..." : *cmdline;
  else if (auto comm = proc.comm(job.root))
    what = *comm;
  return fmt::format("{} ({})", job.root, what);
}

}  // namespace

int run_jobs(const Options& opt) {
  if (std::string failure = privilege_failure("read other processes' waits", false); !failure.empty())
    return fail(failure);
  const procfs::ProcFs proc("/proc");
  const int self = static_cast<int>(getpid());
  std::optional<std::vector<int>> pids;
  if (opt.pid_given) {
    std::vector<std::string> skipped;
    pids = usable_pids(proc, opt, self, skipped);
    if (!pids) return kExitError;
    // One pid that cannot be diagnosed is the one line; several, a line each.
    if (pids->empty() && skipped.size() == 1) return fail(skipped.front());
    for (const auto& line : skipped) std::fprintf(stderr, "hangtrace: %s (skipped)\n", line.c_str());
    if (pids->empty())
      return fail(
          std::all_of(opt.pid_args.begin(), opt.pid_args.end(),
                      [](const std::string& a) { return a.find_first_not_of(" \t\n") == std::string::npos; })
              ? "--pid got no pid (did the pgrep in $(...) match nothing?)"
              : "none of the given pids can be diagnosed");
  } else {
    pids = discovered_pids(proc, opt, self);
    if (!pids) return kExitError;
  }
  std::vector<jobs::JobRequest> requests;
  if (opt.subtree)
    for (int pid : *pids) requests.push_back({pid, "", {pid}});
  else
    requests = jobs::group_by_job(proc, *pids, self);
  if (!opt.pid_given) {
    std::vector<std::string> names;
    for (const auto& r : requests) names.push_back(job_line(proc, r));
    std::fprintf(stderr, "hangtrace: found %zu training job%s: %s\n", requests.size(),
                 requests.size() > 1 ? "s" : "", fmt::format("{}", fmt::join(names, ", ")).c_str());
  }

  std::vector<std::string> reports;
  int worst = kExitOk;
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto& r = requests[i];
    Options o = opt;
    o.pid = r.root;
    if (opt.pid_given) o.given_pids = r.given;
    o.root_parent = r.stopped_at;
    if (requests.size() > 1) {
      o.json_reports = opt.json_path.empty() ? nullptr : &reports;
      if (i > 0)
        for (std::string* path :
             {&o.save_snapshot_path, &o.folded_path, &o.flamegraph_path, &o.speedscope_path, &o.trace_path,
              &o.wall_folded_path, &o.wall_flamegraph_path})
          *path = path_for_job(*path, r.root);
      if (opt.json_path != "-")
        std::printf("%s==== job %zu of %zu: %s ====\n", i ? "\n" : "", i + 1, requests.size(),
                    job_line(proc, r).c_str());
      std::fflush(stdout);
    }
    int rc = run_live(o);
    // A hang anywhere outranks an error elsewhere, which outranks "fine".
    if (rc == kExitHang || (rc == kExitError && worst == kExitOk)) worst = rc;
  }
  if (!reports.empty()) {
    std::string error;
    // Each report as render_json_text wrote it (streamed, not held as a tree).
    std::string array = "[\n";
    for (size_t i = 0; i < reports.size(); ++i) {
      std::string& r = reports[i];
      while (!r.empty() && r.back() == '\n') r.pop_back();
      array += r + (i + 1 < reports.size() ? ",\n" : "\n");
    }
    array += "]\n";
    if (!write_output(opt.json_path, array, &error)) return fail(error);
  }
  return worst;
}

}  // namespace hangtrace::cli
