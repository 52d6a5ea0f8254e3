// Polls: a main thread that sleeps on a timer, wakes, re-checks something
// and sleeps again (`while not ready: time.sleep(0.05)`, a lock tried with
// LOCK_NB and retried) moves a little all the time and so looks alive,
// though the job is stuck. A main thread found by the thread pass in a
// sleep of at most 0.5 s (or within a few looks after) is watched for a
// moment: how often it wakes, how much CPU it uses, and how often it is
// found asleep say whether it is a poll. Its process's fds on files another
// process holds a lock on (and it does not) are what a lock poll is after;
// their lines of /proc/locks and their holders are kept as for a blocking
// lock wait. This runs before the progress samples, so that holders pulled
// in as peers are sampled too.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <thread>

#include "collector_pass.h"
#include "wait_memory.h"
#include "hangtrace/syscalls.h"

namespace hangtrace::collector_pass {

namespace {

// How long, and how often, a suspected poll is watched: long enough to see a
// 100 ms poll wake many times, short enough that a snapshot stays quick.
constexpr double kWatchS = 1.5;
constexpr auto kWatchStep = std::chrono::milliseconds(25);
// A poll's re-check is short: a thread found awake this many looks in a
// row is working.
constexpr int kMaxAwakeLooks = 4;
// At most this many threads are watched (the main threads of the job).
constexpr size_t kMaxWatched = 16;
// The regular files of a poller's process looked at for locks, at most.
constexpr size_t kMaxLockCandidates = 1024;

// A main thread that is not found asleep is looked at again this many times.
constexpr int kLooks = 4;
constexpr auto kLookStep = std::chrono::milliseconds(10);

bool in_sleep_call(const SyscallState& s) {
  return s.mode == SyscallState::Mode::InSyscall && only_sleeps(s.nr, s.args);
}

// A poll sleeps briefly between its tries: at most this long (3 wakeups in
// the watch), as the sleep call's own timeout says.
constexpr double kMaxPollSleepS = 0.5;

bool sleeps_briefly(const WaitMemory& m) { return m.timeout_s && *m.timeout_s <= kMaxPollSleepS; }

// What the thread pass may catch a poll in: its sleep, its own code, or the
// try itself (a lock call that does not wait). A thread blocked in anything
// else waits on an object of its own and is judged by it.
bool maybe_polling(const SyscallState& s) {
  if (s.mode != SyscallState::Mode::InSyscall)
    return s.mode == SyscallState::Mode::Running || s.mode == SyscallState::Mode::User;
  if (in_sleep_call(s)) return true;
  return describe_syscall(s.nr).wait == WaitClass::FileLock && !waits_for_file_lock(s.nr, s.args);
}

}  // namespace

void Collector::watch_pollers() {
  struct Watched {
    ProcessInfo* process;
    ThreadInfo* thread;
    uint64_t switches_start = 0, cpu_start = 0;
  };
  std::vector<Watched> watched;
  for (auto& p : snap_.processes) {
    if (p.role == ProcessRole::Peer || exited_.count(p.pid)) continue;
    for (auto& t : p.threads) {
      if (t.tid != p.pid || !maybe_polling(t.syscall) || memory_blocked_.count(p.pid)) continue;
      // In a short sleep now, or within a few looks: a poll is caught awake
      // only for the moment it re-checks. A long sleep is no poll.
      bool short_sleep = in_sleep_call(t.syscall) && sleeps_briefly(t.memory);
      for (int look = 0; look < kLooks && !short_sleep && !in_sleep_call(t.syscall); ++look) {
        std::this_thread::sleep_for(kLookStep);
        auto now = proc_.thread_syscall(proc_id(p.pid), t.tid);
        if (!now) break;
        if (!in_sleep_call(*now)) continue;
        short_sleep = sleeps_briefly(read_wait_memory(t.tid, *now).memory);
        break;
      }
      if (!short_sleep) continue;
      auto status = proc_.thread_status(proc_id(p.pid), t.tid);
      auto cpu = proc_.thread_schedstat(proc_id(p.pid), t.tid);
      if (!status || !cpu) continue;
      watched.push_back({&p, &t, status->voluntary_ctxt_switches, *cpu});
      if (watched.size() >= kMaxWatched) break;
    }
    if (watched.size() >= kMaxWatched) break;
  }
  if (watched.empty()) return;

  std::vector<PollWatch> seen(watched.size());
  std::vector<bool> gone(watched.size(), false);  // exited, or no poll: no longer watched
  std::vector<int> awake_in_a_row(watched.size(), 0);
  const double started = monotonic_s();
  bool checked_wakeups = false;
  while (monotonic_s() - started < kWatchS && std::find(gone.begin(), gone.end(), false) != gone.end()) {
    std::this_thread::sleep_for(kWatchStep);
    // A thread that has not woken once in the first third sleeps longer
    // than a poll does: no need to watch it out.
    if (!checked_wakeups && monotonic_s() - started >= kWatchS / 3) {
      checked_wakeups = true;
      for (size_t i = 0; i < watched.size(); ++i) {
        auto status = proc_.thread_status(proc_id(watched[i].process->pid), watched[i].thread->tid);
        if (!status || status->voluntary_ctxt_switches == watched[i].switches_start) gone[i] = true;
      }
    }
    for (size_t i = 0; i < watched.size(); ++i) {
      if (gone[i]) continue;
      auto sc = proc_.thread_syscall(proc_id(watched[i].process->pid), watched[i].thread->tid);
      if (!sc) {
        gone[i] = true;
        continue;
      }
      ++seen[i].samples;
      if (in_sleep_call(*sc)) {
        ++seen[i].asleep;
        awake_in_a_row[i] = 0;
      } else if (++awake_in_a_row[i] >= kMaxAwakeLooks) {
        gone[i] = true;  // working, not re-checking: no poll
      }
    }
  }
  const double watched_s = monotonic_s() - started;
  std::set<int> poller_pids;
  for (size_t i = 0; i < watched.size(); ++i) {
    if (gone[i]) continue;
    const int pid = watched[i].process->pid, tid = watched[i].thread->tid;
    auto status = proc_.thread_status(proc_id(pid), tid);
    auto cpu = proc_.thread_schedstat(proc_id(pid), tid);
    if (!status || !cpu) continue;
    PollWatch w = seen[i];
    w.watched_s = watched_s;
    w.sleeps = status->voluntary_ctxt_switches >= watched[i].switches_start
                   ? status->voluntary_ctxt_switches - watched[i].switches_start
                   : 0;
    w.cpu_ns = *cpu >= watched[i].cpu_start ? *cpu - watched[i].cpu_start : 0;
    watched[i].thread->poll = std::move(w);
    if (watched[i].thread->poll->sleeps > 0) poller_pids.insert(pid);
  }
  debug(fmt::format("watched {} sleeping main thread(s) for {:.2f} s", watched.size(), watched_s));
  if (poller_pids.empty()) return;

  // The files a lock poll may be after: regular files the poller's process
  // holds open and holds no lock on.
  std::set<procfs::FileId> files;
  std::set<std::string> paths;
  std::map<int, std::vector<std::pair<int, procfs::FileId>>> candidates;  // pid -> (fd, file)
  for (auto& p : snap_.processes) {
    if (!poller_pids.count(p.pid)) continue;
    size_t looked = 0;
    for (auto& f : p.fds) {
      if (f.kind != FdKind::File || f.link.empty() || f.link[0] != '/' || !f.locks.empty()) continue;
      if (++looked > kMaxLockCandidates) break;
      auto id = proc_.fd_file(proc_id(p.pid), f.fd);
      if (!id) continue;
      f.dev_major = id->dev_major;
      f.dev_minor = id->dev_minor;
      f.inode = id->inode;
      candidates[p.pid].push_back({f.fd, *id});
    }
  }
  if (candidates.empty()) return;
  auto locks = proc_.locks();
  if (!locks) {
    limitation(
        fmt::format("whether the polling thread(s) wait for a file lock is unknown: {}", locks.error()));
    return;
  }
  for (auto& [poller_pid, fds] : candidates) {
    const int pid = poller_pid;  // a copy: clang 14 does not capture structured bindings
    ProcessInfo* p = nullptr;
    for (auto& q : snap_.processes)
      if (q.pid == pid) p = &q;
    if (!p) continue;
    ThreadInfo* main = nullptr;
    for (auto& t : p->threads)
      if (t.tid == pid) main = &t;
    if (!main || !main->poll) continue;
    for (const auto& [fd, file] : fds) {
      const procfs::FileId id = file;
      // Locked by another process (a pid that is not this one, or an OFD
      // lock this process does not hold: its own fds hold none here).
      const bool locked_by_other = std::any_of(locks->begin(), locks->end(), [&](const FileLock& l) {
        return !l.waiting && l.dev_major == id.dev_major && l.dev_minor == id.dev_minor &&
               l.inode == id.inode && l.pid != pid;
      });
      if (!locked_by_other) continue;
      main->poll->lock_fds.push_back(fd);
      files.insert(id);
      for (const auto& f : p->fds)
        if (f.fd == fd) paths.insert(f.link);
    }
  }
  if (!files.empty()) add_file_locks(*locks, files, paths);
}

}  // namespace hangtrace::collector_pass
