// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * futex waits and wakes of the traced tasks: futex(2) wait-type ops (WAIT,
 * WAIT_BITSET, LOCK_PI, LOCK_PI2, WAIT_REQUEUE_PI), futex_waitv(2) and
 * futex_wait(2) become HT_EV_FUTEX_WAIT when they last at least min_block_ns;
 * wake-type ops that woke someone become HT_EV_FUTEX_WAKE.
 *
 * Hooks: raw_tp/sys_enter + raw_tp/sys_exit (raw_syscalls), not the
 * per-syscall tp/syscalls/sys_{enter,exit}_futex tracepoints. Enabling either
 * kind sets TIF_SYSCALL_TRACEPOINT on every task, so every syscall on the
 * machine passes through the tracepoint either way; the per-syscall ones would
 * spare us only a compare of the syscall number, which is the first thing
 * these programs do. In exchange one attachment pair covers futex, futex_waitv
 * and futex_wait, works since 4.17, and needs neither tracefs nor one perf
 * event per syscall. (tp_btf would only replace the probe reads of pt_regs by
 * direct loads.)
 *
 * The kernel stack of a wait is taken at the first voluntary context switch
 * inside the call (raw_tp/sched_switch), where it shows what the task sleeps
 * in (at sys_enter it would only show the syscall entry path); calls that
 * never sleep pay for no walk. The user stack is taken at sys_exit, only for
 * calls reported: the user registers then are still those of the call.
 */
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "live_maps.bpf.h"
#include "task_snapshot.bpf.h"

/* x86_64 syscall numbers (the ABI's numbering, see abi.h). */
#define NR_futex 202
#define NR_futex_waitv 449
#define NR_futex_wait 455

#define FUTEX_WAIT 0
#define FUTEX_WAKE 1
#define FUTEX_REQUEUE 3
#define FUTEX_CMP_REQUEUE 4
#define FUTEX_WAKE_OP 5
#define FUTEX_LOCK_PI 6
#define FUTEX_UNLOCK_PI 7
#define FUTEX_WAIT_BITSET 9
#define FUTEX_WAKE_BITSET 10
#define FUTEX_WAIT_REQUEUE_PI 11
#define FUTEX_CMP_REQUEUE_PI 12
#define FUTEX_LOCK_PI2 13
#define FUTEX_CMD_MASK 127 /* ~(FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME) */

#define ENOENT 2
#define NSEC_PER_SEC 1000000000ull

/* Waits shorter than this are not streamed (set from LiveOptions). */
const volatile __u64 min_block_ns = 5000000;

/* Kernel stack walks (~1 us each) are throttled per thread: a thread that
 * sleeps again on the same futex within this long reuses the last walk's
 * stack id instead (the kernel path of a wait on one word does not change).
 * Keeps a hot ping-pong from paying a walk per round trip. */
const volatile __u64 kstack_interval_ns = 10000000;

/* Per thread: the wait in progress, and the last kernel stack walk. */
struct futex_task {
  __u64 ts_ns; /* 0: no wait in progress */
  __u64 uaddr;
  __u64 timeout_ns;
  __u32 op;
  __s32 kstack_id; /* -ENOENT until the task sleeps */
  __u64 walk_ns;   /* the last walk: when, on which word, its id */
  __u64 walk_uaddr;
  __s32 walk_kstack_id;
  __u32 pad;
};

/* Task-local storage rather than a hash keyed by tid: no hashing on the hot
 * paths, a NULL check for tasks never traced, and it is freed with the task,
 * so nothing leaks when a thread dies mid-wait. */
struct {
  __uint(type, BPF_MAP_TYPE_TASK_STORAGE);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, int);
  __type(value, struct futex_task);
} futex_tasks SEC(".maps");

static __always_inline bool is_wait_cmd(__u32 cmd) {
  return cmd == FUTEX_WAIT || cmd == FUTEX_WAIT_BITSET || cmd == FUTEX_LOCK_PI || cmd == FUTEX_LOCK_PI2 ||
         cmd == FUTEX_WAIT_REQUEUE_PI;
}

static __always_inline bool is_wake_cmd(__u32 cmd) {
  return cmd == FUTEX_WAKE || cmd == FUTEX_WAKE_BITSET || cmd == FUTEX_WAKE_OP || cmd == FUTEX_REQUEUE ||
         cmd == FUTEX_CMP_REQUEUE || cmd == FUTEX_CMP_REQUEUE_PI || cmd == FUTEX_UNLOCK_PI;
}

/* The timespec as given (relative for FUTEX_WAIT, absolute for the others);
 * 0 when there is none or it cannot be read. */
static __always_inline __u64 read_timeout(__u64 uptr) {
  struct __kernel_timespec ts;
  if (!uptr || bpf_probe_read_user(&ts, sizeof(ts), (void*)uptr) != 0) return 0;
  if (ts.tv_sec < 0 || ts.tv_nsec < 0) return 0;
  return (__u64)ts.tv_sec * NSEC_PER_SEC + (__u64)ts.tv_nsec;
}

SEC("raw_tp/sys_enter")
int futex_sys_enter(struct bpf_raw_tracepoint_args* ctx) {
  long nr = (long)ctx->args[1];
  if (nr != NR_futex && nr != NR_futex_waitv && nr != NR_futex_wait) return 0;
  if (!ht_current_traced()) return 0;

  struct pt_regs* regs = (struct pt_regs*)ctx->args[0];
  __u64 uaddr, timeout_ns;
  __u32 op;
  if (nr == NR_futex) {
    /* futex(uaddr, op, val, timeout, uaddr2, val3) */
    op = (__u32)PT_REGS_PARM2_CORE(regs);
    /* Wakes need nothing from entry: sys_exit reads the (unchanged) argument registers. */
    if (!is_wait_cmd(op & FUTEX_CMD_MASK)) return 0;
    uaddr = HT_SYSCALL_ARG1_CORE(regs);
    timeout_ns = read_timeout(HT_SYSCALL_ARG4_CORE(regs));
  } else if (nr == NR_futex_waitv) {
    /* futex_waitv(waiters, nr_futexes, flags, timeout, clockid) */
    __u64 waiters = HT_SYSCALL_ARG1_CORE(regs);
    struct futex_waitv first = {};
    if (waiters) bpf_probe_read_user(&first, sizeof(first), (void*)waiters);
    uaddr = first.uaddr;
    op = HT_FUTEX_OP_WAITV | (__u32)PT_REGS_PARM3_CORE(regs);
    timeout_ns = read_timeout(HT_SYSCALL_ARG4_CORE(regs));
  } else {
    /* futex_wait(uaddr, val, mask, flags, timeout, clockid) */
    uaddr = HT_SYSCALL_ARG1_CORE(regs);
    op = HT_FUTEX_OP_WAIT2 | (__u32)HT_SYSCALL_ARG4_CORE(regs);
    timeout_ns = read_timeout(HT_SYSCALL_ARG5_CORE(regs));
  }
  struct futex_task* s =
      bpf_task_storage_get(&futex_tasks, bpf_get_current_task_btf(), 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
  if (!s) return 0;
  s->uaddr = uaddr;
  s->op = op;
  s->timeout_ns = timeout_ns;
  s->kstack_id = -ENOENT;
  s->ts_ns = bpf_ktime_get_ns();
  return 0;
}

/* The first time a waiting thread goes to sleep, remember where: current is
 * the task switching out. Preemptions are skipped: they do not wait. */
SEC("raw_tp/sched_switch")
int futex_sched_switch(struct bpf_raw_tracepoint_args* ctx) {
  if (ctx->args[0]) /* preempt */
    return 0;
  struct futex_task* s = bpf_task_storage_get(&futex_tasks, bpf_get_current_task_btf(), 0, 0);
  if (!s || !s->ts_ns || s->kstack_id != -ENOENT) return 0;
  __u64 now = bpf_ktime_get_ns();
  if (s->walk_kstack_id >= 0 && s->walk_uaddr == s->uaddr && now - s->walk_ns < kstack_interval_ns) {
    s->kstack_id = s->walk_kstack_id;
    return 0;
  }
  s->kstack_id = bpf_get_stackid(ctx, &stacks, 0);
  s->walk_ns = now;
  s->walk_uaddr = s->uaddr;
  s->walk_kstack_id = s->kstack_id;
  return 0;
}

static __always_inline void emit_wake(struct pt_regs* regs, __u32 op, long ret) {
  if (op & (HT_FUTEX_OP_WAITV | HT_FUTEX_OP_WAIT2)) return;
  __u32 cmd = op & FUTEX_CMD_MASK;
  if (!is_wake_cmd(cmd)) return;
  if (cmd == FUTEX_UNLOCK_PI) {
    /* Returns 0, not a count. User space only enters the kernel to unlock
     * when FUTEX_WAITERS is set, so a success handed the lock to a waiter. */
    if (ret != 0) return;
    ret = 1;
  } else if (ret < 1) {
    return;
  }
  if (!ht_current_traced()) return;
  struct ht_futex_event* e = ht_reserve(HT_EV_FUTEX_WAKE, sizeof(*e));
  if (!e) return;
  e->uaddr = HT_SYSCALL_ARG1_CORE(regs);
  e->op = op;
  e->ret = (__s32)ret;
  e->duration_ns = 0;
  e->timeout_ns = 0;
  /* No stacks for wakes: they are frequent and never sleep. */
  e->kstack_id = -ENOENT;
  e->ustack_id = -ENOENT;
  ht_submit(e);
}

SEC("raw_tp/sys_exit")
int futex_sys_exit(struct bpf_raw_tracepoint_args* ctx) {
  struct pt_regs* regs = (struct pt_regs*)ctx->args[0];
  __s64 nr = -1;
  HT_SYSCALL_NR_CORE_INTO(&nr, regs);
  if (nr != NR_futex && nr != NR_futex_waitv && nr != NR_futex_wait) return 0;
  long ret = (long)ctx->args[1];

  struct futex_task* s = bpf_task_storage_get(&futex_tasks, bpf_get_current_task_btf(), 0, 0);
  if (!s || !s->ts_ns) {
    if (nr == NR_futex) emit_wake(regs, (__u32)PT_REGS_PARM2_CORE(regs), ret);
    return 0;
  }
  struct futex_task w = *s;
  s->ts_ns = 0;

  __u64 duration = bpf_ktime_get_ns() - w.ts_ns;
  if (duration < min_block_ns) return 0;
  struct ht_futex_event* e = ht_reserve(HT_EV_FUTEX_WAIT, sizeof(*e));
  if (!e) return 0;
  e->uaddr = w.uaddr;
  e->op = w.op;
  e->ret = (__s32)ret;
  e->duration_ns = duration;
  e->timeout_ns = w.timeout_ns;
  e->kstack_id = w.kstack_id;
  /* The user registers at exit are those at entry (the call returns where
   * it was made), so the user stack is walked only for calls reported. */
  e->ustack_id = bpf_get_stackid(ctx, &stacks, BPF_F_USER_STACK);
  ht_submit(e);
  return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
