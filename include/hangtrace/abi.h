/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The one ABI shared by the BPF programs (bpf/<concern>.bpf.c) and the C++ side.
 * Fixed-width types only, explicit padding, units in the field comments.
 * The C++ side static_asserts the layout (see userspace/collect/task_iter.cpp).
 * Syscall numbers are the architecture's table's (hangtrace/syscall_nr.h).
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

/*
 * Kernel-internal values the task records carry raw (include/linux/sched.h:
 * no uapi header has them, and BTF has no macros), for both sides.
 */
#define HT_TASK_STATE_RUNNING 0x0000u         /* ht_task_record.state: TASK_RUNNING */
#define HT_TASK_STATE_INTERRUPTIBLE 0x0001u   /* TASK_INTERRUPTIBLE */
#define HT_TASK_STATE_UNINTERRUPTIBLE 0x0002u /* TASK_UNINTERRUPTIBLE */
#define HT_PF_EXITING 0x00000004u             /* ht_task_record.task_flags: PF_EXITING */
#define HT_PF_KTHREAD 0x00200000u             /* PF_KTHREAD */

/* ht_task_record.user_machine: ELF e_machine values (<elf.h>, which BPF C
 * cannot include beside vmlinux.h; userspace/collect/task_iter.cpp
 * static_asserts them against it). */
#define HT_EM_X86_64 62
#define HT_EM_AARCH64 183

/* Bits of ht_task_record.sample_flags. */
#define HT_TASK_ON_CPU 0x1u        /* task was running on a CPU when sampled */
#define HT_TASK_HAS_USER_REGS 0x2u /* user_* and syscall_* fields are valid */
#define HT_TASK_KTHREAD 0x4u       /* HT_PF_KTHREAD */
#define HT_TASK_EXITING 0x8u       /* HT_PF_EXITING */

/*
 * One record per task (thread) of a traced process, written by the task
 * iterator (bpf/task_snapshot.bpf.c) with bpf_seq_write().
 */
struct ht_task_record {
  __u32 abi_version;           /* HT_ABI_VERSION */
  __u32 tid;                   /* task->pid (global namespace) */
  __u32 tgid;                  /* task->tgid (global namespace) */
  __u32 ppid;                  /* task->real_parent->tgid */
  __u32 state;                 /* task->__state bits (HT_TASK_STATE_*, ...) */
  __u32 exit_state;            /* task->exit_state (EXIT_ZOMBIE=0x20, ...) */
  __u32 task_flags;            /* task->flags (PF_*: HT_PF_*, ...) */
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
  __s64 syscall_nr;            /* orig_ax: HT_NR_*; -1 when not in a syscall */
  __u64 syscall_args[6];       /* di, si, dx, r10, r8, r9 */
  __s32 kstack_frames;         /* frames in kstack, or -errno from bpf_get_task_stack */
  __u32 wchan_pad;             /* explicit padding, always 0 */
  __u64 kstack[HT_MAX_KSTACK]; /* kernel return addresses, innermost first */
  char comm[HT_COMM_LEN];      /* task->comm */
  /* The full user register set (valid with HT_TASK_HAS_USER_REGS), for
     unwinding the user stack without frame pointers. */
  __u16 user_machine;                /* ELF e_machine of user_regs (HT_EM_*); 0 when absent */
  __u16 user_nregs;                  /* user_regs entries in use */
  __u32 user_regs_pad;               /* explicit padding, always 0 */
  __u64 user_regs[HT_MAX_USER_REGS]; /* DWARF order, see HT_MAX_USER_REGS */
};

/*
 * One record per task of a traced process from the brief pass of the task
 * iterator (ht_task_brief in bpf/task_snapshot.bpf.c): what the daemon's
 * sampled steady state needs each second -- no stacks, no registers but the
 * syscall's.
 */
struct ht_task_brief {
  __u32 abi_version;     /* HT_ABI_VERSION */
  __u32 tid;             /* task->pid (global namespace) */
  __u32 tgid;            /* task->tgid */
  __u32 state;           /* task->__state bits */
  __u32 sample_flags;    /* HT_TASK_* (HT_TASK_HAS_USER_REGS: syscall_* valid) */
  __u32 pad;             /* explicit padding, always 0 */
  __u64 off_cpu_ns;      /* ns since the task last left a CPU; 0 when on CPU */
  __u64 sum_exec_ns;     /* se.sum_exec_runtime, ns on CPU in total */
  __u64 nvcsw;           /* voluntary context switches */
  __s64 syscall_nr;      /* orig_ax: HT_NR_*; -1 when not in a syscall */
  __u64 syscall_args[6]; /* di, si, dx, r10, r8, r9 */
};

/*
 * One record per process of the host (thread-group leader with an address
 * space: no kernel thread, no zombie) from the identity pass of the task
 * iterator (ht_process_identity in bpf/task_snapshot.bpf.c): what the
 * daemon's scan for jobs would otherwise read from every /proc/PID/stat, the
 * same fields from the same task_struct, in one read() for the whole host.
 */
struct ht_process_identity {
  __u32 abi_version;       /* HT_ABI_VERSION */
  __u32 pid;               /* task->tgid (global namespace) */
  __u32 ppid;              /* task->real_parent->tgid: stat field 4 */
  __u32 task_flags;        /* task->flags (PF_*): stat field 9 */
  __u64 start_boottime_ns; /* task->start_boottime: stat field 22 is this in clock ticks */
  __u64 start_stack;       /* mm->start_stack: stat field 28 */
  __u64 arg_start;         /* mm->arg_start: stat field 48 */
  __u64 arg_end;           /* mm->arg_end: stat field 49 */
  char comm[HT_COMM_LEN];  /* task->comm: stat field 2 */
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
  HT_EV_GPU_CALL = 14,       /* struct ht_gpu_call_event: a CUDA driver / NCCL host call that returned */
  HT_EV_GPU_ACTIVITY = 15,   /* struct ht_gpu_activity_event: a CUPTI activity record */
  HT_EV_CPU_SAMPLE = 16,     /* struct ht_cpu_sample_event: a traced task found on a CPU by the sampler */
  HT_EV_SHORT_WAITS = 17,    /* struct ht_short_waits_event: waits under the threshold, summed per thread */
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
  __u32 flags;       /* exit: HT_PROC_WHOLE_PROCESS */
};

/* ht_proc_event.flags of an exit: the whole process ended (its group leader
 * and last thread), not just one thread. */
#define HT_PROC_WHOLE_PROCESS 0x1u

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
 * futex(2) commands (op & HT_FUTEX_CMD_MASK) and op flags: the uapi values of
 * <linux/futex.h>, which BPF C cannot include beside vmlinux.h. The C++ side
 * uses <linux/futex.h> and static_asserts these against it
 * (userspace/core/syscalls.cpp).
 */
enum ht_futex_cmd {
  HT_FUTEX_WAIT = 0,
  HT_FUTEX_WAKE = 1,
  HT_FUTEX_REQUEUE = 3,
  HT_FUTEX_CMP_REQUEUE = 4,
  HT_FUTEX_WAKE_OP = 5,
  HT_FUTEX_LOCK_PI = 6,
  HT_FUTEX_UNLOCK_PI = 7,
  HT_FUTEX_WAIT_BITSET = 9,
  HT_FUTEX_WAKE_BITSET = 10,
  HT_FUTEX_WAIT_REQUEUE_PI = 11,
  HT_FUTEX_CMP_REQUEUE_PI = 12,
  HT_FUTEX_LOCK_PI2 = 13,
};
#define HT_FUTEX_PRIVATE_FLAG 128u
#define HT_FUTEX_CLOCK_REALTIME 256u
#define HT_FUTEX_CMD_MASK (~(HT_FUTEX_PRIVATE_FLAG | HT_FUTEX_CLOCK_REALTIME))

/*
 * ht_futex_event.op for the two syscalls that take no futex(2) op word (bits
 * no futex(2) op uses): futex_waitv is HT_FUTEX_OP_WAITV | flags (uaddr: the
 * first waiter's), futex_wait(2) is HT_FUTEX_OP_WAIT2 | flags (FUTEX2_*).
 * Both take absolute timeouts, as do FUTEX_WAIT_BITSET, LOCK_PI(2) and
 * WAIT_REQUEUE_PI; timeout_ns is then the raw absolute value.
 */
#define HT_FUTEX_OP_WAITV 0x80000000u
#define HT_FUTEX_OP_WAIT2 0x40000000u

/* ht_syscall_event.obj_kind: what the call's fd is, from its inode's file type. */
enum ht_obj_kind {
  HT_OBJ_UNKNOWN = 0, /* no fd, or not resolved */
  HT_OBJ_PIPE = 1,    /* S_IFIFO: a pipe or FIFO */
  HT_OBJ_SOCKET = 2,  /* S_IFSOCK */
  HT_OBJ_FILE = 3,    /* S_IFREG */
  HT_OBJ_ANON = 4,    /* anything else: eventfd, epoll, timerfd, a character device */
};

#define HT_FILE_COMPONENT_LEN 48 /* one dentry name, with its NUL */
#define HT_FILE_NAME_LEN (2 * HT_FILE_COMPONENT_LEN)

struct ht_syscall_event {
  struct ht_event_header hdr;
  __s64 nr; /* syscall number: HT_NR_* (hangtrace/syscall_nr.h) */
  __s64 ret;
  __u64 duration_ns; /* blocked: first sleep -> exit, 0 if it never slept */
  __s32 fd;          /* the fd argument, -1 if none */
  __u32 obj_kind;    /* enum ht_obj_kind */
  __u64 obj_inode;   /* inode of the fd's file, 0 if unknown */
  __u64 args[3];     /* first three raw arguments */
  __s32 kstack_id;   /* as in ht_futex_event */
  __s32 ustack_id;
  /* Regular files (obj_kind HT_OBJ_FILE) only, else 0 / "": the mount the
   * file is on (mnt_id, as /proc/PID/mountinfo's first field) and its name
   * with its parent directory's, "dir/name" (dentry names, each cut at
   * HT_FILE_COMPONENT_LEN - 1 bytes): enough to say which data files a
   * loader reads when they are opened and closed per sample. */
  __u32 mnt_id;
  __u32 file_pad; /* explicit padding, always 0 */
  char file[HT_FILE_NAME_LEN];
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

/* Waits shorter than min_block_ns (bpf/short_waits.bpf.h): not one record
 * each -- a thread can wait thousands of times a second, a few ms at a time,
 * and those waits are still most of its time -- but summed per thread while
 * consecutive waits share a syscall, object and waker, and sent when that
 * changes or the sum reaches short_wait_flush_ns. The waker is the one of the
 * thread's latest wakeup (sched's wake batch), when that fell within the
 * wait; 0 when unknown or the wait ended by its timeout. */
#define HT_SHORT_WAIT_BUCKETS 16 /* bucket i: [2^i, 2^(i+1)) microseconds, as HT_HIST_BUCKETS; the last holds more */

struct ht_short_waits {
  __s64 nr;         /* syscall number (HT_NR_futex for futex waits) */
  __u64 object;     /* the futex word (uaddr), or the fd's inode when resolved (0 if not) */
  __s32 fd;         /* -1 for futex waits */
  __u32 obj_kind;   /* enum ht_obj_kind of the fd (HT_OBJ_UNKNOWN for futex waits) */
  __u32 waker_tgid; /* who woke the thread, 0: unknown or timed out */
  __u32 waker_tid;
  char waker_comm[HT_COMM_LEN];
  __u32 count;      /* waits summed */
  __u8 futex;       /* 1: futex waits, 0: blocking syscalls */
  __u8 timed_out;   /* they ended by their timeout (poll returned 0, futex -ETIMEDOUT, a sleep) */
  __u16 pad;        /* explicit padding, always 0 */
  __u64 sum_ns;     /* their blocked time, as ht_syscall_event.duration_ns */
  __u32 buckets[HT_SHORT_WAIT_BUCKETS];
};

struct ht_short_waits_event {
  struct ht_event_header hdr; /* the waiting thread; ts_ns: when the last of them ended (about) */
  struct ht_short_waits waits;
};

/* The cpu_samples concern (bpf/cpu_samples.bpf.c): a cpu-clock perf event
 * per CPU fired while a traced task was on it. The user stack is copied into
 * the record (frame-pointer walk, innermost first) rather than put in the
 * shared stack map: samples of a Python job are nearly all distinct stacks and
 * would crowd out the blocked intervals' ones. */
#define HT_SAMPLE_USER_FRAMES 64

struct ht_cpu_sample_event {
  struct ht_event_header hdr; /* the task on the CPU */
  __s32 kstack_id;            /* its kernel stack in the shared map (< 0: none, e.g. it was in user mode) */
  __u32 cpu;
  __u32 ustack_len;           /* frames in ustack */
  __u32 pad;                  /* explicit padding, always 0 */
  __u64 ustack[HT_SAMPLE_USER_FRAMES];
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

/* ===== Blocked-time histograms (the daemon's steady state) =====================
 * The syscall dispatcher (bpf/blocked_hist.bpf.h) adds every wait of a traced
 * task that slept to `blocked_hist`, keyed by process, wait kind and whether
 * the waiter is the process's main thread, in log2 buckets: nothing is
 * streamed per wait. Userspace turns tgids into roles (main process, worker). */
#define HT_HIST_BUCKETS 32 /* bucket i: [2^i, 2^(i+1)) microseconds; bucket 0 also holds < 1 us */

enum ht_wait_kind {
  HT_WAIT_FUTEX = 0, /* futex, futex_waitv, futex_wait: locks, conditions, queues */
  HT_WAIT_IO = 1,    /* read/write family on an fd: pipes, files, sockets read as files */
  HT_WAIT_NET = 2,   /* connect, accept, send*, recv* */
  HT_WAIT_POLL = 3,  /* poll, select, epoll_wait */
  HT_WAIT_CHILD = 4, /* wait4, waitid */
  HT_WAIT_SLEEP = 5, /* nanosleep, clock_nanosleep */
  HT_WAIT_KINDS = 6,
};

struct ht_hist_key {
  __u32 tgid;
  __u8 wait_kind;   /* enum ht_wait_kind */
  __u8 main_thread; /* 1: the waiter is the process's main thread (tid == tgid) */
  __u16 pad;
};

struct ht_hist_value {
  __u64 count[HT_HIST_BUCKETS];
  __u64 sum_ns; /* total blocked time */
};

/* ===== GPU ====================================================================
 * Host-side CUDA driver and NCCL calls come from uprobes on libcuda and libnccl
 * (bpf/gpu.bpf.c), attached to the libraries found in the traced processes'
 * mappings. GPU activity (kernels, copies, synchronization, API calls) comes
 * from CUPTI through hangtrace's injection library (userspace/cupti/), which
 * fires the USDT probe hangtrace:gpu_activity with a struct ht_gpu_activity;
 * bpf/cupti.bpf.c copies it into the ring buffer.
 */

/* Which host call (the uprobe's cookie carries it, see HT_GPU_COOKIE). */
enum ht_gpu_fn {
  HT_GPU_FN_NONE = 0,
  /* kernel launches */
  HT_GPU_LAUNCH_KERNEL = 1,      /* cuLaunchKernel(_ptsz) */
  HT_GPU_LAUNCH_KERNEL_EX = 2,   /* cuLaunchKernelEx(_ptsz) */
  HT_GPU_LAUNCH_COOPERATIVE = 3, /* cuLaunchCooperativeKernel(_ptsz) */
  /* the host waits for the device */
  HT_GPU_CTX_SYNCHRONIZE = 10,    /* cuCtxSynchronize (cudaDeviceSynchronize) */
  HT_GPU_STREAM_SYNCHRONIZE = 11, /* cuStreamSynchronize(_ptsz) */
  HT_GPU_EVENT_SYNCHRONIZE = 12,  /* cuEventSynchronize */
  HT_GPU_STREAM_WAIT_EVENT = 13,  /* cuStreamWaitEvent(_ptsz): orders two streams, the host does not wait */
  /* copies and fills (the synchronous ones wait for the device too) */
  HT_GPU_MEMCPY = 20,       /* cuMemcpy, cuMemcpyHtoD/DtoH/DtoD/Peer (_v2) */
  HT_GPU_MEMCPY_ASYNC = 21, /* cuMemcpyAsync, cuMemcpy*Async (_v2, _ptsz) */
  HT_GPU_MEMSET = 22,       /* cuMemsetD8/D16/D32 (_v2) */
  HT_GPU_MEMSET_ASYNC = 23, /* cuMemsetD8/D16/D32Async (_ptsz) */
  /* NCCL */
  HT_GPU_NCCL_ALL_REDUCE = 40,
  HT_GPU_NCCL_BROADCAST = 41, /* ncclBroadcast and ncclBcast */
  HT_GPU_NCCL_REDUCE = 42,
  HT_GPU_NCCL_ALL_GATHER = 43,
  HT_GPU_NCCL_REDUCE_SCATTER = 44,
  HT_GPU_NCCL_SEND = 45,
  HT_GPU_NCCL_RECV = 46,
  HT_GPU_NCCL_GROUP_START = 47,
  HT_GPU_NCCL_GROUP_END = 48,
};

/*
 * The uprobe's cookie: one entry program and one return program serve every
 * function, so the cookie says which function it is and where its arguments
 * are. Argument positions are 1-based (0: the function has none); arguments
 * past the sixth are read from the stack. count_shift turns the count
 * argument into bytes (memset D32: 2) or is 0.
 *   bits  0..15 fn (enum ht_gpu_fn)
 *   bits 16..19 stream argument   bits 20..23 count argument
 *   bits 24..27 count shift       bits 28..31 handle argument (comm / event / ...)
 *   bits 32..35 datatype argument bits 36..39 peer / root argument
 *   bit  40     the stream is a field of the first argument (cuLaunchKernelEx's CUlaunchConfig)
 */
#define HT_GPU_COOKIE(fn, stream_arg, count_arg, count_shift, handle_arg, datatype_arg, peer_arg)          \
  ((__u64)(fn) | ((__u64)(stream_arg) << 16) | ((__u64)(count_arg) << 20) | ((__u64)(count_shift) << 24) | \
   ((__u64)(handle_arg) << 28) | ((__u64)(datatype_arg) << 32) | ((__u64)(peer_arg) << 36))
#define HT_GPU_COOKIE_STREAM_IN_CONFIG (1ull << 40)
#define HT_GPU_COOKIE_FN(c) ((__u32)((c)&0xffff))
#define HT_GPU_COOKIE_ARG(c, shift) ((__u32)(((c) >> (shift)) & 0xf))
/* Offset of hStream in CUlaunchConfig (7 unsigned ints, then the pointer). */
#define HT_CU_LAUNCH_CONFIG_STREAM_OFFSET 32

struct ht_gpu_call_event {
  struct ht_event_header hdr; /* the calling thread; ts_ns: when the call returned */
  __u32 fn;                   /* enum ht_gpu_fn */
  __s32 ret;                  /* CUresult / ncclResult_t */
  __u64 start_ns;             /* bpf_ktime_get_ns() at entry */
  __u64 stream;               /* the CUstream / cudaStream_t argument; 0: the default stream or none */
  __u64 handle;               /* NCCL: the ncclComm_t; cuEventSynchronize / cuStreamWaitEvent: the CUevent */
  __u64 count;                /* memcpy / memset: bytes; NCCL: elements; else 0 */
  __u64 seq;                  /* NCCL: this thread's NCCL call number (1 = its first); else 0 */
  __s32 datatype;             /* NCCL ncclDataType_t, -1 otherwise */
  __s32 peer;                 /* NCCL send/recv peer, broadcast/reduce root; -1 otherwise */
  __s32 ustack_id;            /* user stack at entry (stack map id, as in ht_futex_event) */
  __u32 pad;                  /* explicit padding, always 0 */
};

/* bpf/gpu.bpf.c `gpu_threads` (hash, key: tid): each traced thread's CUDA and
 * NCCL state, read by userspace when the window closes -- a call that never
 * returns shows here and nowhere else. Times are bpf_ktime_get_ns(). */
struct ht_gpu_thread {
  __u32 tgid;
  __u32 in_fn;                    /* enum ht_gpu_fn of the call in progress; 0: none */
  __u64 in_since_ns;              /* its entry */
  __u64 in_stream;                /* its stream argument */
  __u64 in_handle;                /* its handle argument (NCCL comm, CUevent) */
  __u64 launches;                 /* kernel launches entered */
  __u64 last_launch_ns;           /* the latest one's entry */
  __u64 syncs;                    /* host waits (ctx / stream / event synchronize, sync memcpy) entered */
  __u64 last_sync_end_ns;         /* the latest one's return; 0: none returned */
  __u64 collectives;              /* NCCL collectives and send/recv entered (= the latest one's seq) */
  __u64 last_collective_ns;       /* the latest one's entry */
  __u64 last_collective_count;    /* its element count */
  __u64 last_collective_comm;     /* its communicator */
  __u32 last_collective_fn;       /* enum ht_gpu_fn */
  __s32 last_collective_datatype; /* ncclDataType_t */
  __u32 nccl_group_depth;         /* open ncclGroupStart()s */
  /* Calls nest (NCCL launches kernels, ncclBcast calls ncclBroadcast): in_*
   * describe the outermost, the one the thread is "in"; the record of a call
   * is sent when it returns, from these. */
  __u32 call_depth;   /* calls in progress, nested ones included */
  __u64 in_count;     /* its count argument: bytes for copies and fills, elements for NCCL */
  __s32 in_datatype;  /* its ncclDataType_t; -1: none */
  __s32 in_peer;      /* its NCCL peer / root; -1: none */
  __s32 in_ustack_id; /* user stack at its entry (host waits and NCCL calls only); -1: none */
  __u32 pad;          /* explicit padding, always 0 */
  char comm[HT_COMM_LEN];
  /* The outermost call's stack pointer and return address at entry (the
   * address only for host waits and NCCL calls, 0 for launches): a call
   * entered from a shallower frame, or from the same frame and call site, is
   * not nested in it (that call returned unseen); one entered at the same
   * stack pointer with another return address is a tail call inside it. */
  __u64 in_sp;
  __u64 in_ret;
};

/* ht_gpu_activity.kind */
enum ht_gpu_activity_kind {
  HT_GPU_ACT_KERNEL = 1,
  HT_GPU_ACT_MEMCPY = 2,
  HT_GPU_ACT_MEMSET = 3,
  HT_GPU_ACT_SYNC = 4,        /* CUPTI synchronization record: the host waited (ctx / stream / event) */
  HT_GPU_ACT_DRIVER_API = 5,  /* a driver API call (name: "cuLaunchKernel") */
  HT_GPU_ACT_RUNTIME_API = 6, /* a runtime API call (name: "cudaLaunchKernel") */
  HT_GPU_ACT_CLOCK = 7,       /* a calibration point: start_ns = CLOCK_MONOTONIC, end_ns = CUPTI's clock,
                                 bytes = the reading's uncertainty in ns */
  HT_GPU_ACT_STATUS = 8,      /* the library's own news (name: "CUPTI activity enabled", or why not) */
};

#define HT_GPU_ACTIVITY_VERSION 1
#define HT_GPU_NAME_LEN 96

/* What the injection library passes to the USDT probe hangtrace:gpu_activity
 * (its one argument: this struct's address in the library's process). */
struct ht_gpu_activity {
  __u16 version;        /* HT_GPU_ACTIVITY_VERSION */
  __u16 kind;           /* enum ht_gpu_activity_kind */
  __u32 size;           /* sizeof(struct ht_gpu_activity) */
  __u64 start_ns;       /* CLOCK_MONOTONIC (converted from CUPTI's clock by the library) */
  __u64 end_ns;         /* same clock; 0 when the record has no end */
  __u32 correlation_id; /* links an API call to the kernel / copy it launched (0: none) */
  __u32 device_id;      /* CUDA device ordinal */
  __u32 context_id;     /* CUPTI context id */
  __u32 stream_id;      /* CUPTI stream id */
  __u32 pid;            /* API records: the calling process (CUPTI processId) */
  __u32 tid;            /* API records: the calling thread (CUPTI threadId, as gettid()); else 0 */
  __u32 detail;         /* API: CUPTI callback id; memcpy: CUpti_ActivityMemcpyKind;
                           sync: CUpti_ActivitySynchronizationType; kernel: registers per thread */
  __u32 pad;            /* explicit padding, always 0 */
  __u64 bytes;          /* memcpy / memset bytes */
  __u32 grid[3];        /* kernel grid and block dimensions */
  __u32 block[3];
  char name[HT_GPU_NAME_LEN]; /* kernel (mangled, truncated) or API function name; status text */
};

struct ht_gpu_activity_event {
  struct ht_event_header hdr; /* the process (and thread) that fired the probe */
  struct ht_gpu_activity act;
};

#endif /* HANGTRACE_ABI_H */
