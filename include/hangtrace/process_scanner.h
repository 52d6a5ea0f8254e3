// The daemon's scan of /proc for jobs (daemon.h's scan_processes), with a
// memory of what each process was: reading every process's command line
// every 2 s is most of what a host with 1,000 processes costs the daemon
// (~1.3 % of a core, matching nothing). Each scan still reads every
// process's stat (its start time tells a reused pid, its parent a re-parented
// one); the command line only of a process not seen before, of one whose
// stat says its image changed (exec: its comm, stack or argv moved), and of
// every process once every `full_every` scans (a process that rewrites its
// own argv in place, as setproctitle does, is seen within that many scans).
// A match is made again only when what it depends on changed (the command
// line; the cgroup and GPU fds, read on every scan when those selectors are
// used). Each process's stat is read through a descriptor kept open on it
// (one pread a scan instead of open, read, close and a path walk: the
// descriptor stays bound to that process, so a reused pid reads as gone and
// is opened anew), up to half the open-file limit.
// With an identity source (the daemon's: one BPF task-iterator pass over
// the host), each scan takes every process's stat fields from it instead:
// /proc is listed, and read only for command lines and for the pids the
// pass left out (a kernel thread once, zombies); a scan whose source fails
// reads every stat file.
// The entries are the ones scan_processes returns, in the same order.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "hangtrace/daemon.h"
#include "hangtrace/procfs.h"
#include "hangtrace/result.h"

namespace hangtrace::daemon {

class ProcessScanner {
 public:
  // `matcher` must outlive the scanner.
  ProcessScanner(std::string proc_root, const JobMatcher& matcher, unsigned full_every = 15);
  ~ProcessScanner();
  ProcessScanner(const ProcessScanner&) = delete;
  ProcessScanner& operator=(const ProcessScanner&) = delete;

  Result<std::vector<ProcessEntry>> scan();

  // Every process's stat fields (pid, ppid, flags, comm, start time,
  // start_stack, arg_start, arg_end), in pid order, without kernel threads
  // or zombies: what a scan would read from each /proc/PID/stat.
  using IdentitySource = std::function<Result<std::vector<procfs::ProcStat>>()>;
  void set_identity_source(IdentitySource source);
  // The last scan's source failure ("" after a scan that used it).
  const std::string& identity_error() const { return identity_error_; }

  // Command lines read and matches made, over all scans (what was saved).
  uint64_t cmdlines_read() const { return cmdlines_read_; }
  uint64_t matches_made() const { return matches_made_; }
  size_t stat_fds_open() const { return stat_fds_.size(); }

 private:
  struct Known {
    uint64_t start_ticks = 0, start_stack = 0, arg_start = 0, arg_end = 0;
    std::string comm;
    ProcessEntry kept;  // its command line as keep_cmdline keeps it
    MatchInputs inputs;
    std::string matched_by;
  };
  Result<procfs::ProcStat> read_stat(int pid);
  void close_stat(int pid);
  void close_stats();
  // The entry of a live process whose stat fields are `stat`; false: none
  // (gone, a zombie, or exiting).
  bool entry_for(const procfs::ProcFs& proc, const procfs::ProcStat& stat, ProcessEntry& e);

  std::string proc_root_;
  const JobMatcher& matcher_;
  unsigned full_every_;
  uint64_t scans_ = 0;
  std::map<int, Known> known_;
  std::map<int, int> stat_fds_;  // pid -> its stat, open
  size_t max_stat_fds_ = 0;
  uint64_t cmdlines_read_ = 0, matches_made_ = 0;
  IdentitySource identities_;
  std::string identity_error_;
  std::set<int> not_processes_;  // listed pids the stat file says are kernel threads
};

}  // namespace hangtrace::daemon
