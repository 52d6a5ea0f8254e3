// collect_snapshot: one pass over /proc (plus BPF, process memory, pidfds and
// sock_diag) that records what a hung process tree is waiting on.
//
// Order matters:
//   1. validate the target, scan /proc once for the process tree;
//   2. per process: fds, threads, syscalls and the memory those syscalls
//      point at (cheap, and the peers depend on it);
//   3. socket tables of every network namespace involved, then one scan of
//      all fds on the host for the holders of the other ends (peers);
//   4. a main thread that sleeps on a timer watched a while (a poll?);
//      first progress sample; BPF, maps, readiness probes, /dev/shm; sleep
//      out the rest of the window; second progress sample.
// Anything that vanishes mid-way is skipped; only the target vanishing is an
// error.
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <fmt/format.h>
#include <future>
#include <memory>
#include <optional>
#include <thread>
#include <unordered_set>

#include "collector_pass.h"
#include "kernel_log_reader.h"
#include "wait_memory.h"
#include "hangtrace/deadline.h"
#include "hangtrace/jobs.h"
#include "hangtrace/collectives.h"
#include "hangtrace/job_identity.h"
#include "netlink_diag.h"
#include "python_stacks.h"
#include "hangtrace/text.h"

namespace hangtrace {

namespace collector_pass {

namespace {

constexpr size_t kMaxLimitations = 40;
constexpr auto kMemoryLockProbeTimeout = std::chrono::milliseconds(1000);

double wall_clock_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// WEXITSTATUS for a normal exit, 128+signal for a killed process (the shell
// convention, so SIGKILL by the OOM killer reads as the familiar 137).
int exit_code_from_wait_status(int status) {
  if ((status & 0x7f) == 0) return (status >> 8) & 0xff;
  return 128 + (status & 0x7f);
}

// The cmdline is read first, under a deadline (deadline.h): a process whose
// mmap_lock is held by a thread stuck in the kernel has its memory left alone.
std::optional<Result<std::string>> read_cmdline_with_deadline(const ProcFs& proc, int id) {
  return call_with_deadline([proc, id] { return proc.cmdline(id); }, kMemoryLockProbeTimeout);
}

}  // namespace

double monotonic_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void record_sample_clocks(Snapshot& snap) {
  timespec mono{}, wall{};
  clock_gettime(CLOCK_MONOTONIC, &mono);
  clock_gettime(CLOCK_REALTIME, &wall);
  snap.sampled_at_monotonic_ns = static_cast<uint64_t>(mono.tv_sec) * 1'000'000'000ull + mono.tv_nsec;
  snap.sampled_at_unix = static_cast<double>(wall.tv_sec) + wall.tv_nsec / 1e9;
}

void Collector::limitation(std::string line) {
  if (std::find(snap_.limitations.begin(), snap_.limitations.end(), line) != snap_.limitations.end()) return;
  if (snap_.limitations.size() >= kMaxLimitations) {
    ++dropped_limitations_;
    return;
  }
  snap_.limitations.push_back(std::move(line));
}

// ---- 1. the target and the tree ------------------------------------------------

std::optional<int> Collector::live_proc_id(int pid, const procfs::ProcStat& st) const {
  if (st.state != 'Z' && st.state != 'X') return pid;
  auto tids = proc_.tids(pid);
  if (!tids) return std::nullopt;
  for (int tid : *tids) {
    auto t = proc_.thread_stat(pid, tid);
    if (t && t->state != 'Z' && t->state != 'X') return tid;
  }
  return std::nullopt;
}

std::optional<Error> Collector::validate_target() {
  if (target_ <= 0) return make_error(fmt::format("no such process: {}", target_));
  int err = 0;
  auto st = proc_.stat(target_, &err);
  if (!st) {
    if (is_gone_errno(err)) return make_error(fmt::format("no such process: {}", target_));
    return make_error(st.error());
  }
  if (st->is_kernel_thread())
    return make_error(fmt::format("{} is a kernel thread ({}), not a training job", target_, st->comm));
  // /proc/TID works for any thread, but the tree hangs off the process.
  if (auto status = proc_.status(target_); status && status->tgid != target_ && status->tgid > 0) {
    limitation(fmt::format("{} is a thread of process {}; examined the process", target_, status->tgid));
    target_ = status->tgid;
    st = proc_.stat(target_, &err);
    if (!st) return make_error(fmt::format("no such process: {}", target_));
  }
  if (!live_proc_id(target_, *st)) {
    std::string how =
        st->exit_code ? fmt::format(" with exit code {}", exit_code_from_wait_status(*st->exit_code)) : "";
    return make_error(
        fmt::format("{} ({}) has exited{} and is a zombie waiting for its parent {} to reap it; "
                    "there is nothing left to examine",
                    target_, st->comm, how, st->ppid));
  }
  target_start_time_ = st->start_time_ticks;
  return std::nullopt;
}

void Collector::scan_all_processes() {
  int err = 0;
  auto pids = proc_.pids(&err);
  if (!pids) {
    limitation(fmt::format("no descendants or peers: {}", pids.error()));
    return;
  }
  all_pids_ = std::move(*pids);
  for (int pid : all_pids_) {
    auto st = proc_.stat(pid);
    if (!st) continue;  // exited since the listing
    children_[st->ppid].push_back(pid);
    stats_.emplace(pid, std::move(*st));
  }
}

std::vector<int> Collector::descendants_of(int root) const {
  std::vector<int> out;
  // hangtrace itself, when run from inside the job's tree, is not part of it.
  std::unordered_set<int> seen{root, static_cast<int>(getpid())};
  std::vector<int> queue{root};
  // Bounded by the number of processes: each pid enters the queue once.
  for (size_t i = 0; i < queue.size(); ++i) {
    auto it = children_.find(queue[i]);
    if (it == children_.end()) continue;
    for (int child : it->second) {
      if (!seen.insert(child).second) continue;
      out.push_back(child);
      queue.push_back(child);
    }
  }
  return out;
}

// ---- 2. one process --------------------------------------------------------------

std::optional<ProcessInfo> Collector::collect_process(int pid, ProcessRole role) {
  int err = 0;
  auto st = proc_.stat(pid, &err);
  if (!st) {
    if (!is_gone_errno(err)) limitation(fmt::format("process {} skipped: {}", pid, st.error()));
    return std::nullopt;
  }
  ProcessInfo p;
  p.pid = pid;
  p.ppid = st->ppid;
  p.comm = st->comm;
  p.state = st->state;
  p.flags = st->flags;
  p.role = role;
  if (options_.proc_root == "/proc" && st->start_time_ticks) {
    static const double ticks_per_s = static_cast<double>(sysconf(_SC_CLK_TCK));
    const double age = clock_now_s(CLOCK_BOOTTIME) - static_cast<double>(st->start_time_ticks) / ticks_per_s;
    if (ticks_per_s > 0 && age >= 0) p.age_s = age;
  }
  const std::optional<int> live_id = live_proc_id(pid, *st);
  const bool exited = !live_id;
  const int id = live_id.value_or(pid);
  if (id != pid) proc_ids_[pid] = id;
  if (exited && st->exit_code) p.exit_signal = exit_code_from_wait_status(*st->exit_code);
  if (!exited) {
    auto cmdline = read_cmdline_with_deadline(proc_, id);
    if (!cmdline) {
      memory_blocked_.insert(pid);
      limitation(
          fmt::format("memory of {} not read (cmdline, maps, syscall arguments): reading it blocked for over "
                      "{} s, so a thread of it probably holds its mmap_lock while stuck in the kernel",
                      pid, kMemoryLockProbeTimeout.count() / 1000));
    } else if (*cmdline) {
      p.cmdline = **cmdline;
      // The same lock as cmdline, which just came free.
      if (auto environ = proc_.environ_text(id)) {
        const std::string& environ_bytes = environ->text;
        if (environ->cut)
          limitation(fmt::format(
              "environment of {} read in part: it is longer than {}, and a rank or job "
              "variable after its first {} was not seen",
              pid, format_bytes(procfs::kMaxEnvironBytes), format_bytes(procfs::kMaxEnvironBytes)));
        RankIdentity identity = parse_rank_environment(environ_bytes);
        // Slurm and MPI name every process of a task: a launcher that
        // starts the ranks (torchrun under srun) is none of them.
        if (identity.from_scheduler() && jobs::is_launcher_command(p.comm, p.cmdline)) identity = {};
        p.rank = identity.rank;
        p.world_size = identity.world_size;
        p.local_rank = identity.local_rank;
        p.rank_source = identity.source;
        JobIdentity job = job_identity(environ_bytes, p.cmdline);
        p.job_id = std::move(job.id);
        p.job_id_source = std::move(job.source);
      }
    }
  }
  if (auto exe = proc_.exe(id)) p.exe = *exe;
  if (auto status = proc_.status(id)) {
    p.ns_pids = status->ns_pids;
    p.signals_caught = status->signals_caught;
    p.main_signals_blocked = status->signals_blocked;
  }
  if (auto cgroup = proc_.cgroup(id)) {
    jobs::ContainerIdentity c = jobs::container_from_cgroup(*cgroup);
    p.container_runtime = std::move(c.runtime);
    p.container_id = std::move(c.id);
    p.pod_uid = std::move(c.pod_uid);
    p.frozen_cgroup = jobs::frozen_cgroup_of(*cgroup);
    p.memory_cgroup = jobs::memory_cgroup_of(*cgroup);
  }
  if (auto ns = proc_.namespace_inode(id, "net")) p.netns = *ns;
  if (auto ns = proc_.namespace_inode(id, "mnt")) p.mntns = *ns;
  if (role != ProcessRole::Peer && !exited) p.resolver = resolver_config(id, p.mntns);
  if (auto it = children_.find(pid); it != children_.end()) p.children = it->second;
  std::string exe_name = basename_of(p.exe);
  p.is_python = exe_name.rfind("python", 0) == 0;  // maps may still say so (keep_maps)
  if (exited)
    exited_.insert(pid);
  else
    collect_fds(p);
  collect_threads(p);
  if (!exited) collect_mounts(p);
  return p;
}

ResolverConfig Collector::resolver_config(int pid, uint64_t mntns) {
  if (mntns) {
    if (auto it = resolver_by_mntns_.find(mntns); it != resolver_by_mntns_.end()) return it->second;
  }
  ResolverConfig config;
  if (auto read = proc_.resolv_conf(pid))
    config = std::move(*read);
  else
    config.error = read.error();
  if (mntns) resolver_by_mntns_[mntns] = config;
  return config;
}

bool Collector::target_still_there() const {
  auto st = proc_.stat(target_);
  return st && st->start_time_ticks == target_start_time_ && live_proc_id(target_, *st).has_value();
}

// ---- the whole pass ---------------------------------------------------------------------

Result<Snapshot> Collector::run() {
  if (auto error = validate_target()) return *error;
  const double started = monotonic_s();
  const std::string vanished = fmt::format("target {} exited during the snapshot", target_);

  snap_.hangtrace_version = HANGTRACE_VERSION;
  snap_.target_pid = target_;
  snap_.taken_at_unix = wall_clock_s();
  record_sample_clocks(snap_);  // replaced by the BPF sampling instant when there is one
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) snap_.hostname = host;
  utsname uts{};
  if (uname(&uts) == 0) snap_.kernel_release = uts.release;
  if (auto ino = proc_.thread_self_namespace_inode("net")) own_netns_ = *ino;

  // This host's addresses (hangtrace's own netns), whatever namespace the job is in.
  if (auto own = interface_addresses()) snap_.local_addresses = std::move(*own);

  scan_all_processes();
  auto target = collect_process(target_, ProcessRole::Target);
  if (!target) return make_error(vanished);
  snap_.processes.push_back(std::move(*target));
  for (int pid : descendants_of(target_)) {
    if (auto p = collect_process(pid, ProcessRole::Descendant)) snap_.processes.push_back(std::move(*p));
  }
  debug(fmt::format("{} process(es) in the tree after {:.3f} s", snap_.processes.size(),
                    monotonic_s() - started));

  // Sockets of every namespace in the tree (the target's first, so its view wins).
  for (size_t i = 0; i < snap_.processes.size(); ++i) {
    const auto& p = snap_.processes[i];
    if (exited_.count(p.pid)) continue;
    load_network_namespace(p.netns, proc_id(p.pid));
  }
  for (const char* loopback : {"127.0.0.1", "::1"}) {
    if (std::find(snap_.local_addresses.begin(), snap_.local_addresses.end(), loopback) ==
        snap_.local_addresses.end())
      snap_.local_addresses.push_back(loopback);
  }
  resolve_fifos();
  collect_file_locks();
  if (options_.include_peers) {
    find_peers();
    find_lock_sharers();
  }
  if (options_.watch_polls) watch_pollers();

  take_progress_samples(/*start=*/true);
  progress_start_s_ = monotonic_s();

  if (options_.use_bpf) collect_kernel_views();
  collect_maps_and_stacks();
  if (options_.probe_readiness) {
    for (auto& p : snap_.processes) probe_readiness(p);
  }
  collect_shm();
  assemble_sockets();
  // After both: the spawn index is in the stacks, whether the group leaves
  // this host in the sockets.
  ranks_from_spawn_frames(snap_);
  if (options_.read_kernel_log && options_.proc_root == "/proc") {
    KernelLogRead log = read_kernel_log();
    snap_.kernel_events = kernel_log_events(log.records);
    snap_.kernel_log_read_at_s = clock_now_s(CLOCK_MONOTONIC);
    if (!log.error.empty()) limitation("deaths before hangtrace attached not known: " + log.error);
  }

  // Only the rest of the window is slept: the work above counts toward it.
  double elapsed = monotonic_s() - progress_start_s_;
  double window = std::max(0.0, options_.min_progress_window_s);
  if (elapsed < window) std::this_thread::sleep_for(std::chrono::duration<double>(window - elapsed));
  take_progress_samples(/*start=*/false);
  snap_.sample_window_s = monotonic_s() - progress_start_s_;

  if (!target_still_there()) return make_error(vanished);
  if (dropped_limitations_)
    snap_.limitations.push_back(
        fmt::format("... and {} more limitation(s) not listed", dropped_limitations_));
  debug(fmt::format("snapshot took {:.3f} s", monotonic_s() - started));
  return std::move(snap_);
}

}  // namespace collector_pass

Result<Snapshot> collect_snapshot(int target_pid, const CollectOptions& options) {
  collector_pass::Collector collector(target_pid, options);
  return collector.run();
}

Snapshot exited_job_snapshot(int pid, const LiveObservation& live, const std::string& why) {
  Snapshot s;
  s.hangtrace_version = HANGTRACE_VERSION;
  s.target_pid = pid;
  s.taken_at_unix = static_cast<double>(std::time(nullptr));
  ProcessInfo p;
  p.pid = pid;
  p.state = 'X';
  p.role = ProcessRole::Target;
  if (auto it = live.meta.find(pid); it != live.meta.end()) {
    p.comm = it->second.comm;
    p.cmdline = it->second.cmdline;
  }
  s.processes.push_back(p);
  s.limitations.push_back(why);
  struct utsname u {};
  if (uname(&u) == 0) {
    s.hostname = u.nodename;
    s.kernel_release = u.release;
  }
  return s;
}

}  // namespace hangtrace
