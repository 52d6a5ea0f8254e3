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

#define HT_ABI_VERSION 2

/* Frames kept per kernel stack; deep enough for futex/pipe/socket waits. */
#define HT_MAX_KSTACK 32
#define HT_COMM_LEN 16
/*
 * Saved user registers kept per task, in DWARF register numbering so the
 * unwinder takes them as they are: x86_64 uses 0..16 (rax rdx rcx rbx rsi rdi
 * rbp rsp r8..r15 rip), arm64 0..32 (x0..x30, sp, pc).
 */
#define HT_MAX_USER_REGS 33
#define HT_USER_REGS_X86_64 17
#define HT_USER_REGS_ARM64 33

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
  /* The full user register set (valid with HT_TASK_HAS_USER_REGS), for
     unwinding the user stack without frame pointers. */
  __u16 user_machine;                /* ELF e_machine of user_regs (EM_X86_64 = 62,
                                        EM_AARCH64 = 183); 0 when absent */
  __u16 user_nregs;                  /* user_regs entries in use */
  __u32 user_regs_pad;               /* explicit padding, always 0 */
  __u64 user_regs[HT_MAX_USER_REGS]; /* DWARF order, see HT_MAX_USER_REGS */
};

/* ===== Live tracing: records streamed through the BPF ring buffer ===========
 * Every record starts with struct ht_event_header; `size` is the whole
 * record's size so readers can skip types they do not know. Times are
 * bpf_ktime_get_ns() (CLOCK_MONOTONIC, ns).
 */
enum ht_event_type {
  HT_EV_PROC_FORK = 1,       /* struct ht_proc_event: a traced process forked */
  HT_EV_PROC_EXEC = 2,       /* struct ht_proc_event */
  HT_EV_PROC_EXIT = 3,       /* struct ht_proc_event: a traced process (leader) exited */
  HT_EV_SIGNAL = 4,          /* struct ht_signal_event: fatal/notable signal to a traced task */
  HT_EV_OOM_VICTIM = 5,      /* struct ht_oom_event: oom:mark_victim on a traced task */
  HT_EV_FUTEX_WAIT = 6,      /* struct ht_futex_event: a futex wait that ended (>= threshold) */
  HT_EV_FUTEX_WAKE = 7,      /* struct ht_futex_event: a wake that woke >= 1 waiter */
  HT_EV_SYSCALL_BLOCK = 8,   /* struct ht_syscall_event: a blocking syscall longer than threshold */
  HT_EV_SHM = 9,             /* struct ht_shm_event: /dev/shm (tmpfs) create/truncate/.../ENOSPC */
  HT_EV_TCP_STATE = 10,      /* struct ht_tcp_event */
  HT_EV_TCP_RETRANSMIT = 11, /* struct ht_tcp_event */
  HT_EV_RSS = 12,            /* struct ht_rss_event: RSS moved by >= rss_step_bytes */
  HT_EV_WAKEUP = 13,         /* struct ht_wakeup_event: waker -> wakee of a traced task (sampled) */
};

/* Indexes into the per-CPU `counters` map. */
enum ht_counter {
  HT_CNT_EVENTS = 0,       /* records submitted */
  HT_CNT_DROPPED = 1,      /* bpf_ringbuf_reserve failed: ring buffer full */
  HT_CNT_TRACED_ADDED = 2, /* tgids added to traced_tgids by fork following */
  HT_CNT_STACKS_LOST = 3,  /* bpf_get_stackid found the stack's bucket taken by another stack (-EEXIST):
                              that record carries no id for it */
  HT_CNT_MAX = 8,
};

struct ht_event_header {
  __u32 type;  /* enum ht_event_type */
  __u32 size;  /* bytes of the whole record */
  __u64 ts_ns; /* bpf_ktime_get_ns() */
  __u32 tgid;  /* the task the event is about */
  __u32 tid;
  char comm[HT_COMM_LEN];
};

struct ht_proc_event {
  struct ht_event_header hdr;
  __u32 parent_tgid; /* fork: the parent; exit: real_parent */
  __u32 child_tgid;  /* fork: the new process (0 for a new thread) */
  __s32 exit_code;   /* exit: task->exit_code (status << 8 | signal) */
  __u32 flags;       /* exit: 1 = whole process (group leader and last thread) */
};

struct ht_signal_event {
  struct ht_event_header hdr; /* the receiver */
  __u32 sig;
  __s32 code;        /* si_code (SI_USER=0, SI_KERNEL=0x80, BUS_ADRERR=2, ...) */
  __s32 result;      /* signal_generate's result (0 delivered, 1 ignored, ...) */
  __u32 sender_tgid; /* the task generating it (current) */
  __u32 sender_tid;
  __u32 pad;
  char sender_comm[HT_COMM_LEN];
};

struct ht_oom_event {
  struct ht_event_header hdr; /* the victim */
  __u64 total_vm_kb;
  __u64 anon_rss_kb;
  __u64 file_rss_kb;
  __u64 shmem_rss_kb;
  __u32 uid;
  __s32 oom_score_adj;
  __u64 memcg_id; /* the victim's memory cgroup (kernfs id = the cgroup directory's inode), 0 if none */
  __u64 memcg_limit_pages; /* that cgroup's memory limit (page_counter max), in pages; 0 if unknown */
};

struct ht_futex_event {
  struct ht_event_header hdr;
  __u64 uaddr;
  __u32 op;          /* futex op word as passed */
  __s32 ret;         /* syscall return: 0, -ETIMEDOUT, -EAGAIN, or #woken for wakes */
  __u64 duration_ns; /* wait: first sleep -> exit, 0 if it never slept; wake: 0 */
  __u64 timeout_ns;  /* 0 when none / unknown */
  __s32 kstack_id;   /* stack map ids: kernel when the task first slept in the call
                        (-ENOENT: it never slept), user of the call; -errno if none */
  __s32 ustack_id;
};

/*
 * ht_futex_event.op for the two syscalls that take no futex(2) op word (bits
 * no futex(2) op uses): futex_waitv is HT_FUTEX_OP_WAITV | flags (uaddr: the
 * first waiter's), futex_wait(2) is HT_FUTEX_OP_WAIT2 | flags (FUTEX2_*).
 * Both take absolute timeouts, as do FUTEX_WAIT_BITSET, LOCK_PI(2) and
 * WAIT_REQUEUE_PI; timeout_ns is then the raw absolute value.
 */
#define HT_FUTEX_OP_WAITV 0x80000000u
#define HT_FUTEX_OP_WAIT2 0x40000000u

struct ht_syscall_event {
  struct ht_event_header hdr;
  __s64 nr; /* x86_64 syscall number */
  __s64 ret;
  __u64 duration_ns; /* blocked: first sleep -> exit, 0 if it never slept */
  __s32 fd;          /* the fd argument, -1 if none */
  __u32 obj_kind;    /* 0 unknown, 1 pipe, 2 socket, 3 file, 4 anon */
  __u64 obj_inode;   /* inode of the fd's file, 0 if unknown */
  __u64 args[3];     /* first three raw arguments */
  __s32 kstack_id;   /* as in ht_futex_event */
  __s32 ustack_id;
};

/* ht_shm_event.op */
enum ht_shm_op {
  HT_SHM_CREATE = 1,
  HT_SHM_TRUNCATE = 2,
  HT_SHM_FALLOCATE = 3,
  HT_SHM_MMAP = 4,
  HT_SHM_UNLINK = 5,
  HT_SHM_ENOSPC = 6,
  HT_SHM_FAULT = 7,
  HT_SHM_SIGBUS = 8,
};

struct ht_shm_event {
  struct ht_event_header hdr; /* SIGBUS: the receiver */
  __u32 op;                   /* enum ht_shm_op */
  __s32 ret;                  /* syscall result (create: the fd; mmap: 0 or -errno); FAULT: the x86
                                 page-fault error code; SIGBUS: si_code (BUS_ADRERR=2) */
  __u64 inode;                /* 0 for path-only events (unlink, failed create) */
  __u64 size;                 /* truncate length, fallocate offset+len, mmap length, create: i_size,
                                 ENOSPC: what was asked for (write: count); FAULT/SIGBUS: file offset */
  __u64 addr;                 /* fault address / mmap address / SIGBUS si_addr */
  char name[64];              /* file name (dentry; unlink/path events: the path after /dev/shm/) */
  __u64 fs_size;              /* the tmpfs's size limit in bytes, 0 when unlimited or unknown */
  __u64 fs_used;              /* bytes in use on that tmpfs at the event (approximate: percpu counter) */
};

struct ht_tcp_event {
  struct ht_event_header hdr;
  __u16 family; /* AF_INET / AF_INET6 */
  __u16 sport;  /* host order */
  __u16 dport;
  __u16 pad;
  __u8 saddr[16];
  __u8 daddr[16];
  __s32 oldstate; /* TCP_* */
  __s32 newstate;
  __u64 sock_cookie; /* bpf_get_socket_cookie when available, else 0 */
};

struct ht_rss_event {
  struct ht_event_header hdr;
  __u64 rss_bytes; /* anon + file + shmem pages of the mm, bytes */
  __u64 anon_bytes;
};

struct ht_wakeup_event {
  struct ht_event_header hdr; /* the wakee */
  __u32 waker_tgid;
  __u32 waker_tid;
  char waker_comm[HT_COMM_LEN];
  /* The waker's stacks at the wakeup (stack ids as in ht_futex_event; the
   * user one is meaningless when the waker is interrupt context, which the
   * kernel stack then shows). */
  __s32 waker_kstack_id;
  __s32 waker_ustack_id;
};

/* The sched concern's in-kernel `wakeups` map (bpf/sched.bpf.c): how often
 * waker woke a traced wakee (sched_waking). Wakeups are added in batches per
 * wakee; read_wakeup_counts() flushes the open ones first. */
struct ht_wakeup_key {
  __u32 waker_tgid;
  __u32 waker_tid;
  __u32 wakee_tid;
};

struct ht_wakeup_count {
  __u64 count;
  __u64 last_ts_ns;   /* bpf_ktime_get_ns() of the latest wakeup (to within a tick: added in batches) */
  __u64 last_emit_ns; /* the latest HT_EV_WAKEUP sent for this pair (rate limit) */
  __u32 wakee_tgid;
  __u32 pad;
  char waker_comm[HT_COMM_LEN];
};

#endif /* HANGTRACE_ABI_H */
