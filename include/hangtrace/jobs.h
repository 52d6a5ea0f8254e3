// Which job a process belongs to, and what shape that job has.
//
// The user names processes (`--pid $(pgrep -f train)` gives the main
// process and every DataLoader worker; an engineer pastes a worker's pid
// from nvidia-smi; a fleet node has no pid at all). hangtrace diagnoses
// jobs: each pid is walked up to its job's root -- through Python
// processes and launchers (torchrun, accelerate, DeepSpeed, mpirun), up to
// the first process that is not part of a job (init, a shell, sshd, tmux,
// a container shim, a systemd unit, slurmstepd) -- and pids with the same
// root are one job. Pure logic over an injectable /proc (procfs.h) and a
// Snapshot: unit-tested on fixtures.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hangtrace/daemon.h"
#include "hangtrace/model.h"
#include "hangtrace/procfs.h"

namespace hangtrace::jobs {

// ---- naming the processes ----------------------------------------------------------

// "12", "1,2,3" (and the pieces of "1 2 3" as the shell splits them) into
// pids. nullopt and *bad set to the offending text on anything else:
// garbage is an error, never a guess.
std::optional<std::vector<int>> parse_pid_list(const std::vector<std::string>& args, std::string* bad);

// Why `pid` cannot be diagnosed ("no such process", "is a kernel thread",
// "is hangtrace itself"), or nullopt when it can. A thread id is fine: the
// walk starts at its process.
std::optional<std::string> unusable_pid(const procfs::ProcFs& proc, int pid, int self_pid);

// ---- walking up to the job's root ---------------------------------------------------

// Why the walk up from `child` stops at its parent -- "a shell", "init",
// "not a launcher of it" -- or nullopt when the parent is part of the same
// job. A parent is, when it is not a boundary (init, a shell, sshd, tmux, a
// container runtime, a service manager, a batch scheduler, a notebook
// server, hangtrace itself) and
//   - it is a launcher (torchrun, torch.distributed.run/launch, accelerate,
//     deepspeed, mpirun, ...), or
//   - the child is a forked copy of it (the same command line: DataLoader
//     workers), or one of its multiprocessing children (spawn, forkserver,
//     resource tracker: mp.spawn ranks, spawned workers), or
//   - the child is a rank (RANK / LOCAL_RANK in its environment) and the
//     parent is not that rank: a launcher of ranks hangtrace does not know.
// A Python test runner or sweep script that merely started a job is none of
// these: the job's root stays below it. Command lines and environments are
// read under `per_read`'s deadline (deadline.h); a read that does not finish
// stops the walk there.
std::optional<std::string> walk_stops_at(const procfs::ProcFs& proc, int child, int parent, int self_pid,
                                         std::chrono::milliseconds per_read);

struct JobRoot {
  int root = 0;            // the job's topmost process
  std::string stopped_at;  // what is above it: "bash 812 (a shell)", "init"
};
// The root of `pid`'s job (its process, when `pid` is a thread). Bounded:
// at most kMaxWalk steps, and a loop in the ppid chain ends the walk.
constexpr int kMaxWalk = 256;
constexpr std::chrono::milliseconds kDefaultReadDeadline{500};
JobRoot job_root_of(const procfs::ProcFs& proc, int pid, int self_pid,
                    std::chrono::milliseconds per_read = kDefaultReadDeadline);

// The program a command line runs: a Python script's or module's name
// ("train.py", "torch.distributed.run", "-c"), else its first word's.
std::string program_of(std::string_view cmdline);

struct JobRequest {
  int root = 0;
  std::string stopped_at;
  std::vector<int> given;  // the pids the user named that belong to it, in their order
};
// The jobs the (usable) pids belong to, in the order of the first pid of each.
std::vector<JobRequest> group_by_job(const procfs::ProcFs& proc, const std::vector<int>& pids, int self_pid,
                                     std::chrono::milliseconds per_read = kDefaultReadDeadline);

// ---- finding the jobs on a host -----------------------------------------------------

// Processes that look like training: they mapped libtorch, or hold a GPU
// (/dev/nvidiaN), or match the selectors (--match, --cgroup) when there
// are any. Reading maps and command lines takes a process's mmap_lock;
// each such read runs under `per_read`'s deadline, and a process whose
// read does not finish in time is left out (listed in *stuck).
struct DiscoveryResult {
  std::vector<int> pids;             // matching processes
  std::vector<std::string> reasons;  // why each matched, same order
  std::vector<int> stuck;            // memory reads that did not finish
  // Processes whose command line was longer than procfs's kMaxCmdlineBytes
  // and matched no --match in its first part: left out, to be said.
  std::vector<int> cut_unmatched;
};
Result<DiscoveryResult> discover_training_processes(const procfs::ProcFs& proc,
                                                    const daemon::JobMatcher& selectors, int self_pid,
                                                    std::chrono::milliseconds per_read);

// ---- the job's shape, from its snapshot ---------------------------------------------

struct RankGroup {
  int rank = 0;
  std::optional<int> local_rank, world_size;
  std::string source;   // the variable that named it (RANK, SLURM_PROCID, ...)
  std::string backend;  // its process group's ("gloo", "nccl"), from its threads' frames; "" unknown
  int pid = 0;
  std::vector<int> workers;  // its descendants (DataLoader workers, spawn children)
};
struct JobShape {
  int root = 0;
  std::optional<int> launcher;   // the root, when it runs ranks rather than training
  std::vector<RankGroup> ranks;  // by rank
};
JobShape job_shape(const Snapshot& snap);

// A process whose environment names a rank, unless its parent has the same
// rank: a DataLoader worker inherits its rank's environment.
bool is_rank_process(const Snapshot& snap, const ProcessInfo& p);
// The target, when it is no rank but starts them (torchrun and the like).
bool is_launcher(const Snapshot& snap, const ProcessInfo& p);
// A command line multiprocessing gave a child it started by exec (spawn,
// forkserver, its resource tracker) rather than by fork.
bool is_multiprocessing_exec_child(std::string_view cmdline);
// A launcher of ranks (torchrun, python -m torch.distributed.run,
// accelerate, deepspeed, mpirun, ...), by its comm or its command line.
bool is_launcher_command(std::string_view comm, std::string_view cmdline);
// A shell, or a program that runs one command and waits for it (timeout,
// nice, env, numactl, taskset, sudo, ...), by its comm: when it waits only
// for its one child, the job's progress is the child's.
bool is_command_wrapper(std::string_view comm);

// What `pid` is in the job, for a line to the user: "the job's main process",
// "a DataLoader worker of job 8974", "rank 1 (local rank 1) of job 8970",
// "a worker of rank 0 of job 8970", "the launcher of job 8970 (torchrun)".
std::string member_role(const Snapshot& snap, int pid);

// ---- containers -------------------------------------------------------------------

// The container and pod a process runs in, from its /proc/PID/cgroup text:
// Docker, containerd (CRI), CRI-O and Podman container ids (64 hex digits)
// and the Kubernetes pod UID; empty when the path names none.
struct ContainerIdentity {
  std::string runtime;  // "docker", "containerd", "cri-o", "podman"; "" when unknown
  std::string id;       // the container id (64 hex digits)
  std::string pod_uid;  // Kubernetes pod UID, dashes restored
};
ContainerIdentity container_from_cgroup(std::string_view cgroup_text);

// The cgroup whose freezer holds a process frozen, from its /proc/PID/cgroup
// text and the cgroup mounts under `cgroup_root`: "freezer:/path" when v1's
// freezer.state is FROZEN or FREEZING, "/path" when v2's cgroup.events says
// "frozen 1" (under `cgroup_root`/unified on a hybrid host, or the root);
// "" when it is not frozen or the path is not a plain absolute one.
std::string frozen_cgroup_of(const std::string& cgroup_text,
                             const std::string& cgroup_root = "/sys/fs/cgroup");

// A process's memory cgroup from its /proc/PID/cgroup text: the v1 memory
// controller's path, else the v2 one ("0::/path"); "" when neither.
std::string memory_cgroup_of(std::string_view cgroup_text);

}  // namespace hangtrace::jobs
