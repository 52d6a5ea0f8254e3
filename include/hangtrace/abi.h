/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The one ABI shared by the BPF programs (bpf/<concern>.bpf.c) and the C++ side.
 * Fixed-width types only, explicit padding, units in the field comments.
 * The C++ side static_asserts the layout (see userspace/collect/task_iter.cpp).
 */
#ifndef HANGTRACE_ABI_H
#define HANGTRACE_ABI_H

#ifdef __BPF__
/* vmlinux.h provides __u32 and friends. */
#else
#include <linux/types.h>
#endif

#define HT_ABI_VERSION 1

/* Frames kept per kernel stack; deep enough for futex/pipe/socket waits. */
#define HT_MAX_KSTACK 32
#define HT_COMM_LEN 16

/* Bits of ht_task_record.sample_flags. */
#define HT_TASK_ON_CPU 0x1u        /* task was running on a CPU when sampled */
#define HT_TASK_HAS_USER_REGS 0x2u /* user_* and syscall_* fields are valid */
#define HT_TASK_KTHREAD 0x4u       /* PF_KTHREAD */
#define HT_TASK_EXITING 0x8u       /* PF_EXITING */

/*
 * One record per task (thread) of a traced process, written by the task
 * iterator (bpf/task_snapshot.bpf.c) with bpf_seq_write().
 */
struct ht_task_record {
  __u32 abi_version;           /* HT_ABI_VERSION */
  __u32 tid;                   /* task->pid (global namespace) */
  __u32 tgid;                  /* task->tgid (global namespace) */
  __u32 ppid;                  /* task->real_parent->tgid */
  __u32 state;                 /* task->__state bits (TASK_INTERRUPTIBLE=1, ...) */
  __u32 exit_state;            /* task->exit_state (EXIT_ZOMBIE=0x20, ...) */
  __u32 task_flags;            /* task->flags (PF_*) */
  __u32 sample_flags;          /* HT_TASK_* */
  __u64 off_cpu_ns;            /* ns since the task last left a CPU (scheduler
                                  clock: sched_info.last_arrival + last slice); 0
                                  when on CPU */
  __u64 sum_exec_ns;           /* se.sum_exec_runtime, ns on CPU in total */
  __u64 nvcsw;                 /* voluntary context switches */
  __u64 nivcsw;                /* involuntary context switches */
  __u64 start_boottime_ns;     /* task->start_boottime, ns since boot */
  __u64 user_ip;               /* user-mode instruction pointer (pt_regs) */
  __u64 user_sp;               /* user-mode stack pointer */
  __u64 user_bp;               /* user-mode frame pointer (rbp) */
  __s64 syscall_nr;            /* orig_ax; -1 when not in a syscall */
  __u64 syscall_args[6];       /* di, si, dx, r10, r8, r9 */
  __s32 kstack_frames;         /* frames in kstack, or -errno from bpf_get_task_stack */
  __u32 wchan_pad;             /* explicit padding, always 0 */
  __u64 kstack[HT_MAX_KSTACK]; /* kernel return addresses, innermost first */
  char comm[HT_COMM_LEN];      /* task->comm */
};

#endif /* HANGTRACE_ABI_H */
