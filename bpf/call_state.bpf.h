/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The syscall dispatcher's per-thread state (bpf/syscalls.bpf.c), its clock
 * and its stack walks.
 *
 * A thread is in at most one syscall at a time, so one record per thread
 * serves every concern the dispatcher runs (futex waits, blocking calls):
 * one task-storage lookup per hook instead of one per concern.
 */
#ifndef HANGTRACE_CALL_STATE_BPF_H
#define HANGTRACE_CALL_STATE_BPF_H

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "live_maps.bpf.h"
#include "sched_clock.bpf.h"
#include "syscall_regs.bpf.h"
#include "uapi.bpf.h"

/* call_state.kind */
#define CALL_FUTEX_WAIT 1
#define CALL_BLOCKING 2

struct call_state {
  /* When the call in progress first slept (call_clock_leaving_cpu; 0 until
   * it does). A wait is timed from there to when the thread last got back
   * on a CPU before the call returned: the on-CPU prefix and tail
   * (microseconds) are no wait, and a call that never sleeps is never
   * timed. */
  __u64 ts_ns;
  __s64 nr;
  __u64 args[3];    /* blocking: the first three arguments as passed */
  __u64 obj;        /* what the call waits on: futex word (uaddr) or fd */
  __u64 timeout_ns; /* futex: the timespec as given, 0 if none */
  __u64 obj_inode;  /* blocking: the fd's inode, resolved when the call first sleeps */
  __u32 kind;       /* CALL_* */
  __u32 op;         /* futex op (with HT_FUTEX_OP_* flags) */
  __u32 obj_kind;   /* blocking: OBJ_* of the fd */
  __u8 slept;       /* the call has been switched out voluntarily */
  __u8 resolved;    /* obj_kind/obj_inode are filled in */
  __u8 in_call;     /* a tracked call is in progress */
  __u8 pad;
  __s32 kstack_id; /* where it first slept; -ENOENT until then */
  /* Stack walks (~1 us each) are throttled per thread: a call on the same
   * syscall and object as the last walk, within the interval, reuses its id
   * (the path through the kernel, and the call site, of a loop's wait on
   * one word or fd do not change). */
  __s32 kwalk_id;
  __u64 kwalk_ns, kwalk_nr, kwalk_obj;
  __s32 uwalk_id;
  __u32 tid;   /* the thread's, set when the record is created */
  __u32 epoch; /* hooks_epoch when the call began: one begun before a detach is stale */
  __u32 epoch_pad;
  __u64 uwalk_ns, uwalk_nr, uwalk_obj;
  /* futex wake records are sampled: one per word per thread per interval
   * (wake_emit_ns: call_clock_leaving_cpu() of the last one sent). */
  __u64 wake_uaddr, wake_emit_ns;
  /* Waits under min_block_ns being summed (short_waits.bpf.h); count 0: none.
   * sw_epoch: hooks_epoch when the sum began. */
  struct ht_short_waits sw;
  __u32 sw_epoch;
  __u32 sw_pad;
};

/* Task-local storage rather than a hash keyed by tid: no hashing on the hot
 * paths, a NULL check for tasks never traced, and it is freed with the task,
 * so nothing leaks when a thread dies mid-call. Created only for threads of
 * traced processes (traced_tgids only ever grows while a process lives), so
 * finding it also answers "is this thread traced?" without the hash. */
struct {
  __uint(type, BPF_MAP_TYPE_TASK_STORAGE);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, int);
  __type(value, struct call_state);
} call_tasks SEC(".maps");

static __always_inline struct call_state* call_state_of(struct task_struct* t) {
  return bpf_task_storage_get(&call_tasks, t, 0, 0);
}

/* t's state (t: current), created when its process is traced; NULL for
 * threads outside the traced set. */
static __always_inline struct call_state* traced_call_state(struct task_struct* t) {
  struct call_state* s = call_state_of(t);
  if (s) return s;
  if (!ht_traced_tgid(t->tgid)) return NULL;
  s = bpf_task_storage_get(&call_tasks, t, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
  if (s) s->tid = t->pid;
  return s;
}

/*
 * How many tracked calls are in progress, per bucket of thread ids (tid mod
 * the map size): a sys_exit of a thread whose bucket is 0 has no call to
 * finish and skips the task-storage lookup -- an array lookup the verifier
 * inlines instead of two helper calls, on every read/write/futex/poll exit
 * of the machine. A bucket another thread's call shares only costs that
 * lookup back; the counts are exact (atomic), so a call is never missed. A
 * thread that dies inside a call (no sys_exit) leaves its bucket one high,
 * which again only costs lookups.
 */
#define CALL_BUCKETS 65536
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, CALL_BUCKETS);
  __type(key, __u32);
  __type(value, __u32);
} calls_in_progress SEC(".maps");

static __always_inline bool call_maybe_in_progress(__u32 tid) {
  __u32 bucket = tid & (CALL_BUCKETS - 1);
  __u32* n = bpf_map_lookup_elem(&calls_in_progress, &bucket);
  return !n || *n != 0;
}

/* Bumped by userspace each time the hooks are attached again (the daemon's
 * sampled steady state detaches them): a call whose state was left by an
 * earlier attachment -- its exit or first sleep happened while detached --
 * is stale, never finished with a duration spanning the gap. */
__u32 hooks_epoch = 0;

static __always_inline void call_mark_begun(struct call_state* s) {
  s->epoch = hooks_epoch;
  if (!s->in_call) {
    __u32 bucket = s->tid & (CALL_BUCKETS - 1);
    __u32* n = bpf_map_lookup_elem(&calls_in_progress, &bucket);
    if (n) __sync_fetch_and_add(n, 1);
  }
  s->in_call = 1;
}

static __always_inline void call_mark_ended(struct call_state* s) {
  if (s->in_call) {
    __u32 bucket = s->tid & (CALL_BUCKETS - 1);
    __u32* n = bpf_map_lookup_elem(&calls_in_progress, &bucket);
    if (n) __sync_fetch_and_add(n, (__u32)-1);
  }
  s->in_call = 0;
}

/*
 * The dispatcher's clock: the scheduler's (sched_clock.bpf.h) instead of a
 * bpf_ktime_get_ns() call per sleep and per exit. Durations only: records
 * are stamped with bpf_ktime_get_ns() when they are sent. Without
 * CONFIG_SCHED_INFO both ends fall back to bpf_ktime_get_ns().
 */

/* When a task leaves the CPU (at sched_switch). */
static __always_inline __u64 call_clock_leaving_cpu(struct task_struct* t) {
  __u64 c = ht_task_sched_clock(t);
  return c ? c : bpf_ktime_get_ns();
}

/* When a task that slept last got back on a CPU: the end of its wait (the
 * microseconds on CPU since, until the call returns, are no wait). */
static __always_inline __u64 call_clock_back_on_cpu(struct task_struct* t) {
  if (!bpf_core_field_exists(t->sched_info.last_arrival)) return bpf_ktime_get_ns();
  return t->sched_info.last_arrival;
}

/* Settings (set from LiveOptions before load). */
const volatile __u64 min_block_ns = 5000000;        /* calls shorter than this are not streamed */
const volatile __u64 kstack_interval_ns = 10000000; /* kernel stack walk throttle */
const volatile __u64 ustack_interval_ns = 10000000; /* user stack walk throttle */

/* The kernel stack where the call first slept (ctx: the sched_switch one). */
static __always_inline void take_kernel_stack(void* ctx, struct call_state* s, __u64 now) {
  if (s->kwalk_id >= 0 && s->kwalk_nr == s->nr && s->kwalk_obj == s->obj &&
      now - s->kwalk_ns < kstack_interval_ns) {
    s->kstack_id = s->kwalk_id;
    return;
  }
  s->kstack_id = ht_stackid(ctx, 0);
  s->kwalk_id = s->kstack_id;
  s->kwalk_ns = now;
  s->kwalk_nr = s->nr;
  s->kwalk_obj = s->obj;
}

/* The user stack of a call being reported (ctx: the sys_exit one). The user
 * registers at exit are those at entry: the call returns where it was made. */
static __always_inline __s32 take_user_stack(void* ctx, struct call_state* s, __u64 now) {
  if (s->uwalk_id >= 0 && s->uwalk_nr == s->nr && s->uwalk_obj == s->obj &&
      now - s->uwalk_ns < ustack_interval_ns)
    return s->uwalk_id;
  s->uwalk_id = ht_stackid(ctx, BPF_F_USER_STACK);
  s->uwalk_ns = now;
  s->uwalk_nr = s->nr;
  s->uwalk_obj = s->obj;
  return s->uwalk_id;
}

#endif /* HANGTRACE_CALL_STATE_BPF_H */
