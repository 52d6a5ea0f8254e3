/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The syscalls hangtrace knows, on x86_64: the one place their numbers are
 * written (arch/x86/entry/syscalls/syscall_64.tbl). Included through
 * hangtrace/syscall_nr.h, never directly; the BPF programs and the C++ side
 * both read it, and tests/unit/syscall_table_test.cpp checks every number
 * against the kernel headers' __NR_<name>.
 *
 * One row per syscall, X(name, nr, wait, kind, shm):
 *   name  the kernel's name: HT_NR_<name>, and the name reports print
 *   nr    its number on this architecture
 *   wait  what a thread blocked in it waits for: the C++ WaitClass
 *         enumerator (hangtrace/syscalls.h). It also says which concern of
 *         the BPF syscall dispatcher tracks the call: Futex the futex
 *         concern; FdRead, FdWrite, Epoll, Accept, Connect the blocking
 *         concern, args[0] an fd; Poll, Select, ChildWait, Sleep the blocking
 *         concern, no fd; None, Pause, FileLock, Other neither (named in
 *         reports only; FileLock waits are read from /proc/locks)
 *   kind  the wait kind its waits are counted under (enum ht_wait_kind,
 *         abi.h: FUTEX, IO, NET, POLL, CHILD, SLEEP), NONE for calls neither
 *         concern tracks
 *   shm   whether the /dev/shm concern looks at its exit (bpf/shm_calls.bpf.h):
 *         CALL always, ON_ENOSPC only when it failed with ENOSPC, NONE never
 * The kind and shm columns are tokens pasted into macro names, maybe after a
 * macro passed them on, so none may be a macro name itself (hence ON_ENOSPC:
 * ENOSPC is one). The BPF
 * dispatcher's switch (hangtrace/syscall_dispatch.h) is grouped by hand;
 * tests/unit/syscall_table_test.cpp holds it to these columns.
 *
 * Another architecture gets its own arch/<arch>/syscalls.h with the same
 * names; a syscall it lacks (open, creat, unlink on arm64) is listed there
 * with a negative number below -1, which no call has, so that code naming it
 * still compiles and never matches.
 */
#ifndef HANGTRACE_ARCH_X86_64_SYSCALLS_H
#define HANGTRACE_ARCH_X86_64_SYSCALLS_H

/* clang-format off */
#define HT_SYSCALLS(X)                                       \
  X(read,              0, FdRead,    IO,    NONE)            \
  X(write,             1, FdWrite,   IO,    ON_ENOSPC)       \
  X(open,              2, None,      NONE,  CALL)            \
  X(poll,              7, Poll,      POLL,  NONE)            \
  X(mmap,              9, None,      NONE,  CALL)            \
  X(pread64,          17, FdRead,    IO,    NONE)            \
  X(pwrite64,         18, FdWrite,   IO,    ON_ENOSPC)       \
  X(readv,            19, FdRead,    IO,    NONE)            \
  X(writev,           20, FdWrite,   IO,    ON_ENOSPC)       \
  X(select,           23, Select,    POLL,  NONE)            \
  X(sched_yield,      24, None,      NONE,  NONE)            \
  X(pause,            34, Pause,     NONE,  NONE)            \
  X(nanosleep,        35, Sleep,     SLEEP, NONE)            \
  X(connect,          42, Connect,   NET,   NONE)            \
  X(accept,           43, Accept,    NET,   NONE)            \
  X(sendto,           44, FdWrite,   NET,   NONE)            \
  X(recvfrom,         45, FdRead,    NET,   NONE)            \
  X(sendmsg,          46, FdWrite,   NET,   NONE)            \
  X(recvmsg,          47, FdRead,    NET,   NONE)            \
  X(wait4,            61, ChildWait, CHILD, NONE)            \
  X(msgsnd,           69, Other,     NONE,  NONE)            \
  X(msgrcv,           70, Other,     NONE,  NONE)            \
  X(fcntl,            72, FileLock,  NONE,  NONE)            \
  X(flock,            73, FileLock,  NONE,  NONE)            \
  X(fsync,            74, Other,     NONE,  NONE)            \
  X(truncate,         76, None,      NONE,  CALL)            \
  X(ftruncate,        77, None,      NONE,  CALL)            \
  X(creat,            85, None,      NONE,  CALL)            \
  X(unlink,           87, None,      NONE,  CALL)            \
  X(rt_sigtimedwait, 128, Pause,     NONE,  NONE)            \
  X(rt_sigsuspend,   130, Pause,     NONE,  NONE)            \
  X(futex,           202, Futex,     FUTEX, NONE)            \
  X(clock_nanosleep, 230, Sleep,     SLEEP, NONE)            \
  X(epoll_wait,      232, Epoll,     POLL,  NONE)            \
  X(waitid,          247, ChildWait, CHILD, NONE)            \
  X(openat,          257, None,      NONE,  CALL)            \
  X(unlinkat,        263, None,      NONE,  CALL)            \
  X(pselect6,        270, Select,    POLL,  NONE)            \
  X(ppoll,           271, Poll,      POLL,  NONE)            \
  X(epoll_pwait,     281, Epoll,     POLL,  NONE)            \
  X(fallocate,       285, None,      NONE,  CALL)            \
  X(accept4,         288, Accept,    NET,   NONE)            \
  X(preadv,          295, FdRead,    IO,    NONE)            \
  X(pwritev,         296, FdWrite,   IO,    ON_ENOSPC)       \
  X(recvmmsg,        299, FdRead,    NET,   NONE)            \
  X(sendmmsg,        307, FdWrite,   NET,   NONE)            \
  X(preadv2,         327, FdRead,    IO,    NONE)            \
  X(pwritev2,        328, FdWrite,   IO,    ON_ENOSPC)       \
  X(pidfd_open,      434, None,      NONE,  NONE)            \
  X(openat2,         437, None,      NONE,  CALL)            \
  X(pidfd_getfd,     438, None,      NONE,  NONE)            \
  X(epoll_pwait2,    441, Epoll,     POLL,  NONE)            \
  X(futex_waitv,     449, Futex,     FUTEX, NONE)            \
  X(futex_wait,      455, Futex,     FUTEX, NONE)
/* clang-format on */

#endif /* HANGTRACE_ARCH_X86_64_SYSCALLS_H */
