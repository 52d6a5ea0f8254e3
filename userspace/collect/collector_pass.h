// The collector's one pass (collect_snapshot, collector.h) as a class whose
// concerns live in their own files: collector.cpp (the target, the tree,
// one process, the whole pass), collector_threads.cpp (threads, their
// syscalls and wait memory, progress samples, kernel and native stacks),
// collector_fds.cpp (fds, maps, readiness probes), collector_sockets.cpp
// (socket tables, peers) and collector_shm.cpp (/dev/shm). Internal to
// userspace/collect.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <fmt/format.h>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "collector.h"
#include "hangtrace/procfs.h"

namespace hangtrace::collector_pass {

using procfs::is_gone_errno;
using procfs::ProcFs;

// Fds looked at per process, in the tree and in the host-wide search for peers.
constexpr size_t kMaxFdsPerProcess = 1 << 17;
// Processes outside the job pulled in as peers (the other ends of its waits), at most.
constexpr size_t kMaxPeers = 64;

double monotonic_s();
// Both clocks read back to back: live events carry CLOCK_MONOTONIC, people
// read wall-clock time, and blocked times are durations back from this instant.
void record_sample_clocks(Snapshot& snap);

// The socket tables of one network namespace, keyed by inode.
struct NetnsSockets {
  uint64_t netns = 0;
  int reader_pid = 0;  // whose /proc/PID/net we read
  std::unordered_map<uint64_t, SocketInfo> by_inode;
  std::unordered_map<uint64_t, std::string> remote_ip;  // inet sockets only
  // Listening TCP/UDP sockets by port, for connections not accepted yet.
  std::multimap<uint16_t, uint64_t> tcp_listeners;
  // Unconnected UDP sockets by port, with the address each is bound to (a
  // resolver on 127.0.0.53:53 answers datagrams sent there).
  std::multimap<uint16_t, std::pair<std::string, uint64_t>> udp_bound;
};

struct ProgressSample {
  bool ok = false;
  uint64_t cpu_ns = 0;
  uint64_t io_bytes = 0;
  uint64_t runs = 0;  // times put on a CPU (schedstat)
};

class Collector {
 public:
  Collector(int target, const CollectOptions& options)
      : target_(target), options_(options), proc_(options.proc_root) {}

  Result<Snapshot> run();

 private:
  // ---- helpers ----
  void limitation(std::string line);
  void debug(const std::string& line) const {
    if (options_.verbosity >= 3) fmt::print(stderr, "hangtrace: {}\n", line);
  }
  std::optional<Error> validate_target();
  // A 'Z' process whose leader called pthread_exit still runs its other
  // threads, but /proc/PID/{fd,maps,ns,root} went with the leader: the same
  // files under /proc/TID of a live thread show them. Returns the id to use
  // in /proc paths, or nullopt when every thread has exited.
  std::optional<int> live_proc_id(int pid, const procfs::ProcStat& st) const;
  int proc_id(int pid) const {
    auto it = proc_ids_.find(pid);
    return it == proc_ids_.end() ? pid : it->second;
  }
  void scan_all_processes();
  std::vector<int> descendants_of(int pid) const;
  // Fills a ProcessInfo, or nullopt when the process is gone.
  std::optional<ProcessInfo> collect_process(int pid, ProcessRole role);
  void collect_fds(ProcessInfo& p);
  // The mounts of the files its threads wait on (after collect_threads).
  void collect_mounts(ProcessInfo& p);
  void collect_threads(ProcessInfo& p);
  std::vector<int> waited_fds(const ProcessInfo& p, const ThreadInfo& t) const;
  void load_network_namespace(uint64_t netns, int reader_pid);
  const SocketInfo* find_socket(uint64_t inode) const;
  // The unconnected UDP sockets of its namespace bound to the remote end of
  // a UDP socket `s` on this host (the server a datagram to it reaches).
  std::vector<uint64_t> udp_receivers(const SocketInfo& s) const;
  // /etc/resolv.conf of a process of the job, read once per mount namespace.
  ResolverConfig resolver_config(int pid, uint64_t mntns);
  void find_peers();
  // /proc/locks on the files the job waits to lock, and the processes
  // holding those locks (peers when outside the job): collector_locks.cpp.
  // The processes on the host outside `skip` (never hangtrace, no kernel
  // thread) holding an fd that `wanted` (pid, fd, its link) picks, in /proc
  // order, at most `at_most`: one pass over every fd on the host.
  std::vector<int> host_processes_holding(
      const std::unordered_set<int>& skip, size_t at_most,
      const std::function<bool(int pid, int fd, const std::string& link)>& wanted) const;
  void collect_file_locks();
  void resolve_fifos();
  void find_lock_sharers();
  void mark_fifos(ProcessInfo& p);
  // Keeps the lines of `locks` on `files` and pulls their holders outside the
  // job in as peers (collector_locks.cpp).
  void add_file_locks(const std::vector<FileLock>& locks, const std::set<procfs::FileId>& files,
                      const std::set<std::string>& paths);
  // Main threads asleep on a timer at both progress samples, watched a while
  // longer: polls, and the locked files they may be after (collector_polls.cpp).
  void watch_pollers();
  ProgressSample sample_progress(int pid, int tid) const;
  void take_progress_samples(bool start);
  void collect_kernel_views();
  // Per process: its maps (read once), then its Python and native stacks.
  void collect_maps_and_stacks();
  void keep_maps(ProcessInfo& p, const std::vector<Mapping>& maps);
  void probe_readiness(ProcessInfo& p);
  void collect_shm();
  void assemble_sockets();
  bool target_still_there() const;

  int target_;
  CollectOptions options_;
  ProcFs proc_;
  Snapshot snap_;
  size_t dropped_limitations_ = 0;
  uint64_t target_start_time_ = 0;

  std::vector<int> all_pids_;                        // /proc at the start
  std::unordered_map<int, procfs::ProcStat> stats_;  // of all_pids_
  std::unordered_map<int, std::vector<int>> children_;
  std::unordered_map<int, std::vector<uint64_t>> futex_addresses_;  // by pid
  std::unordered_set<int> memory_blocked_;                          // pids whose mmap_lock did not come free
  std::map<std::string, procfs::FileId> fifos_;  // FIFOs a thread waits on, by their fd link (the path)
  std::unordered_set<int> exited_;               // zombies: no fds, maps or memory left
  std::unordered_map<int, int> proc_ids_;        // pid -> live tid, where the leader has exited
  std::map<uint64_t, NetnsSockets> netns_sockets_;
  std::map<uint64_t, ResolverConfig> resolver_by_mntns_;
  uint64_t own_netns_ = 0;
  double progress_start_s_ = 0;
};

}  // namespace hangtrace::collector_pass
