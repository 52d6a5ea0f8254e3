// The BPF task iterator against real blocked threads (root + BTF).
// userspace/collect is not on the include path (its headers are internal).
#include "task_iter.h"

#include <dirent.h>
#include <linux/futex.h>
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "hangtrace/abi.h"
#include "hangtrace/kallsyms.h"
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

TEST(TaskIter, UnavailableReasonIsEmptyWithRootAndBtf) {
  HANGTRACE_REQUIRE_BPF();
  EXPECT_EQ(bpf_unavailable_reason(), "");
}

}  // namespace
}  // namespace hangtrace::testing
