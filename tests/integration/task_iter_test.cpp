// The BPF task iterator against real blocked threads (root + BTF).
// userspace/collect is not on the include path (its headers are internal).
#include "task_iter.h"

#include <dirent.h>
#include <sys/wait.h>
#include <linux/futex.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "hangtrace/abi.h"
#include "hangtrace/daemon.h"
#include "hangtrace/kallsyms.h"
#include "hangtrace/process_scanner.h"
#include "hangtrace/procfs.h"
#include "hangtrace/syscall_nr.h"
#include "support.h"

namespace hangtrace::testing {
namespace {

using namespace std::chrono_literals;

constexpr uint32_t kTaskInterruptible = HT_TASK_STATE_INTERRUPTIBLE;
constexpr int64_t kSysRead = HT_NR_read;
constexpr int64_t kSysFutex = HT_NR_futex;

std::string stack_text(const KernelSymbols& syms, const KernelTaskView& v) {
  std::string out;
  for (const auto& f : v.stack) out += "    " + syms.symbolize(f.addr) + "\n";
  return out;
}

bool stack_has(const KernelSymbols& syms, const KernelTaskView& v, const std::string& needle) {
  for (const auto& f : v.stack) {
    if (syms.function(f.addr).find(needle) != std::string::npos) return true;
  }
  return false;
}

// Our fds that are BPF objects: progs, maps, links, iterators, BTF.
int bpf_fd_count() {
  int count = 0;
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return -1;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    char target[256];
    std::string path = std::string("/proc/self/fd/") + e->d_name;
    ssize_t n = readlink(path.c_str(), target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    std::string link(target);
    if (link.starts_with("anon_inode:bpf") || link == "anon_inode:btf") ++count;
  }
  closedir(dir);
  return count;
}

TEST(TaskIter, BlockedThreadsReportSyscallStackAndOffCpuTime) {
  HANGTRACE_REQUIRE_BPF();
  Workload w({repro_path("repro_sleeper")});
  std::string line = w.wait_for_line("READY");
  ASSERT_FALSE(line.empty()) << "repro_sleeper never printed READY";
  auto marker = std::chrono::steady_clock::now();
  std::istringstream in(line.substr(6));
  int pid = 0, futex_tid = 0;
  in >> pid >> futex_tid;
  ASSERT_EQ(pid, w.pid());
  ASSERT_GT(futex_tid, 0);

  // The quantity under test: both threads must have been off CPU about this long.
  std::this_thread::sleep_until(marker + 1500ms);
  auto samples = sample_kernel_tasks({pid});
  auto waited = std::chrono::steady_clock::now() - marker;
  ASSERT_TRUE(samples.ok()) << samples.error();
  ASSERT_EQ(samples->size(), 2u);

  auto syms = KernelSymbols::load();
  ASSERT_TRUE(syms.ok()) << syms.error();

  bool saw_reader = false, saw_futex = false;
  for (const auto& s : *samples) {
    const KernelTaskView& v = s.view;
    std::cout << "tid " << s.tid << " comm " << s.comm << " state " << v.state << " off_cpu_ms "
              << v.off_cpu_ns / 1e6 << " (waited "
              << std::chrono::duration<double, std::milli>(waited).count() << " ms) syscall " << s.syscall_nr
              << " user_ip 0x" << std::hex << v.user_ip << std::dec << " frames " << v.stack.size() << "\n"
              << stack_text(*syms, v);
    EXPECT_EQ(s.tgid, pid);
    EXPECT_EQ(s.ppid, static_cast<int>(getpid()));
    EXPECT_EQ(s.comm, "repro_sleeper");
    EXPECT_TRUE(v.state & kTaskInterruptible) << "state " << v.state;
    EXPECT_FALSE(v.on_cpu);
    EXPECT_GE(v.off_cpu_ns, 1'300'000'000u);
    EXPECT_LT(v.off_cpu_ns, 10'000'000'000u);
    EXPECT_EQ(v.stack_error, 0);
    EXPECT_GT(v.stack.size(), 0u);
    EXPECT_NE(v.user_ip, 0u);
    EXPECT_NE(v.user_sp, 0u);
    EXPECT_GT(v.sum_exec_ns, 0u);
    if (s.tid == pid) {
      saw_reader = true;
      EXPECT_EQ(s.syscall_nr, kSysRead);
      EXPECT_TRUE(stack_has(*syms, v, "pipe_read")) << stack_text(*syms, v);
    } else {
      saw_futex = true;
      EXPECT_EQ(s.tid, futex_tid);
      EXPECT_EQ(s.syscall_nr, kSysFutex);
      EXPECT_EQ(s.syscall_args[1], static_cast<uint64_t>(FUTEX_WAIT_PRIVATE));
      EXPECT_TRUE(stack_has(*syms, v, "futex")) << stack_text(*syms, v);
    }
  }
  EXPECT_TRUE(saw_reader);
  EXPECT_TRUE(saw_futex);
}

TEST(TaskIter, UnknownTgidYieldsNoTasks) {
  HANGTRACE_REQUIRE_BPF();
  // Above PID_MAX_LIMIT (4194304), so no process can have it.
  auto samples = sample_kernel_tasks({0x7ffffff0});
  ASSERT_TRUE(samples.ok()) << samples.error();
  EXPECT_TRUE(samples->empty());

  auto none = sample_kernel_tasks({});
  ASSERT_TRUE(none.ok()) << none.error();
  EXPECT_TRUE(none->empty());
}

TEST(TaskIter, OwnProcessIsSampledWhileRunning) {
  HANGTRACE_REQUIRE_BPF();
  auto samples = sample_kernel_tasks({static_cast<int>(getpid())});
  ASSERT_TRUE(samples.ok()) << samples.error();
  ASSERT_GE(samples->size(), 1u);
  bool saw_self = false;
  for (const auto& s : *samples) {
    if (s.tid != static_cast<int>(gettid())) continue;
    saw_self = true;
    // The reading thread is the one running the iterator.
    EXPECT_TRUE(s.view.on_cpu);
    EXPECT_EQ(s.view.off_cpu_ns, 0u);
  }
  EXPECT_TRUE(saw_self);
}

TEST(TaskIter, NothingStaysLoaded) {
  HANGTRACE_REQUIRE_BPF();
  int before = bpf_fd_count();
  ASSERT_GE(before, 0);
  for (int i = 0; i < 3; ++i) {
    auto samples = sample_kernel_tasks({static_cast<int>(getpid())});
    ASSERT_TRUE(samples.ok()) << samples.error();
  }
  EXPECT_EQ(bpf_fd_count(), before);
}

// Kept loaded, the iterator is verified once: later passes add no program,
// map or link (the fd count stays), sample the tgids asked for this time
// and no others, and unkeeping releases everything.
TEST(TaskIter, KeptLoadedIteratorIsReusedThenReleased) {
  HANGTRACE_REQUIRE_BPF();
  int before = bpf_fd_count();
  ASSERT_GE(before, 0);
  keep_task_iterator_loaded(true);
  auto sees_self = [](const std::vector<KernelTaskSample>& samples) {
    for (const auto& s : samples)
      if (s.tid == static_cast<int>(gettid())) return true;
    return false;
  };
  auto first = sample_kernel_tasks({static_cast<int>(getpid())});
  ASSERT_TRUE(first.ok()) << first.error();
  EXPECT_TRUE(sees_self(*first));
  int kept = bpf_fd_count();
  EXPECT_GT(kept, before);
  for (int i = 0; i < 3; ++i) {
    auto again = sample_kernel_tasks({static_cast<int>(getpid()), 0x7ffffff0});
    ASSERT_TRUE(again.ok()) << again.error();
    EXPECT_TRUE(sees_self(*again));
    EXPECT_EQ(bpf_fd_count(), kept);
  }
  auto other = sample_kernel_tasks({0x7ffffff0});
  ASSERT_TRUE(other.ok()) << other.error();
  EXPECT_TRUE(other->empty()) << "the last pass's tgids leaked into this one";
  keep_task_iterator_loaded(false);
  EXPECT_EQ(bpf_fd_count(), before);
}

// The daemon's scan takes every process's stat fields from one identity
// pass: they must be what /proc/PID/stat says, for every process, and leave
// out kernel threads and zombies as the scan did.
TEST(TaskIter, IdentityPassIsWhatProcStatSaysOfEveryProcess) {
  HANGTRACE_REQUIRE_BPF();
  const pid_t zombie = fork();
  ASSERT_GE(zombie, 0);
  if (zombie == 0) _exit(0);
  const procfs::ProcFs proc;
  bool dead = false;
  for (int i = 0; i < 2000 && !dead; ++i) {
    auto st = proc.stat(zombie);
    dead = st && st->state == 'Z';
    if (!dead) std::this_thread::sleep_for(5ms);
  }
  ASSERT_TRUE(dead) << "the child did not become a zombie";

  // Every process's stat before the pass and after it: one that is the
  // same in both did not change during the pass, and the pass must say
  // exactly what its stat file says. Others (an exec, a rename, an exit, a
  // new one: tests run beside this one) are left out of the comparison.
  auto ticks_now = [] {
    timespec boot{};
    clock_gettime(CLOCK_BOOTTIME, &boot);
    return static_cast<uint64_t>(boot.tv_sec) * static_cast<uint64_t>(sysconf(_SC_CLK_TCK));
  };
  auto same = [](const procfs::ProcStat& a, const procfs::ProcStat& b) {
    return a.start_time_ticks == b.start_time_ticks && a.ppid == b.ppid && a.comm == b.comm &&
           a.start_stack == b.start_stack && a.arg_start == b.arg_start && a.arg_end == b.arg_end;
  };
  std::map<int, procfs::ProcStat> before;
  auto pids_before = proc.pids();
  ASSERT_TRUE(pids_before.ok());
  for (int pid : *pids_before)
    if (auto st = proc.stat(pid)) before.emplace(pid, *st);
  const uint64_t pass_ticks = ticks_now();
  auto identities = sample_process_identities();
  ASSERT_TRUE(identities.ok()) << identities.error();
  ASSERT_GT(identities->size(), 1u);
  EXPECT_TRUE(std::is_sorted(identities->begin(), identities->end(),
                             [](const auto& a, const auto& b) { return a.pid < b.pid; }));
  std::set<int> listed;
  size_t compared = 0;
  for (const auto& id : *identities) {
    listed.insert(id.pid);
    auto st = proc.stat(id.pid);
    auto was = before.find(id.pid);
    if (!st || was == before.end() || !same(was->second, *st)) {
      // New, gone or changed around the pass; for our own that is a failure.
      EXPECT_NE(id.pid, getpid()) << (st ? "changed during the pass" : st.error());
      continue;
    }
    ++compared;
    EXPECT_FALSE(st->is_kernel_thread()) << id.pid << " " << id.comm;
    EXPECT_EQ(id.start_time_ticks, st->start_time_ticks) << id.pid << " " << id.comm;
    EXPECT_EQ(id.ppid, st->ppid) << id.pid << " " << id.comm;
    EXPECT_EQ(id.comm, st->comm) << id.pid;
    EXPECT_EQ(id.start_stack, st->start_stack) << id.pid << " " << id.comm;
    EXPECT_EQ(id.arg_start, st->arg_start) << id.pid << " " << id.comm;
    EXPECT_EQ(id.arg_end, st->arg_end) << id.pid << " " << id.comm;
    if (id.pid == getpid()) {
      EXPECT_EQ(id.ppid, getppid());
      EXPECT_NE(id.arg_start, 0u);
    }
  }
  EXPECT_TRUE(listed.count(getpid()));
  EXPECT_FALSE(listed.count(zombie)) << "a zombie has no command line: the scan leaves it out";
  EXPECT_FALSE(listed.count(2)) << "kthreadd";
  EXPECT_GT(compared, 1u);
  // And every process /proc lists that is no kernel thread or zombie, alive
  // and unchanged through the pass, is in it (one in the middle of an exec
  // has no command line for a moment).
  auto pids = proc.pids();
  ASSERT_TRUE(pids.ok());
  for (int pid : *pids) {
    auto st = proc.stat(pid);
    if (!st || st->is_kernel_thread() || st->state == 'Z' || st->state == 'X') continue;
    if (st->start_time_ticks >= pass_ticks) continue;  // started during or after the pass
    auto was = before.find(pid);
    if (was == before.end() || !same(was->second, *st)) continue;
    // Some kernels' iterator never visits pid 1 (this one's: its init,
    // process_api): the scanner reads what the pass left out from /proc.
    if (pid == 1) continue;
    // A leader in exit (PF_EXITING) has given up its mm before it is a
    // zombie -- for seconds when it closes many uprobe links (another
    // test's hangtrace, CI10) -- and the pass leaves it out by design; the
    // scanner reads such pids from /proc.
    if (st->flags & procfs::kPfExiting) continue;
    EXPECT_TRUE(listed.count(pid)) << pid << " (" << st->comm << ") is missing";
  }
  waitpid(zombie, nullptr, 0);

  // The daemon's scanner over the pass lists what a scan of /proc does.
  auto matcher = daemon::JobMatcher::make({{"."}, {}, false});
  ASSERT_TRUE(matcher) << matcher.error();
  daemon::ProcessScanner scanner("/proc", *matcher);
  scanner.set_identity_source(sample_process_identities);
  const uint64_t scan_ticks = ticks_now();
  auto scanned = scanner.scan();
  auto plain = daemon::scan_processes("/proc", *matcher);
  ASSERT_TRUE(scanned) << scanned.error();
  ASSERT_TRUE(plain) << plain.error();
  EXPECT_TRUE(scanner.identity_error().empty()) << scanner.identity_error();
  std::map<int, uint64_t> by_scanner, by_proc;
  for (const auto& e : *scanned) by_scanner[e.pid] = e.start_ticks;
  for (const auto& e : *plain) by_proc[e.pid] = e.start_ticks;
  EXPECT_TRUE(by_scanner.count(1)) << "pid 1, from its stat file if the pass missed it";
  EXPECT_EQ(by_scanner.at(getpid()), by_proc.at(getpid()));
  // The scans ran one after the other: a process in the second and not the
  // first (or with another start time: a reused pid) started after the first
  // began; one in the first and not the second has ended (or is a zombie).
  for (const auto& [pid, start] : by_proc) {
    if (!by_scanner.count(pid) || by_scanner[pid] != start) {
      EXPECT_GE(start, scan_ticks) << pid << " is not in the scanner's list, and was running before it";
    }
  }
  // A process in exit has given up its mm (and with it the command line the
  // matcher reads) before it is a zombie, and one that started during the
  // scans may be inside its execve: the later scan may not match either.
  for (const auto& [pid, start] : by_scanner) {
    if (by_proc.count(pid)) continue;
    auto st = proc.stat(pid);
    EXPECT_TRUE(!st || st->start_time_ticks != start || st->state == 'Z' || st->state == 'X' ||
                (st->flags & procfs::kPfExiting) || start >= scan_ticks)
        << pid << " (" << st->comm << ") is alive and in the scanner's list only";
  }
}

// The identity pass reads no tgid map: a kept object's map, as the brief
// pass left it, stays (no bpf() churn, and the next brief pass sees the same).
TEST(TaskIter, IdentityPassLeavesTheKeptTgidMapAlone) {
  HANGTRACE_REQUIRE_BPF();
  keep_task_iterator_loaded(true);
  auto first = sample_task_briefs({static_cast<int>(getpid())});
  ASSERT_TRUE(first.ok()) << first.error();
  ASSERT_FALSE(first->empty());
  int kept = bpf_fd_count();
  auto ids = sample_process_identities();
  ASSERT_TRUE(ids.ok()) << ids.error();
  EXPECT_EQ(bpf_fd_count(), kept);
  auto again = sample_task_briefs({static_cast<int>(getpid())});
  ASSERT_TRUE(again.ok()) << again.error();
  EXPECT_EQ(again->size(), first->size());
  for (const auto& b : *again) EXPECT_EQ(b.tgid, static_cast<int>(getpid()));
  keep_task_iterator_loaded(false);
}

TEST(TaskIter, UnavailableReasonIsEmptyWithRootAndBtf) {
  HANGTRACE_REQUIRE_BPF();
  EXPECT_EQ(bpf_unavailable_reason(), "");
}

}  // namespace
}  // namespace hangtrace::testing
