// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The syscall dispatcher: one program on syscall entry, one on exit and one
 * on sched_switch run every syscall concern of the traced tasks --
 *   futex       waits and (sampled) wakes          bpf/futex.bpf.h
 *   blocking    fd I/O, sockets, poll, wait4, ...  bpf/blocking.bpf.h
 *   shm calls   create/truncate/mmap/unlink/ENOSPC bpf/shm_calls.bpf.h
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
 * The kernel stack of a wait is taken at the first voluntary context switch
 * inside the call, where it shows what the task sleeps in (at sys_enter it
 * would only show the syscall entry path); calls that never sleep pay for no
 * walk. The user stack is taken at sys_exit, only for calls reported.
 */
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "blocking.bpf.h"
#include "call_state.bpf.h"
#include "futex.bpf.h"
#include "live_maps.bpf.h"
#include "shm_calls.bpf.h"

/* What a syscall is to the dispatcher (bit set). */
#define C_FUTEX 1       /* futex, futex_waitv, futex_wait */
#define C_FD 2          /* blocking, args[0] is an fd */
#define C_NOFD 4        /* blocking, no fd argument */
#define C_SHM 8         /* a /dev/shm call: looked at on exit */
#define C_SHM_ENOSPC 16 /* the write family: a /dev/shm call only when it fails with ENOSPC */

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
    case 42:  /* connect */
    case 43:  /* accept */
    case 288: /* accept4 */
    case 44:  /* sendto */
    case 45:  /* recvfrom */
    case 46:  /* sendmsg */
    case 47:  /* recvmsg */
    case 299: /* recvmmsg */
    case 307: /* sendmmsg */
    case 232: /* epoll_wait */
    case 281: /* epoll_pwait */
    case 441: /* epoll_pwait2 */
      return C_FD;
    case 7:   /* poll */
    case 271: /* ppoll */
    case 23:  /* select */
    case 270: /* pselect6 */
    case 61:  /* wait4 */
    case 247: /* waitid */
    case 35:  /* nanosleep */
    case 230: /* clock_nanosleep */
      return C_NOFD;
#endif
    default:
      return 0;
  }
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

/* The call being tracked ends: report it when it blocked long enough. A call
 * that never slept blocked for 0 ns; it is reported only when every call is
 * (min_block_ns 0), and only then pays for a clock read. */
static __always_inline void finish_call(void* ctx, struct call_state* s, long ret, bool btf) {
  s->in_call = 0;
  if (!s->slept && min_block_ns) return;
  __u64 now = bpf_ktime_get_ns();
  __u64 duration = s->slept ? now - s->ts_ns : 0;
  if (duration < min_block_ns) return;
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
    struct call_state* s = call_state_of_current();
    if (s && s->in_call) {
      /* A stale entry (a call whose exit was missed) is dropped, not reported. */
      if (s->nr == nr)
        finish_call(ctx, s, ret, btf);
      else
        s->in_call = 0;
    } else if ((c & C_FUTEX) && trace_futex && nr == NR_futex) {
      futex_exit_wake(regs, ret, btf);
    }
  }
  if (trace_shm_calls && ((c & C_SHM) || ((c & C_SHM_ENOSPC) && ret == -ENOSPC)))
    shm_calls_exit(regs, nr, ret, btf);
  return 0;
}

/* The first time a tracked call sleeps: where (kernel stack), and on what
 * (the fd's object). current is the task switching out. Preemptions are
 * skipped: they do not wait. */
static __always_inline int on_sched_switch(void* ctx, bool preempt, bool btf) {
  if (preempt) return 0;
  struct call_state* s = call_state_of_current();
  if (!s || !s->in_call || s->slept) return 0;
  s->slept = 1;
  s->ts_ns = bpf_ktime_get_ns();
  if (!s->resolved) blocking_resolve_fd(s, btf);
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

SEC("tp_btf/sched_switch")
int BPF_PROG(sched_switch_btf, bool preempt) { return on_sched_switch(ctx, preempt, true); }

SEC("raw_tp/sched_switch")
int BPF_PROG(sched_switch_raw, bool preempt) { return on_sched_switch(ctx, preempt, false); }

char LICENSE[] SEC("license") = "Dual BSD/GPL";
