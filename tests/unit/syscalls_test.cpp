#include <gtest/gtest.h>
#include <linux/futex.h>
#include <poll.h>
#include <time.h>

#include "hangtrace/syscalls.h"

namespace hangtrace {
namespace {

TEST(Syscalls, NamesAndWaitClasses) {
  EXPECT_EQ(describe_syscall(HT_NR_futex).name, "futex");
  EXPECT_EQ(describe_syscall(HT_NR_futex).wait, WaitClass::Futex);
  EXPECT_EQ(describe_syscall(HT_NR_read).wait, WaitClass::FdRead);
  EXPECT_EQ(describe_syscall(HT_NR_recvfrom).name, "recvfrom");
  EXPECT_EQ(describe_syscall(HT_NR_poll).wait, WaitClass::Poll);
  EXPECT_EQ(describe_syscall(HT_NR_epoll_pwait).wait, WaitClass::Epoll);
  EXPECT_EQ(describe_syscall(HT_NR_wait4).wait, WaitClass::ChildWait);
  EXPECT_EQ(describe_syscall(HT_NR_clock_nanosleep).wait, WaitClass::Sleep);
  EXPECT_EQ(describe_syscall(HT_NR_futex_wait).name, "futex_wait");
  EXPECT_EQ(describe_syscall(9999).name, "syscall_9999");
  EXPECT_EQ(describe_syscall(9999).wait, WaitClass::None);
  EXPECT_EQ(describe_syscall(-1).name, "none");
}

TEST(Syscalls, FutexOpDecoding) {
  FutexOp op =
      decode_futex_op(FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG);  // glibc's sem_wait / pthread_cond_wait
  EXPECT_EQ(op.cmd_name, "FUTEX_WAIT_BITSET");
  EXPECT_TRUE(op.is_private);
  EXPECT_TRUE(op.is_wait);
  EXPECT_TRUE(op.absolute_timeout);
  EXPECT_EQ(op.text, "FUTEX_WAIT_BITSET|FUTEX_PRIVATE_FLAG");

  op = decode_futex_op(FUTEX_WAIT | FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME);
  EXPECT_EQ(op.text, "FUTEX_WAIT|FUTEX_PRIVATE_FLAG|FUTEX_CLOCK_REALTIME");
  EXPECT_FALSE(op.absolute_timeout);

  op = decode_futex_op(FUTEX_LOCK_PI);  // shared
  EXPECT_TRUE(op.is_pi);
  EXPECT_TRUE(op.is_wait);
  EXPECT_FALSE(op.is_private);

  op = decode_futex_op(FUTEX_WAKE_PRIVATE);  // a wake never sleeps
  EXPECT_EQ(op.cmd_name, "FUTEX_WAKE");
  EXPECT_FALSE(op.is_wait);

  EXPECT_EQ(decode_futex_op(77).cmd_name, "FUTEX_OP_77");
}

TEST(Syscalls, TimeoutArguments) {
  uint64_t futex_args[6] = {0x1000, FUTEX_WAIT_BITSET_PRIVATE, 0, 0x2000, 0, 0xffffffff};
  TimeoutArg t = timeout_arg(HT_NR_futex, futex_args);
  EXPECT_EQ(t.kind, TimeoutArg::Kind::TimespecPtr);
  EXPECT_EQ(t.arg_index, 3);
  EXPECT_TRUE(t.absolute);
  uint64_t wake[6] = {0x1000, FUTEX_WAKE, 1, 0, 0, 0};
  EXPECT_EQ(timeout_arg(HT_NR_futex, wake).kind, TimeoutArg::Kind::None);
  uint64_t poll_args[6] = {0x1000, 2, 5000, 0, 0, 0};
  EXPECT_EQ(timeout_arg(HT_NR_poll, poll_args).kind, TimeoutArg::Kind::Milliseconds);
  uint64_t abs_sleep[6] = {CLOCK_MONOTONIC, TIMER_ABSTIME, 0x3000, 0, 0, 0};
  EXPECT_TRUE(timeout_arg(HT_NR_clock_nanosleep, abs_sleep).absolute);
  EXPECT_EQ(timeout_arg(HT_NR_select, poll_args).kind, TimeoutArg::Kind::TimevalPtr);
}

TEST(Syscalls, Formatting) {
  uint64_t futex_args[6] = {0x7f0000001040, FUTEX_WAIT_BITSET_PRIVATE, 0, 0, 0, 0xffffffff};
  EXPECT_EQ(format_syscall(HT_NR_futex, futex_args),
            "futex(0x7f0000001040, FUTEX_WAIT_BITSET|FUTEX_PRIVATE_FLAG, 0, NULL)");
  uint64_t read_args[6] = {5, 0x1000, 4, 0, 0, 0};
  EXPECT_EQ(format_syscall(HT_NR_read, read_args), "read(5, 0x1000, 4)");
  uint64_t poll_args[6] = {0x1000, 1, 5000, 0, 0, 0};
  EXPECT_EQ(format_syscall(HT_NR_poll, poll_args, {{5, POLLIN}}), "poll([{fd=5, POLLIN}], 1, 5000)");
}

}  // namespace
}  // namespace hangtrace
