// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The syscall dispatcher: one program on syscall exit and one on sched_switch
 * (and one on entry when every call is streamed) run every syscall concern of
 * the traced tasks --
 *   futex       waits and (sampled) wakes          bpf/futex.bpf.h
 *   blocking    fd I/O, sockets, poll, wait4, ...  bpf/blocking.bpf.h
 *   shm calls   create/truncate/mmap/unlink/ENOSPC bpf/shm_calls.bpf.h
 *   histograms  every wait that slept, by kind     bpf/blocked_hist.bpf.h
 * each switched by a const volatile trace_* setting.
 *
 * Why one program and not one per concern: once any sys_enter/sys_exit hook
 * is attached, every syscall on the machine runs every program attached to
 * it, so each extra program is a fixed cost per syscall of every process;
 * one switch on the syscall number decides here which concern (if any) a
 * call concerns, and one task-storage record per thread (bpf/call_state.bpf.h)
 * serves all of them. The same goes for sched_switch, which runs on every
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
#include "live_maps.bpf.h"
#include "shm_calls.bpf.h"

/* Calls are tracked from sys_enter (every call, even one that never sleeps,
 * is streamed: min_block_ns 0; sys_enter is loaded only then) or from their
 * first sleep (sched_switch reads the call from the saved registers). */
const volatile bool calls_from_entry = false;

static __always_inline bool call_current(struct call_state* s) {
  return s->in_call && s->epoch == hooks_epoch;
}

/* What a syscall is to the dispatcher (bit set). */
#define C_FUTEX 1       /* futex, futex_waitv, futex_wait */
#define C_FD 2          /* blocking, args[0] is an fd */
#define C_NOFD 4        /* blocking, no fd argument */
#define C_SHM 8         /* a /dev/shm call: looked at on exit */
#define C_SHM_ENOSPC 16 /* the write family: a /dev/shm call only when it fails with ENOSPC */
/* What a blocking call waits for, for the histograms (the rest is fd I/O). */
#define C_NET 32
#define C_POLL 64
#define C_CHILD 128
#define C_SLEEP 256

/* The one switch every syscall of the machine goes through; the common
 * answer is 0. Blocking-call numbers are x86_64's (the ABI's numbering, see
 * abi.h); other arches get the futex and shm concerns. */
static __always_inline __u32 classify(__s64 nr) {
  switch (nr) {
    case NR_futex:
    case NR_futex_waitv:
    case NR_futex_wait:
      return C_FUTEX;
    case NR_WRITE:
    case NR_PWRITE64:
    case NR_WRITEV:
    case NR_PWRITEV:
    case NR_PWRITEV2:
#if defined(bpf_target_x86)
      return C_FD | C_SHM_ENOSPC;
#else
      return C_SHM_ENOSPC;
#endif
    case NR_OPEN:
    case NR_CREAT:
    case NR_OPENAT:
    case NR_OPENAT2:
    case NR_FTRUNCATE:
    case NR_TRUNCATE:
    case NR_FALLOCATE:
    case NR_MMAP:
    case NR_UNLINK:
    case NR_UNLINKAT:
      return C_SHM;
#if defined(bpf_target_x86)
    case 0:   /* read */
    case 17:  /* pread64 */
    case 19:  /* readv */
    case 295: /* preadv */
    case 327: /* preadv2 */
      return C_FD;
    case 42:  /* connect */
    case 43:  /* accept */
    case 288: /* accept4 */
    case 44:  /* sendto */
    case 45:  /* recvfrom */
    case 46:  /* sendmsg */
    case 47:  /* recvmsg */
    case 299: /* recvmmsg */
    case 307: /* sendmmsg */
      return C_FD | C_NET;
    case 232: /* epoll_wait */
    case 281: /* epoll_pwait */
    case 441: /* epoll_pwait2 */
      return C_FD | C_POLL;
    case 7:   /* poll */
    case 271: /* ppoll */
    case 23:  /* select */
    case 270: /* pselect6 */
      return C_NOFD | C_POLL;
    case 61:  /* wait4 */
    case 247: /* waitid */
      return C_NOFD | C_CHILD;
    case 35:  /* nanosleep */
    case 230: /* clock_nanosleep */
      return C_NOFD | C_SLEEP;
#endif
    default:
      return 0;
  }
}

static __always_inline __u8 wait_kind_of(struct call_state* s) {
  if (s->kind == CALL_FUTEX_WAIT) return HT_WAIT_FUTEX;
  __u32 c = classify(s->nr);
  if (c & C_NET) return HT_WAIT_NET;
  if (c & C_POLL) return HT_WAIT_POLL;
  if (c & C_CHILD) return HT_WAIT_CHILD;
  if (c & C_SLEEP) return HT_WAIT_SLEEP;
  return HT_WAIT_IO;
}

static __always_inline int on_sys_enter(struct pt_regs* regs, __s64 nr, bool btf) {
  __u32 c = classify(nr);
  if (c & C_FUTEX) {
    if (trace_futex) futex_enter(regs, nr, btf);
  } else if (c & (C_FD | C_NOFD)) {
    if (trace_blocking) blocking_enter(regs, nr, c & C_FD, btf);
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
  if (duration < min_block_ns) return;
  __u64 now = bpf_ktime_get_ns();
  if (s->kind == CALL_FUTEX_WAIT)
    futex_emit_wait(ctx, s, ret, duration, now);
  else
    blocking_emit(ctx, s, ret, duration, now, btf);
}

static __always_inline int on_sys_exit(void* ctx, struct pt_regs* regs, long ret, bool btf) {
  __s64 nr = HT_SC_NR(regs, btf);
  __u32 c = classify(nr);
  if (!c) return 0;
  if (c & (C_FUTEX | C_FD | C_NOFD)) {
    struct task_struct* t = bpf_get_current_task_btf();
    struct call_state* s = call_maybe_in_progress(t->pid) ? call_state_of(t) : NULL;
    if (s && s->in_call) {
      /* A stale entry (a call whose exit was missed) is dropped, not reported. */
      if (s->nr == nr && s->epoch == hooks_epoch)
        finish_call(ctx, t, s, ret, btf);
      else
        call_mark_ended(s);
    } else if ((c & C_FUTEX) && trace_futex && nr == NR_futex) {
      futex_exit_wake(t, regs, ret, btf);
    }
  }
  if (trace_shm_calls && ((c & C_SHM) || ((c & C_SHM_ENOSPC) && ret == -ENOSPC)))
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
  __u32 c = classify(nr);
  if (!(c & (C_FUTEX | C_FD | C_NOFD))) return 0;
  struct call_state* s = call_state_of(t);
  if (s && call_current(s)) {
    if (s->slept) return 0;
  } else {
    if (s && s->in_call) call_mark_ended(s); /* left over from before the hooks were detached */
    if (calls_from_entry) return 0;
    if (c & C_FUTEX) {
      if (!trace_futex || !futex_call_waits(regs, nr, true)) return 0;
    } else if (!trace_blocking) {
      return 0;
    }
    if (!s) s = traced_call_state(t);
    if (!s) return 0;
    if (c & C_FUTEX)
      futex_begin(s, regs, nr, true);
    else
      blocking_begin(s, regs, nr, c & C_FD, true);
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
