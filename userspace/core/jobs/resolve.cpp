// From the pids a user names (or none) to the jobs they belong to (jobs.h).
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <set>
#include <string_view>

#include "hangtrace/collectives.h"
#include "hangtrace/deadline.h"
#include "hangtrace/jobs.h"
#include "hangtrace/text.h"

namespace hangtrace::jobs {

using procfs::ProcFs;

// ---- naming the processes ----------------------------------------------------------

std::optional<std::vector<int>> parse_pid_list(const std::vector<std::string>& args, std::string* bad) {
  std::vector<int> out;
  auto reject = [&](std::string_view what) {
    if (bad) *bad = std::string(what);
    return std::nullopt;
  };
  for (const auto& arg : args) {
    // Words as the shell would split them ("1 2 3" quoted as one), then
    // "1,2,3" within a word. An empty piece ("1,,2", "1,") is as suspect as
    // a word: the user's list is not what they think it is.
    std::string_view rest = arg;
    while (!rest.empty()) {
      size_t start = rest.find_first_not_of(" \t\n");
      if (start == std::string_view::npos) break;
      rest = rest.substr(start);
      size_t end = rest.find_first_of(" \t\n");
      std::string_view word = rest.substr(0, end);
      rest = end == std::string_view::npos ? std::string_view() : rest.substr(end);
      while (true) {
        size_t comma = word.find(',');
        std::string_view piece = word.substr(0, comma);
        int value = 0;
        auto [last, ec] = std::from_chars(piece.data(), piece.data() + piece.size(), value);
        if (piece.empty() || ec != std::errc() || last != piece.data() + piece.size() || value <= 0)
          return reject(piece.empty() ? std::string_view(arg) : piece);
        if (std::find(out.begin(), out.end(), value) == out.end()) out.push_back(value);
        if (comma == std::string_view::npos) break;
        word = word.substr(comma + 1);
      }
    }
  }
  return out;
}

std::optional<std::string> unusable_pid(const ProcFs& proc, int pid, int self_pid) {
  int err = 0;
  auto st = proc.stat(pid, &err);
  if (!st) return procfs::is_gone_errno(err) ? std::string("no such process") : st.error();
  if (st->is_kernel_thread()) return fmt::format("is a kernel thread ({}), not a training job", st->comm);
  int tgid = pid;
  if (auto status = proc.status(pid); status && status->tgid > 0) tgid = status->tgid;
  if (tgid == self_pid) return std::string("is hangtrace itself");
  if (st->state == 'Z' || st->state == 'X') {
    // A zombie main thread with live threads is still a process to examine.
    auto tids = proc.tids(tgid);
    bool live_thread = false;
    if (tids)
      for (int tid : *tids)
        if (auto t = proc.thread_stat(tgid, tid); t && t->state != 'Z' && t->state != 'X') live_thread = true;
    if (!live_thread)
      return fmt::format("has exited ({}) and waits for its parent {} to reap it", st->comm, st->ppid);
  }
  return std::nullopt;
}

// ---- walking up ---------------------------------------------------------------------

namespace {

struct NamedSet {
  const char* why;
  std::initializer_list<std::string_view> comms;  // /proc comm: at most 15 characters
};

// Processes a job runs under but that are not part of it. comm, not the
// command line: reading a command line takes the process's mmap_lock.
const std::initializer_list<std::string_view> kShells = {"bash", "sh",   "dash", "zsh", "fish",   "ksh",
                                                         "mksh", "tcsh", "csh",  "ash", "busybox"};
const NamedSet kBoundaries[] = {
    {"a shell", kShells},
    {"a login session", {"sshd", "sudo", "su", "login", "agetty", "mosh-server", "dropbear", "doas"}},
    {"a terminal multiplexer", {"tmux: server", "tmux", "screen", "SCREEN", "zellij"}},
    {"a container runtime",
     {"containerd-shim", "containerd-shi", "docker-containe", "conmon", "runc", "crun", "runsc",
      "docker-init", "tini", "dumb-init", "catatonit", "pause"}},
    {"a service manager", {"systemd", "init", "supervisord", "runsv", "s6-supervise"}},
    {"a batch scheduler",
     {"slurmstepd", "srun", "sbatch", "salloc", "pbs_mom", "sge_shepherd", "res", "flux-shell"}},
    {"a notebook server", {"jupyter-lab", "jupyter-noteboo", "jupyter-server", "jupyter"}},
};

// Programs that run one command and wait for it, part of the job they run
// (`timeout 3600 python train.py`: `pgrep -f train` names timeout too).
// sudo, su and doas are login sessions' (kBoundaries): the walk stops there.
const std::initializer_list<std::string_view> kCommandWrappers = {
    "timeout", "nice",  "ionice",  "env",    "numactl", "taskset", "chrt",
    "stdbuf",  "nohup", "setsid",  "time",   "runuser", "setpriv", "unshare",
    "nsenter", "flock", "prlimit", "cgexec", "xvfb-run"};

// Launchers run a job's ranks: part of the job. By comm (a Python launcher
// started by its script name has that name as comm) and by program (the
// same started as `python -m ...`).
const std::initializer_list<std::string_view> kLauncherComms = {
    "torchrun", "accelerate", "deepspeed",  "mpirun",         "mpiexec",   "orterun",   "prterun",
    "orted",    "prted",      "horovodrun", "hydra_pmi_prox", "pmi_proxy", "colossalai"};
const std::initializer_list<std::string_view> kLauncherPrograms = {"torchrun",
                                                                   "torch.distributed.run",
                                                                   "torch.distributed.launch",
                                                                   "accelerate",
                                                                   "accelerate.commands.launch",
                                                                   "accelerate.commands.accelerate_cli",
                                                                   "deepspeed",
                                                                   "deepspeed.launcher.runner",
                                                                   "deepspeed.launcher.launch",
                                                                   "colossalai",
                                                                   "horovodrun"};

// What multiprocessing puts in the command lines of the children it starts
// by exec (spawn, forkserver) rather than by fork.
constexpr std::string_view kMultiprocessingMarks[] = {"--multiprocessing-fork", "multiprocessing.spawn",
                                                      "multiprocessing.forkserver",
                                                      "multiprocessing.resource_tracker"};

bool in(std::string_view comm, std::initializer_list<std::string_view> names) {
  return std::find(names.begin(), names.end(), comm) != names.end();
}

std::optional<std::string> cmdline_of(const ProcFs& proc, int pid, std::chrono::milliseconds limit) {
  auto read = call_with_deadline([proc, pid] { return proc.cmdline(pid); }, limit);
  if (!read || !*read) return std::nullopt;
  return **read;
}

std::optional<RankIdentity> ranks_of(const ProcFs& proc, int pid, std::chrono::milliseconds limit) {
  auto read = call_with_deadline([proc, pid] { return proc.environ(pid); }, limit);
  if (!read || !*read) return std::nullopt;
  return parse_rank_environment(**read);
}

// NSpid's length: how deep in nested pid namespaces a process is.
size_t pid_namespace_depth(const ProcFs& proc, int pid) {
  auto status = proc.status(pid);
  return status && !status->ns_pids.empty() ? status->ns_pids.size() : 1;
}

}  // namespace

bool is_multiprocessing_exec_child(std::string_view cmdline) {
  for (std::string_view mark : kMultiprocessingMarks)
    if (cmdline.find(mark) != std::string_view::npos) return true;
  return false;
}

bool is_command_wrapper(std::string_view comm) { return in(comm, kShells) || in(comm, kCommandWrappers); }

bool is_launcher_command(std::string_view comm, std::string_view cmdline) {
  return in(comm, kLauncherComms) || in(program_of(cmdline), kLauncherPrograms);
}

std::string program_of(std::string_view cmdline) {
  const std::vector<std::string_view> words = command_words(cmdline, 16);
  if (words.empty()) return "";
  std::string first = basename_of(std::string(words[0]));
  if (first.rfind("python", 0) != 0) return first;
  for (size_t i = 1; i < words.size(); ++i) {
    std::string_view w = words[i];
    if (w == "-m" || w == "-c") return i + 1 < words.size() && w == "-m" ? std::string(words[i + 1]) : "-c";
    if (w.starts_with("-m") && w.size() > 2) return std::string(w.substr(2));
    if (w == "-X" || w == "-W" || w == "--check-hash-based-pycs") {
      ++i;  // its value
      continue;
    }
    if (w.starts_with("-")) continue;
    return basename_of(std::string(w));
  }
  return first;
}

std::optional<std::string> walk_stops_at(const ProcFs& proc, int child, int parent, int self_pid,
                                         std::chrono::milliseconds per_read) {
  if (parent <= 0) return std::string("the top of the process tree");
  if (parent == 1) return std::string("init");
  if (parent == self_pid) return std::string("hangtrace itself");
  auto st = proc.stat(parent);
  if (!st) return std::string("a process that exited");
  if (st->is_kernel_thread()) return std::string("a kernel thread");
  for (const auto& set : kBoundaries)
    if (in(st->comm, set.comms)) return std::string(set.why);
  // A container's init: what is above it lives in another pid namespace.
  if (pid_namespace_depth(proc, child) > pid_namespace_depth(proc, parent))
    return std::string("outside the job's pid namespace");
  if (in(st->comm, kCommandWrappers)) return std::nullopt;
  if (in(st->comm, kLauncherComms)) return std::nullopt;
  auto parent_cmdline = cmdline_of(proc, parent, per_read);
  if (!parent_cmdline) return std::string("its command line could not be read");
  if (in(program_of(*parent_cmdline), kLauncherPrograms)) return std::nullopt;
  auto child_cmdline = cmdline_of(proc, child, per_read);
  if (!child_cmdline) return std::string("the command line below it could not be read");
  if (*child_cmdline == *parent_cmdline) return std::nullopt;  // forked, not exec'd
  if (is_multiprocessing_exec_child(*child_cmdline)) return std::nullopt;
  if (auto child_ranks = ranks_of(proc, child, per_read);
      child_ranks && (child_ranks->rank || child_ranks->local_rank)) {
    auto parent_ranks = ranks_of(proc, parent, per_read);
    if (parent_ranks &&
        !(parent_ranks->rank == child_ranks->rank && parent_ranks->local_rank == child_ranks->local_rank))
      return std::nullopt;  // it starts ranks: a launcher
  }
  return std::string("not a launcher of it");
}

JobRoot job_root_of(const ProcFs& proc, int pid, int self_pid, std::chrono::milliseconds per_read) {
  JobRoot out;
  int cur = pid;
  if (auto status = proc.status(pid); status && status->tgid > 0) cur = status->tgid;
  std::set<int> seen{cur};
  for (int step = 0; step < kMaxWalk; ++step) {
    auto st = proc.stat(cur);
    if (!st) break;
    const int parent = st->ppid;
    std::optional<std::string> why = walk_stops_at(proc, cur, parent, self_pid, per_read);
    if (why || !seen.insert(parent).second) {
      if (!why) why = "a loop in the parent chain";
      if (parent <= 0) {
        out.stopped_at = *why;
      } else {
        auto comm = proc.comm(parent);
        out.stopped_at = fmt::format("{} {} ({})", comm ? trim(*comm) : std::string("?"), parent, *why);
      }
      break;
    }
    cur = parent;
  }
  out.root = cur;
  return out;
}

std::vector<JobRequest> group_by_job(const ProcFs& proc, const std::vector<int>& pids, int self_pid,
                                     std::chrono::milliseconds per_read) {
  std::vector<JobRequest> jobs;
  for (int pid : pids) {
    JobRoot r = job_root_of(proc, pid, self_pid, per_read);
    auto it = std::find_if(jobs.begin(), jobs.end(), [&](const JobRequest& j) { return j.root == r.root; });
    if (it == jobs.end()) {
      jobs.push_back({r.root, r.stopped_at, {}});
      it = jobs.end() - 1;
    }
    if (std::find(it->given.begin(), it->given.end(), pid) == it->given.end()) it->given.push_back(pid);
  }
  return jobs;
}

// ---- finding the jobs on a host -----------------------------------------------------

namespace {

// The GPU itself, not the control nodes every CUDA-linked process may open.
bool holds_gpu(const ProcFs& proc, int pid, std::string* which) {
  auto fds = proc.fds(pid);
  if (!fds) return false;
  if (fds->size() > daemon::kMaxMatchFds) fds->resize(daemon::kMaxMatchFds);
  for (int fd : *fds) {
    auto target = proc.fd_link(pid, fd);
    if (!target || !target->starts_with("/dev/nvidia")) continue;
    std::string_view rest = std::string_view(*target).substr(std::string_view("/dev/nvidia").size());
    if (!rest.empty() && std::all_of(rest.begin(), rest.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      *which = *target;
      return true;
    }
  }
  return false;
}

}  // namespace

Result<DiscoveryResult> discover_training_processes(const ProcFs& proc, const daemon::JobMatcher& selectors,
                                                    int self_pid, std::chrono::milliseconds per_read) {
  int err = 0;
  auto pids = proc.pids(&err);
  if (!pids) return make_error(fmt::format("failed to list processes: {}", pids.error()));
  const bool by_selectors = !selectors.selectors().empty();
  DiscoveryResult out;
  for (int pid : *pids) {
    if (pid == self_pid) continue;
    auto st = proc.stat(pid);
    if (!st || st->is_kernel_thread() || st->state == 'Z' || st->state == 'X') continue;
    std::string reason;
    if (by_selectors) {
      std::string cgroup;
      if (selectors.wants_cgroup())
        if (auto c = proc.cgroup(pid)) cgroup = *c;
      std::vector<std::string> gpu;
      if (std::string dev; selectors.wants_fds() && holds_gpu(proc, pid, &dev)) gpu.push_back(dev);
      procfs::BoundedText cmdline;
      if (selectors.wants_cmdline()) {
        auto read = call_with_deadline([proc, pid] { return proc.cmdline_text(pid); }, per_read);
        if (!read) {
          out.stuck.push_back(pid);
          continue;
        }
        if (*read) cmdline = std::move(**read);
      }
      if (auto why = selectors.match(cmdline.text, cmdline.cut, cgroup, gpu))
        reason = *why;
      else if (cmdline.cut)
        out.cut_unmatched.push_back(pid);
    } else if (std::string dev; holds_gpu(proc, pid, &dev)) {
      reason = fmt::format("holds {}", dev);
    } else {
      auto maps = call_with_deadline([proc, pid] { return proc.maps(pid); }, per_read);
      if (!maps) {
        out.stuck.push_back(pid);
        continue;
      }
      if (*maps)
        for (const auto& m : **maps)
          if (basename_of(m.path).rfind("libtorch", 0) == 0) {
            reason = fmt::format("maps {}", basename_of(m.path));
            break;
          }
    }
    if (reason.empty()) continue;
    out.pids.push_back(pid);
    out.reasons.push_back(std::move(reason));
  }
  return out;
}

}  // namespace hangtrace::jobs
