// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The syscall dispatcher: one program on syscall exit and one on sched_switch
 * (and one on entry when every call is streamed) run every syscall concern of
 * the traced tasks --
 *   futex       waits and (sampled) wakes          bpf/futex.bpf.h
 *   blocking    fd I/O, sockets, poll, wait4, ...  bpf/blocking.bpf.h
 *   shm calls   create/truncate/mmap/unlink/ENOSPC bpf/shm_calls.bpf.h
 *   histograms  every wait that slept, by kind     bpf/blocked_hist.bpf.h
 *   short waits those under min_block_ns, summed   bpf/short_waits.bpf.h
 * each switched by a const volatile trace_* setting.
 *
 * Why one program and not one per concern: once any sys_enter/sys_exit hook
 * is attached, every syscall on the machine runs every program attached to
 * it, so each extra program is a fixed cost per syscall of every process;
 * one switch on the syscall number (ht_syscall_class, generated from the
 * architecture's syscall table in hangtrace/syscall_dispatch.h) decides here
 * which concern (if any) a call concerns, and one task-storage record per
 * thread (bpf/call_state.bpf.h) serves all of them. The same goes for sched_switch, which runs on every
 * context switch of the machine.
 *
 * Hooks: sys_enter/sys_exit (raw_syscalls), not per-syscall tracepoints:
 * enabling either kind sets TIF_SYSCALL_TRACEPOINT on every task, so every
 * syscall passes through the tracepoint anyway; one pair covers ~50 syscalls
 * and needs neither tracefs nor a perf event per syscall. Every hook is a
 * twin, chosen by probing in userspace: tp_btf (typed arguments, direct loads
 * of the saved registers) where vmlinux BTF describes the tracepoint, raw_tp
 * (probe reads) elsewhere. No classic tp/ tracepoints: they need tracefs.
 *
 * A wait starts at the first voluntary context switch inside the call:
 * sched_switch reads the call (number, arguments) from the task's saved
 * registers, takes the clock and the kernel stack, where it shows what the
 * task sleeps in; sys_exit reports it when it lasted min_block_ns. So the hot
 * path of a call that never sleeps -- most reads and writes -- is one switch
 * on its number at exit, and no entry program is attached at all (an entry
 * hook costs every syscall of the machine). Only with min_block_ns 0, where
 * calls that never slept are streamed too, does sys_enter start calls. The
 * user stack is taken at sys_exit, only for calls reported.
 */
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "blocked_hist.bpf.h"
#include "blocking.bpf.h"
#include "call_state.bpf.h"
#include "futex.bpf.h"
#include "hangtrace/syscall_dispatch.h"
#include "live_maps.bpf.h"
#include "shm_calls.bpf.h"
#include "short_waits.bpf.h"
#include "uapi.bpf.h"

/* Calls are tracked from sys_enter (every call, even one that never sleeps,
 * is streamed: min_block_ns 0; sys_enter is loaded only then) or from their
 * first sleep (sched_switch reads the call from the saved registers). */
const volatile bool calls_from_entry = false;

static __always_inline bool call_current(struct call_state* s) {
  return s->in_call && s->epoch == hooks_epoch;
}

static __always_inline __u8 wait_kind_of(struct call_state* s) {
  if (s->kind == CALL_FUTEX_WAIT) return HT_WAIT_FUTEX;
  return ht_blocking_wait_kind(ht_syscall_class(s->nr));
}

static __always_inline int on_sys_enter(struct pt_regs* regs, __s64 nr, bool btf) {
  __u32 c = ht_syscall_class(nr);
  if (c & HT_CLASS_FUTEX) {
    if (trace_futex) futex_enter(regs, nr, btf);
  } else if (c & (HT_CLASS_FD | HT_CLASS_NOFD)) {
    if (trace_blocking) blocking_enter(regs, nr, c & HT_CLASS_FD, btf);
  }
  return 0;
}

/* The call being tracked ends (t: current): report it when it blocked long
 * enough. A call that never slept blocked for 0 ns; it is reported only when
 * every call is (min_block_ns 0). Only a call reported reads the wall clock,
 * for its record's timestamp. */
static __always_inline void finish_call(void* ctx, struct task_struct* t, struct call_state* s, long ret,
                                        bool btf) {
  call_mark_ended(s);
  if (!s->slept && min_block_ns) return;
  __u64 duration = 0;
  if (s->slept) {
    __u64 back = call_clock_back_on_cpu(t);
    duration = back > s->ts_ns ? back - s->ts_ns : 0;
    if (hist_blocked) hist_add_blocked(t, wait_kind_of(s), duration);
  }
  if (duration < min_block_ns) {
    if (short_waits_on && s->slept) short_waits_add(t, s, ret, duration, btf);
    return;
  }
  /* The short ones before it go first: none waits behind a long wait. */
  if (s->sw.count) short_waits_send(s);
  __u64 now = bpf_ktime_get_ns();
  if (s->kind == CALL_FUTEX_WAIT)
    futex_emit_wait(ctx, s, ret, duration, now);
  else
    blocking_emit(ctx, s, ret, duration, now, btf);
}

static __always_inline int on_sys_exit(void* ctx, struct pt_regs* regs, long ret, bool btf) {
  __s64 nr = HT_SC_NR(regs, btf);
  __u32 c = ht_syscall_class(nr);
  if (!c) return 0;
  if (c & (HT_CLASS_FUTEX | HT_CLASS_FD | HT_CLASS_NOFD)) {
    struct task_struct* t = bpf_get_current_task_btf();
    struct call_state* s = call_maybe_in_progress(t->pid) ? call_state_of(t) : NULL;
    if (s && s->in_call) {
      /* A stale entry (a call whose exit was missed) is dropped, not reported. */
      if (s->nr == nr && s->epoch == hooks_epoch)
        finish_call(ctx, t, s, ret, btf);
      else
        call_mark_ended(s);
    } else if ((c & HT_CLASS_FUTEX) && trace_futex && nr == HT_NR_futex) {
      futex_exit_wake(t, regs, ret, btf);
    }
  }
  if (trace_shm_calls && ((c & HT_CLASS_SHM) || ((c & HT_CLASS_SHM_ENOSPC) && ret == -ENOSPC)))
    shm_calls_exit(regs, nr, ret, btf);
  return 0;
}

/*
 * A voluntary switch (t: the task switching out, current): the first sleep
 * of a call a concern tracks -- when it started (its clock), and where (the
 * kernel stack). Unless calls_from_entry, this is also where the call starts
 * being tracked: read from the saved registers (bpf_task_pt_regs, a BTF
 * pointer in both twins), so a call that never sleeps costs nothing on
 * entry. The registers are looked at first: a switch outside such a call
 * (most of the machine's) skips the task-storage lookup. Preemptions are
 * skipped: they do not wait.
 */
static __always_inline int on_sched_switch(void* ctx, bool preempt, struct task_struct* t) {
  if (preempt) return 0;
  struct pt_regs* regs = (struct pt_regs*)bpf_task_pt_regs(t);
  if (!regs || !HT_SC_RUNNING(regs, true)) return 0;
  __s64 nr = HT_SC_NR(regs, true);
  __u32 c = ht_syscall_class(nr);
  if (!(c & (HT_CLASS_FUTEX | HT_CLASS_FD | HT_CLASS_NOFD))) return 0;
  struct call_state* s = call_state_of(t);
  if (s && call_current(s)) {
    if (s->slept) return 0;
  } else {
    if (s && s->in_call) call_mark_ended(s); /* left over from before the hooks were detached */
    if (calls_from_entry) return 0;
    if (c & HT_CLASS_FUTEX) {
      if (!trace_futex || !futex_call_waits(regs, nr, true)) return 0;
    } else if (!trace_blocking) {
      return 0;
    }
    if (!s) s = traced_call_state(t);
    if (!s) return 0;
    if (c & HT_CLASS_FUTEX)
      futex_begin(s, regs, nr, true);
    else
      blocking_begin(s, regs, nr, c & HT_CLASS_FD, true);
  }
  s->slept = 1;
  s->ts_ns = call_clock_leaving_cpu(t);
  take_kernel_stack(ctx, s, s->ts_ns);
  return 0;
}

SEC("tp_btf/sys_enter")
int BPF_PROG(sys_enter_btf, struct pt_regs* regs, long id) { return on_sys_enter(regs, id, true); }

SEC("raw_tp/sys_enter")
int BPF_PROG(sys_enter_raw, struct pt_regs* regs, long id) { return on_sys_enter(regs, id, false); }

SEC("tp_btf/sys_exit")
int BPF_PROG(sys_exit_btf, struct pt_regs* regs, long ret) { return on_sys_exit(ctx, regs, ret, true); }

SEC("raw_tp/sys_exit")
int BPF_PROG(sys_exit_raw, struct pt_regs* regs, long ret) { return on_sys_exit(ctx, regs, ret, false); }

/* The typed prev is current, without a helper call; the raw twin asks. */
SEC("tp_btf/sched_switch")
int BPF_PROG(sched_switch_btf, bool preempt, struct task_struct* prev) {
  return on_sched_switch(ctx, preempt, prev);
}

SEC("raw_tp/sched_switch")
int BPF_PROG(sched_switch_raw, bool preempt) {
  return on_sched_switch(ctx, preempt, bpf_get_current_task_btf());
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
