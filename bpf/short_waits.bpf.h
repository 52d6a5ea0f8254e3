/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Waits under min_block_ns, run by the syscall dispatcher (bpf/syscalls.bpf.c)
 * for every call of a traced task that slept and is not reported on its own:
 * a main thread that waits 3 ms at a time for a DataLoader worker's fd
 * sharer, thousands of times, spends most of its time in waits no record
 * shows. Each thread sums its consecutive short waits of one syscall, object
 * and waker in its call state and sends them as one HT_EV_SHORT_WAITS when
 * the next wait differs, the sum reaches short_wait_flush_ns, or the thread's
 * next reported wait ends: at most one record per such run, so a ping-pong
 * on one pipe costs a few adds per call.
 *
 * The waker is the thread's latest one, from its wake batch (sched's task
 * storage, wake_batch.bpf.h), if that wakeup came after the wait began; a
 * wait that timed out has none. Without the sched concern's tp_btf twin
 * there are no batches and the waker is 0 (unknown).
 *
 * At most short_wait_flush_ns per thread is still being summed when a window
 * closes: not sent.
 */
#ifndef HANGTRACE_SHORT_WAITS_BPF_H
#define HANGTRACE_SHORT_WAITS_BPF_H

#include "blocked_hist.bpf.h"
#include "blocking.bpf.h"
#include "call_state.bpf.h"
#include "hangtrace/syscall_dispatch.h"
#include "wake_batch.bpf.h"

/* Set by userspace while a window wants them (a live window; the daemon's
 * on-demand profile): writable, not rodata, so the daemon can switch it. */
__u32 short_waits_on = 0;

const volatile __u64 short_wait_flush_ns = 20000000;

/* A wakeup at most this long (a scheduler tick and then some) before the
 * wait's first sleep, by the two tasks' clocks, still counts as the one that
 * ended it. */
#define SHORT_WAIT_WAKER_SLACK_NS 5000000ull

static __always_inline bool call_timed_out(struct call_state* s, long ret) {
  if (s->kind == CALL_FUTEX_WAIT) return ret == -ETIMEDOUT;
  __u8 kind = ht_blocking_wait_kind(ht_syscall_class(s->nr));
  return kind == HT_WAIT_SLEEP || (kind == HT_WAIT_POLL && ret == 0);
}

static __always_inline void short_waits_send(struct call_state* s) {
  if (s->sw_epoch != hooks_epoch) { /* begun before a detach: stale */
    s->sw.count = 0;
    return;
  }
  struct ht_short_waits_event* e = ht_reserve(HT_EV_SHORT_WAITS, sizeof(*e));
  if (e) {
    __builtin_memcpy(&e->waits, &s->sw, sizeof(e->waits));
    ht_submit(e);
  }
  s->sw.count = 0;
}

/* The call s just ended (t: current) after `duration` ns blocked, under
 * min_block_ns. */
static __always_inline void short_waits_add(struct task_struct* t, struct call_state* s, long ret,
                                            __u64 duration, bool btf) {
  struct ht_short_waits* a = &s->sw;
  if (a->count && s->sw_epoch != hooks_epoch) a->count = 0; /* begun before a detach */
  __u8 timed_out = call_timed_out(s, ret);
  __u32 waker_tgid = 0, waker_tid = 0;
  struct wake_batch* b = timed_out ? NULL : bpf_task_storage_get(&wake_batches, t, 0, 0);
  if (b && b->last_clock + SHORT_WAIT_WAKER_SLACK_NS >= s->ts_ns) {
    waker_tgid = b->waker_tgid;
    waker_tid = b->waker_tid;
  }
  __u8 futex = s->kind == CALL_FUTEX_WAIT;
  __s32 fd = futex ? -1 : (__s32)s->obj;
  bool same = a->count && a->nr == s->nr && a->futex == futex && a->fd == fd &&
              (!futex || a->object == s->obj) && a->waker_tid == waker_tid && a->timed_out == timed_out &&
              a->sum_ns + duration < short_wait_flush_ns;
  if (!same) {
    if (a->count) short_waits_send(s);
    __builtin_memset(a, 0, sizeof(*a));
    a->nr = s->nr;
    a->futex = futex;
    a->fd = fd;
    a->timed_out = timed_out;
    a->waker_tgid = waker_tgid;
    a->waker_tid = waker_tid;
    if (b && waker_tid) __builtin_memcpy(a->waker_comm, b->waker_comm, sizeof(a->waker_comm));
    if (futex) {
      a->object = s->obj;
      a->obj_kind = HT_OBJ_UNKNOWN;
    } else {
      /* Once per run: the next calls on this fd are taken to be on the same file. */
      if (!s->resolved) blocking_resolve_fd(s, btf);
      a->object = s->obj_inode;
      a->obj_kind = s->obj_kind;
    }
    s->sw_epoch = hooks_epoch;
  }
  a->count++;
  a->sum_ns += duration;
  __u64 us = duration / 1000;
  __u32 bucket = us ? hist_log2(us) : 0;
  if (bucket >= HT_SHORT_WAIT_BUCKETS) bucket = HT_SHORT_WAIT_BUCKETS - 1;
  a->buckets[bucket]++;
}

#endif /* HANGTRACE_SHORT_WAITS_BPF_H */
