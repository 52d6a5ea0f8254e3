/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * What a syscall is to the BPF syscall dispatcher (bpf/syscalls.bpf.c): which
 * of its concerns looks at the call, which wait kind the blocked-time
 * histograms count it under, and which futex(2) commands wait or wake. The
 * architecture's syscall table (hangtrace/syscall_nr.h) says the same in its
 * wait, kind and shm columns, which the C++ side reads (describe_syscall,
 * classify_sampled_call); this file takes nothing from vmlinux.h but bool,
 * so tests/unit/syscall_table_test.cpp compiles it too and checks that both
 * sides agree on every syscall.
 *
 * ht_syscall_class() runs on every syscall exit of the machine: one switch
 * on the number, compiled to bit tests; the common answer is 0.
 */
#ifndef HANGTRACE_SYSCALL_DISPATCH_H
#define HANGTRACE_SYSCALL_DISPATCH_H

#include "hangtrace/abi.h"
#include "hangtrace/syscall_nr.h"

/* ht_syscall_class() bits: the concern... */
#define HT_CLASS_FUTEX 1       /* futex, futex_waitv, futex_wait */
#define HT_CLASS_FD 2          /* blocking, args[0] is an fd */
#define HT_CLASS_NOFD 4        /* blocking, no fd argument */
#define HT_CLASS_SHM 8         /* a /dev/shm call: looked at on exit */
#define HT_CLASS_SHM_ENOSPC 16 /* the write family: a /dev/shm call only when it fails with ENOSPC */
/* ...and what a blocking call waits for, for the histograms (the rest is fd I/O). */
#define HT_CLASS_NET 32
#define HT_CLASS_POLL 64
#define HT_CLASS_CHILD 128
#define HT_CLASS_SLEEP 256

/* HT_CLASS_* bits of syscall `nr`; 0 for calls no concern looks at. Written
 * by hand, grouped by class: one switch whose cases share their returns
 * compiles to a few bit tests, where cases generated one per table row came
 * out 11 instructions longer on sched_switch. tests/unit/syscall_table_test.cpp
 * checks it against the table's wait, kind and shm columns, row by row. */
static inline __attribute__((always_inline)) __u32 ht_syscall_class(__s64 nr) {
  switch (nr) {
    case HT_NR_futex:
    case HT_NR_futex_waitv:
    case HT_NR_futex_wait:
      return HT_CLASS_FUTEX;
    case HT_NR_write:
    case HT_NR_pwrite64:
    case HT_NR_writev:
    case HT_NR_pwritev:
    case HT_NR_pwritev2:
      return HT_CLASS_FD | HT_CLASS_SHM_ENOSPC;
    case HT_NR_open:
    case HT_NR_creat:
    case HT_NR_openat:
    case HT_NR_openat2:
    case HT_NR_ftruncate:
    case HT_NR_truncate:
    case HT_NR_fallocate:
    case HT_NR_mmap:
    case HT_NR_unlink:
    case HT_NR_unlinkat:
      return HT_CLASS_SHM;
    case HT_NR_read:
    case HT_NR_pread64:
    case HT_NR_readv:
    case HT_NR_preadv:
    case HT_NR_preadv2:
      return HT_CLASS_FD;
    case HT_NR_connect:
    case HT_NR_accept:
    case HT_NR_accept4:
    case HT_NR_sendto:
    case HT_NR_recvfrom:
    case HT_NR_sendmsg:
    case HT_NR_recvmsg:
    case HT_NR_recvmmsg:
    case HT_NR_sendmmsg:
      return HT_CLASS_FD | HT_CLASS_NET;
    case HT_NR_epoll_wait:
    case HT_NR_epoll_pwait:
    case HT_NR_epoll_pwait2:
      return HT_CLASS_FD | HT_CLASS_POLL;
    case HT_NR_poll:
    case HT_NR_ppoll:
    case HT_NR_select:
    case HT_NR_pselect6:
      return HT_CLASS_NOFD | HT_CLASS_POLL;
    case HT_NR_wait4:
    case HT_NR_waitid:
      return HT_CLASS_NOFD | HT_CLASS_CHILD;
    case HT_NR_nanosleep:
    case HT_NR_clock_nanosleep:
      return HT_CLASS_NOFD | HT_CLASS_SLEEP;
    default:
      return 0;
  }
}

/* The histograms' wait kind (enum ht_wait_kind) of a blocking call
 * (HT_CLASS_FD or HT_CLASS_NOFD), from its class. */
static inline __attribute__((always_inline)) __u8 ht_blocking_wait_kind(__u32 c) {
  if (c & HT_CLASS_NET) return HT_WAIT_NET;
  if (c & HT_CLASS_POLL) return HT_WAIT_POLL;
  if (c & HT_CLASS_CHILD) return HT_WAIT_CHILD;
  if (c & HT_CLASS_SLEEP) return HT_WAIT_SLEEP;
  return HT_WAIT_IO;
}

/* futex(2) commands (op & HT_FUTEX_CMD_MASK) that sleep, and those that wake
 * waiters: a futex(2) call is a wait, or a wake the futex concern reports. */
static inline __attribute__((always_inline)) bool ht_futex_cmd_waits(__u32 cmd) {
  return cmd == HT_FUTEX_WAIT || cmd == HT_FUTEX_WAIT_BITSET || cmd == HT_FUTEX_LOCK_PI ||
         cmd == HT_FUTEX_LOCK_PI2 || cmd == HT_FUTEX_WAIT_REQUEUE_PI;
}

static inline __attribute__((always_inline)) bool ht_futex_cmd_wakes(__u32 cmd) {
  return cmd == HT_FUTEX_WAKE || cmd == HT_FUTEX_WAKE_BITSET || cmd == HT_FUTEX_WAKE_OP ||
         cmd == HT_FUTEX_REQUEUE || cmd == HT_FUTEX_CMP_REQUEUE || cmd == HT_FUTEX_CMP_REQUEUE_PI ||
         cmd == HT_FUTEX_UNLOCK_PI;
}

#endif /* HANGTRACE_SYSCALL_DISPATCH_H */
