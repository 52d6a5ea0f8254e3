// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Who wakes whom: every sched_waking of a traced task is counted in kernel per
 * (waker thread, wakee thread) in `wakeups` (batched, below), read by
 * userspace for the report;
 * an HT_EV_WAKEUP is streamed at most once per wakeup_emit_ns per pair, enough
 * for the aggregator to know who last woke a thread without a record per
 * wakeup (a futex ping-pong wakes hundreds of thousands of times a second).
 *
 * The waker is `current`. For a wakeup from interrupt context (a timer
 * expiring, a packet arriving) that is whichever task the interrupt hit, often
 * the idle task (tgid 0); readers should treat tgid 0 and unrelated wakers of
 * sleeps/sockets that way.
 *
 * Twin programs, chosen by probing in userspace: tp_btf/sched_waking (typed
 * argument, no tracepoint lookup per call) where vmlinux BTF has
 * btf_trace_sched_waking, raw_tp/sched_waking elsewhere.
 */
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "live_maps.bpf.h"
#include "sched_clock.bpf.h"
#include "uapi.bpf.h"
#include "wake_batch.bpf.h"

/* At most one HT_EV_WAKEUP per (waker, wakee) pair this often. */
const volatile __u64 wakeup_emit_ns = 10000000;

struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 16384);
  __type(key, struct ht_wakeup_key);
  __type(value, struct ht_wakeup_count);
} wakeups SEC(".maps");

/*
 * Batches, in the tp_btf twin: most wakeups of a thread come from the same
 * waker in a row (a ping-pong's peer, a DataLoader queue's producer), so
 * each traced wakee keeps in task storage the waker of its current batch and
 * how many of its wakeups are not yet in `wakeups`; a wakeup that extends the
 * batch is one increment -- no hashing of the traced set, no LRU lookup. A
 * batch ends, and is added to `wakeups`, when another task wakes the thread,
 * after wakeup_emit_ns, when the thread exits (sched_process_exit below), and
 * when userspace reads the counts (the flush_wake_batches iterator), so the
 * counts it reads are exact. Every wakeup of a task runs under its pi_lock,
 * so the batch has one writer at a time; the flushes from exit and the
 * iterator, which may run beside a wakeup (and its flush), take the pending
 * count with an atomic exchange against the wakeups' atomic increments:
 * nothing is lost or added twice.
 * The raw_tp twin has no typed wakee for task storage and counts every
 * wakeup in `wakeups` directly.
 */
/* struct wake_batch and the wake_batches map: bpf/wake_batch.bpf.h. */

/*
 * The clock of the batch window: the waker's scheduler clock
 * (sched_clock.bpf.h; plain loads, at most a tick behind, which a 10 ms
 * window allows) rather than a bpf_ktime_get_ns() call per wakeup. One batch
 * has one waker, so its times are all read from the same task. The idle
 * task (interrupt-context wakers) is never accounted: it reads the real
 * clock, as does a kernel without CONFIG_SCHED_INFO.
 */
static __always_inline __u64 waker_clock(struct task_struct* waker) {
  __u64 c = waker->pid ? ht_task_sched_clock(waker) : 0;
  return c ? c : bpf_ktime_get_ns();
}

/* Adds a batch's pending wakeups of `wakee_tid` to `wakeups`. */
static __always_inline void flush_batch(struct wake_batch* b, __u32 wakee_tgid, __u32 wakee_tid) {
  /* Taken whole with an exchange: an exit or iterator flush can run beside
   * a wakeup's, and each must add a disjoint part. */
  __u64 n = __sync_lock_test_and_set(&b->pending, 0);
  if (!n) return;
  /* The latest wakeup, in bpf_ktime_get_ns() terms. */
  __u64 last_ns = b->since_ns + (b->last_clock - b->since_clock);
  struct ht_wakeup_key key = {};
  key.waker_tgid = b->waker_tgid;
  key.waker_tid = b->waker_tid;
  key.wakee_tid = wakee_tid;
  struct ht_wakeup_count* c = bpf_map_lookup_elem(&wakeups, &key);
  if (c) {
    __sync_fetch_and_add(&c->count, n);
    if (last_ns > c->last_ts_ns) c->last_ts_ns = last_ns;
    return;
  }
  /* The pair's entry was evicted meanwhile (LRU): counted anew. */
  struct ht_wakeup_count fresh = {};
  fresh.count = n;
  fresh.last_ts_ns = last_ns;
  fresh.last_emit_ns = last_ns;
  fresh.wakee_tgid = wakee_tgid;
  __builtin_memcpy(fresh.waker_comm, b->waker_comm, sizeof(fresh.waker_comm));
  bpf_map_update_elem(&wakeups, &key, &fresh, BPF_NOEXIST);
}

/* Counts one wakeup in `wakeups` (key: this waker, current), and streams an
 * HT_EV_WAKEUP when the pair's last one is wakeup_emit_ns old. */
static __always_inline void count_wakeup(void* ctx, struct task_struct* p, struct ht_wakeup_key* key,
                                         __u32 wakee_tgid, __u64 now, bool btf) {
  bool emit = false;
  struct ht_wakeup_count* c = bpf_map_lookup_elem(&wakeups, key);
  if (c) {
    __sync_fetch_and_add(&c->count, 1);
    c->last_ts_ns = now;
    /* Racy across CPUs at worst by one extra record; no lock needed. */
    if (now - c->last_emit_ns >= wakeup_emit_ns) {
      c->last_emit_ns = now;
      emit = true;
    }
  } else {
    struct ht_wakeup_count fresh = {};
    fresh.count = 1;
    fresh.last_ts_ns = now;
    fresh.last_emit_ns = now;
    fresh.wakee_tgid = wakee_tgid;
    bpf_get_current_comm(fresh.waker_comm, sizeof(fresh.waker_comm));
    /* Two CPUs may race to create the pair; the loser's count is lost, once. */
    bpf_map_update_elem(&wakeups, key, &fresh, BPF_NOEXIST);
    emit = true;
  }
  if (!emit || !ht_stream_wakes) return;

  struct ht_wakeup_event* e = ht_reserve(HT_EV_WAKEUP, sizeof(*e));
  if (!e) return;
  /* ht_reserve filled in the current task (the waker); the header is the wakee's. */
  __builtin_memcpy(e->waker_comm, e->hdr.comm, sizeof(e->waker_comm));
  e->waker_tgid = key->waker_tgid;
  e->waker_tid = key->waker_tid;
  e->hdr.tgid = wakee_tgid;
  e->hdr.tid = key->wakee_tid;
  BPF_CORE_READ_STR_INTO(&e->hdr.comm, p, comm);
  /* Walked only for the sampled records (~1 us each): the folded export puts
   * the waker's stacks after the wakee's, offwaketime-style. No user stack
   * for the idle task, the usual waker from interrupt context. */
  e->waker_kstack_id = ht_stackid(ctx, 0);
  e->waker_ustack_id = key->waker_tgid ? ht_stackid(ctx, BPF_F_USER_STACK) : -ENOENT;
  ht_submit(e);
}

/* `btf`: p is a BTF-typed pointer (tp_btf twin), read with plain loads and
 * usable for task storage; a constant after inlining. This runs on every
 * wakeup of the machine. */
static __always_inline void on_waking(void* ctx, struct task_struct* p, bool btf) {
  struct wake_batch* b = NULL;
  if (btf) b = bpf_task_storage_get(&wake_batches, p, 0, 0);
  __u32 wakee_tgid = btf ? p->tgid : BPF_CORE_READ(p, tgid);
  if (!b && !ht_traced_tgid(wakee_tgid)) return;

  struct task_struct* waker = bpf_get_current_task_btf();
  struct ht_wakeup_key key = {};
  key.waker_tgid = waker->tgid;
  key.waker_tid = waker->pid;
  __u64 clock = 0;
  if (b) {
    clock = waker_clock(waker);
    if (b->waker_tid == key.waker_tid && b->waker_tgid == key.waker_tgid &&
        clock - b->since_clock < wakeup_emit_ns) {
      __sync_fetch_and_add(&b->pending, 1); /* atomic: the flushes subtract beside it */
      b->last_clock = clock;
      return;
    }
  }

  __u64 now = bpf_ktime_get_ns();
  key.wakee_tid = btf ? p->pid : BPF_CORE_READ(p, pid);
  if (btf) {
    if (b) {
      flush_batch(b, wakee_tgid, key.wakee_tid);
    } else {
      b = bpf_task_storage_get(&wake_batches, p, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
      clock = waker_clock(waker);
    }
    if (b) {
      /* A new batch; this wakeup, its first, is counted directly. */
      b->waker_tgid = key.waker_tgid;
      b->waker_tid = key.waker_tid;
      b->since_ns = now;
      b->since_clock = clock;
      b->last_clock = clock;
      bpf_get_current_comm(b->waker_comm, sizeof(b->waker_comm));
    }
  }
  count_wakeup(ctx, p, &key, wakee_tgid, now, btf);
}

SEC("tp_btf/sched_waking")
int BPF_PROG(sched_waking_btf, struct task_struct* p) {
  on_waking(ctx, p, true);
  return 0;
}

SEC("raw_tp/sched_waking")
int BPF_PROG(sched_waking_raw, struct task_struct* p) {
  on_waking(ctx, p, false);
  return 0;
}

/* A thread's batch is freed with it: added to `wakeups` as it exits. Both
 * twins: current is the exiting thread. */
static __always_inline void flush_on_exit(void) {
  struct task_struct* t = bpf_get_current_task_btf();
  struct wake_batch* b = bpf_task_storage_get(&wake_batches, t, 0, 0);
  if (b) flush_batch(b, t->tgid, t->pid);
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(sched_process_exit_btf) {
  flush_on_exit();
  return 0;
}

SEC("raw_tp/sched_process_exit")
int BPF_PROG(sched_process_exit_raw) {
  flush_on_exit();
  return 0;
}

/* Run by userspace before it reads `wakeups`: adds every batch's pending
 * wakeups, so the counts read are exact. */
SEC("iter/task")
int flush_wake_batches(struct bpf_iter__task* ctx) {
  struct task_struct* t = ctx->task;
  if (!t) return 0;
  struct wake_batch* b = bpf_task_storage_get(&wake_batches, t, 0, 0);
  if (b) flush_batch(b, t->tgid, t->pid);
  return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
