// The one syscall table (hangtrace/arch/<arch>/syscalls.h) against the
// kernel's numbers, and the BPF dispatcher's classification
// (hangtrace/syscall_dispatch.h, compiled here as C++) against the C++ side's
// (describe_syscall, classify_sampled_call), row by row.
#include <asm/unistd.h>
#include <gtest/gtest.h>
#include <linux/futex.h>

#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "hangtrace/abi.h"
#include "hangtrace/syscall_dispatch.h"
#include "hangtrace/syscall_nr.h"
#include "hangtrace/syscalls.h"
#include "hangtrace/wait_sampler.h"

namespace hangtrace {
namespace {

// The table's wait, kind and shm columns as the dispatcher's HT_CLASS_* bits:
// what ht_syscall_class() must answer for the row.
#define WANT_WAIT_Futex HT_CLASS_FUTEX
#define WANT_WAIT_FdRead HT_CLASS_FD
#define WANT_WAIT_FdWrite HT_CLASS_FD
#define WANT_WAIT_Epoll HT_CLASS_FD
#define WANT_WAIT_Accept HT_CLASS_FD
#define WANT_WAIT_Connect HT_CLASS_FD
#define WANT_WAIT_Poll HT_CLASS_NOFD
#define WANT_WAIT_Select HT_CLASS_NOFD
#define WANT_WAIT_ChildWait HT_CLASS_NOFD
#define WANT_WAIT_Sleep HT_CLASS_NOFD
#define WANT_WAIT_Pause 0
#define WANT_WAIT_FileLock 0
#define WANT_WAIT_Other 0
#define WANT_WAIT_None 0
#define WANT_KIND_FUTEX 0
#define WANT_KIND_IO 0
#define WANT_KIND_NET HT_CLASS_NET
#define WANT_KIND_POLL HT_CLASS_POLL
#define WANT_KIND_CHILD HT_CLASS_CHILD
#define WANT_KIND_SLEEP HT_CLASS_SLEEP
#define WANT_KIND_NONE 0
#define WANT_SHM_CALL HT_CLASS_SHM
#define WANT_SHM_ON_ENOSPC HT_CLASS_SHM_ENOSPC
#define WANT_SHM_NONE 0

// The kernel headers' number for a name, as text: "__NR_<name>" itself when
// these headers are older than the syscall.
#define STRINGIZE(x) #x
#define EXPANDED_STRING(x) STRINGIZE(x)

struct Row {
  const char* name;
  int64_t nr;
  uint32_t want_class;  // from the wait, kind and shm columns
  const char* kernel_nr;
};

#define ROW(name, nr, wait, kind, shm)                                           \
  Row{#name, HT_NR_##name, WANT_WAIT_##wait | WANT_KIND_##kind | WANT_SHM_##shm, \
      EXPANDED_STRING(__NR_##name)},
const std::vector<Row> kRows = {HT_SYSCALLS(ROW)};
#undef ROW

TEST(SyscallTable, EveryNameMapsBackToItself) {
  for (const Row& r : kRows) EXPECT_EQ(describe_syscall(r.nr).name, r.name) << r.nr;
  EXPECT_EQ(HT_NR_futex, describe_syscall(HT_NR_futex).nr);
}

TEST(SyscallTable, NumbersAreUniqueAndTheKernelHeadersAgree) {
  std::set<int64_t> seen;
  int checked = 0;
  for (const Row& r : kRows) {
    EXPECT_TRUE(seen.insert(r.nr).second) << r.name << " repeats " << r.nr;
    const std::string kernel = r.kernel_nr;
    if (kernel.rfind("__NR_", 0) == 0) continue;  // newer than these headers
    EXPECT_EQ(std::strtoll(kernel.c_str(), nullptr, 10), r.nr) << r.name << ": the kernel says " << kernel;
    ++checked;
  }
  EXPECT_GT(checked, static_cast<int>(kRows.size()) / 2);
}

TEST(SyscallTable, TheDispatcherClassifiesEveryRowAsItsColumnsSay) {
  for (const Row& r : kRows) EXPECT_EQ(ht_syscall_class(r.nr), r.want_class) << r.name;
  // Nothing outside the table concerns the dispatcher.
  std::set<int64_t> listed;
  for (const Row& r : kRows) listed.insert(r.nr);
  for (int64_t nr = -1; nr < 1024; ++nr) {
    if (listed.count(nr)) continue;
    EXPECT_EQ(ht_syscall_class(nr), 0u) << nr;
  }
}

TEST(SyscallTable, TheDispatcherAndTheCxxSideAgreeOnEveryWait) {
  for (const Row& r : kRows) {
    const uint32_t c = ht_syscall_class(r.nr);
    const SyscallDesc d = describe_syscall(r.nr);
    int dispatcher_kind = -1;
    if (c & HT_CLASS_FUTEX) dispatcher_kind = HT_WAIT_FUTEX;
    if (c & (HT_CLASS_FD | HT_CLASS_NOFD)) dispatcher_kind = ht_blocking_wait_kind(c);
    EXPECT_EQ(d.wait_kind, dispatcher_kind) << r.name;
    EXPECT_EQ(wait_class_takes_fd(d.wait), (c & HT_CLASS_FD) != 0) << r.name;

    // The daemon's sampled waits: a futex(2) wait, a call with no timeout.
    uint64_t args[6] = {3, FUTEX_WAIT_PRIVATE, 0, 0, 0, 0};
    const SampledCall sampled = classify_sampled_call(r.nr, args);
    EXPECT_EQ(sampled.is_wait, dispatcher_kind >= 0) << r.name;
    if (sampled.is_wait) {
      EXPECT_EQ(sampled.wait_kind, dispatcher_kind) << r.name;
      EXPECT_EQ(sampled.fd, (c & HT_CLASS_FD) ? 3 : -1) << r.name;
    }
  }
}

TEST(SyscallTable, FutexCommandsWaitOrWakeAlikeOnBothSides) {
  for (uint32_t cmd = 0; cmd < 32; ++cmd) {
    EXPECT_EQ(ht_futex_cmd_waits(cmd), decode_futex_op(cmd).is_wait) << cmd;
    EXPECT_FALSE(ht_futex_cmd_waits(cmd) && ht_futex_cmd_wakes(cmd)) << cmd;
  }
  // A private or CLOCK_REALTIME wait is still a wait: the mask keeps the command.
  EXPECT_TRUE(ht_futex_cmd_waits((FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME) &
                                 HT_FUTEX_CMD_MASK));
  EXPECT_TRUE(ht_futex_cmd_wakes(FUTEX_WAKE_PRIVATE & HT_FUTEX_CMD_MASK));
}

}  // namespace
}  // namespace hangtrace
