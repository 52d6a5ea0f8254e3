/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The futex concern, run by the syscall dispatcher (bpf/syscalls.bpf.c):
 * futex(2) wait-type ops (WAIT, WAIT_BITSET, LOCK_PI, LOCK_PI2,
 * WAIT_REQUEUE_PI), futex_waitv(2) and futex_wait(2) become HT_EV_FUTEX_WAIT
 * when they last at least min_block_ns; wake-type ops that woke someone
 * become HT_EV_FUTEX_WAKE, sampled (at most one per thread and futex word
 * per wake_emit_ns: who woke whom, counted exactly, comes from the sched
 * concern's in-kernel wakeup map; these records say which word a waker
 * works on).
 */
#ifndef HANGTRACE_FUTEX_BPF_H
#define HANGTRACE_FUTEX_BPF_H

#include "call_state.bpf.h"
#include "hangtrace/syscall_dispatch.h"
#include "uapi.bpf.h"

#define NSEC_PER_SEC 1000000000ull

const volatile bool trace_futex = true;
const volatile __u64 wake_emit_ns = 10000000;

/* The timespec as given (relative for FUTEX_WAIT, absolute for the others);
 * 0 when there is none or it cannot be read. */
static __always_inline __u64 futex_read_timeout(__u64 uptr) {
  struct __kernel_timespec ts;
  if (!uptr || bpf_probe_read_user(&ts, sizeof(ts), (void*)uptr) != 0) return 0;
  if (ts.tv_sec < 0 || ts.tv_nsec < 0) return 0;
  return (__u64)ts.tv_sec * NSEC_PER_SEC + (__u64)ts.tv_nsec;
}

/* Whether a futex/futex_waitv/futex_wait call with these registers waits
 * (futex(2) ops that wake do not). */
static __always_inline bool futex_call_waits(struct pt_regs* regs, __s64 nr, bool btf) {
  return nr != HT_NR_futex || ht_futex_cmd_waits((__u32)HT_SC_ARG2(regs, btf) & HT_FUTEX_CMD_MASK);
}

/* Starts tracking the wait of a futex/futex_waitv/futex_wait call from its
 * argument registers (at sys_enter, or at its first sleep: the saved
 * registers hold the arguments for the whole call). Wakes need nothing from
 * here: sys_exit reads the (unchanged) argument registers. */
static __always_inline void futex_begin(struct call_state* s, struct pt_regs* regs, __s64 nr, bool btf) {
  __u64 uaddr, timeout_uptr;
  __u32 op;
  if (nr == HT_NR_futex) {
    /* futex(uaddr, op, val, timeout, uaddr2, val3) */
    op = (__u32)HT_SC_ARG2(regs, btf);
    uaddr = HT_SC_ARG1(regs, btf);
    timeout_uptr = HT_SC_ARG4(regs, btf);
  } else if (nr == HT_NR_futex_waitv) {
    /* futex_waitv(waiters, nr_futexes, flags, timeout, clockid) */
    __u64 waiters = HT_SC_ARG1(regs, btf);
    struct futex_waitv first = {};
    if (waiters) bpf_probe_read_user(&first, sizeof(first), (void*)waiters);
    uaddr = first.uaddr;
    op = HT_FUTEX_OP_WAITV | (__u32)HT_SC_ARG3(regs, btf);
    timeout_uptr = HT_SC_ARG4(regs, btf);
  } else {
    /* futex_wait(uaddr, val, mask, flags, timeout, clockid) */
    uaddr = HT_SC_ARG1(regs, btf);
    op = HT_FUTEX_OP_WAIT2 | (__u32)HT_SC_ARG4(regs, btf);
    timeout_uptr = HT_SC_ARG5(regs, btf);
  }
  s->kind = CALL_FUTEX_WAIT;
  s->nr = nr;
  s->obj = uaddr;
  s->op = op;
  s->timeout_ns = futex_read_timeout(timeout_uptr);
  s->slept = 0;
  s->resolved = 1;
  s->kstack_id = -ENOENT;
  s->ts_ns = 0;
  call_mark_begun(s);
}

/* sys_enter of futex/futex_waitv/futex_wait (every call tracked from entry). */
static __always_inline void futex_enter(struct pt_regs* regs, __s64 nr, bool btf) {
  if (!futex_call_waits(regs, nr, btf)) return;
  struct call_state* s = traced_call_state(bpf_get_current_task_btf());
  if (s) futex_begin(s, regs, nr, btf);
}

/* A wait that lasted long enough (its state already cleared by the caller). */
static __always_inline void futex_emit_wait(void* ctx, struct call_state* s, long ret, __u64 duration,
                                            __u64 now) {
  struct ht_futex_event* e = ht_reserve_at(HT_EV_FUTEX_WAIT, sizeof(*e), now);
  if (!e) return;
  e->uaddr = s->obj;
  e->op = s->op;
  e->ret = (__s32)ret;
  e->duration_ns = duration;
  e->timeout_ns = s->timeout_ns;
  e->kstack_id = s->kstack_id;
  e->ustack_id = take_user_stack(ctx, s, now);
  ht_submit(e);
}

/* sys_exit of futex(2) with no wait tracked: a wake that woke someone. */
static __always_inline void futex_exit_wake(struct task_struct* t, struct pt_regs* regs, long ret, bool btf) {
  if (!ht_stream_wakes) return;
  __u32 op = (__u32)HT_SC_ARG2(regs, btf);
  __u32 cmd = op & HT_FUTEX_CMD_MASK;
  if (!ht_futex_cmd_wakes(cmd)) return;
  if (cmd == HT_FUTEX_UNLOCK_PI) {
    /* Returns 0, not a count. User space only enters the kernel to unlock
     * when FUTEX_WAITERS is set, so a success handed the lock to a waiter. */
    if (ret != 0) return;
    ret = 1;
  } else if (ret < 1) {
    return;
  }
  struct call_state* s = traced_call_state(bpf_get_current_task_btf());
  if (!s) return;
  __u64 uaddr = HT_SC_ARG1(regs, btf);
  /* The sampling window runs on the thread's scheduler clock (plain loads,
   * at most a tick behind); only a record sent reads the wall clock. */
  __u64 clock = call_clock_leaving_cpu(t);
  if (s->wake_uaddr == uaddr && clock - s->wake_emit_ns < wake_emit_ns) return;
  s->wake_uaddr = uaddr;
  s->wake_emit_ns = clock;
  __u64 now = bpf_ktime_get_ns();

  struct ht_futex_event* e = ht_reserve_at(HT_EV_FUTEX_WAKE, sizeof(*e), now);
  if (!e) return;
  e->uaddr = uaddr;
  e->op = op;
  e->ret = (__s32)ret;
  e->duration_ns = 0;
  e->timeout_ns = 0;
  /* No stacks for wakes: they are frequent and never sleep. */
  e->kstack_id = -ENOENT;
  e->ustack_id = -ENOENT;
  ht_submit(e);
}

#endif /* HANGTRACE_FUTEX_BPF_H */
