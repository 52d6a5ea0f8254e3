// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Who wakes whom: every sched_waking of a traced task is counted in kernel per
 * (waker thread, wakee thread) in `wakeups`, read by userspace for the report;
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

#ifndef ENOENT
#define ENOENT 2
#endif

/* At most one HT_EV_WAKEUP per (waker, wakee) pair this often. */
const volatile __u64 wakeup_emit_ns = 10000000;

struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 16384);
  __type(key, struct ht_wakeup_key);
  __type(value, struct ht_wakeup_count);
} wakeups SEC(".maps");

/* `btf`: p is a BTF-typed pointer (tp_btf twin), read with plain loads; a
 * constant after inlining. This runs on every wakeup of the machine. */
static __always_inline void on_waking(void* ctx, struct task_struct* p, bool btf) {
  __u32 wakee_tgid = btf ? p->tgid : BPF_CORE_READ(p, tgid);
  if (!ht_traced_tgid(wakee_tgid)) return;

  __u64 id = bpf_get_current_pid_tgid();
  struct ht_wakeup_key key = {};
  key.waker_tgid = id >> 32;
  key.waker_tid = (__u32)id;
  key.wakee_tid = btf ? p->pid : BPF_CORE_READ(p, pid);
  __u64 now = bpf_ktime_get_ns();

  bool emit = false;
  struct ht_wakeup_count* c = bpf_map_lookup_elem(&wakeups, &key);
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
    bpf_map_update_elem(&wakeups, &key, &fresh, BPF_NOEXIST);
    emit = true;
  }
  if (!emit) return;

  struct ht_wakeup_event* e = ht_reserve(HT_EV_WAKEUP, sizeof(*e));
  if (!e) return;
  /* ht_reserve filled in the current task (the waker); the header is the wakee's. */
  __builtin_memcpy(e->waker_comm, e->hdr.comm, sizeof(e->waker_comm));
  e->waker_tgid = key.waker_tgid;
  e->waker_tid = key.waker_tid;
  e->hdr.tgid = wakee_tgid;
  e->hdr.tid = key.wakee_tid;
  BPF_CORE_READ_STR_INTO(&e->hdr.comm, p, comm);
  /* Walked only for the sampled records (~1 us each): the folded export puts
   * the waker's stacks after the wakee's, offwaketime-style. No user stack
   * for the idle task, the usual waker from interrupt context. */
  e->waker_kstack_id = bpf_get_stackid(ctx, &stacks, 0);
  e->waker_ustack_id = key.waker_tgid ? bpf_get_stackid(ctx, &stacks, BPF_F_USER_STACK) : -ENOENT;
  ht_submit(e);
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

char LICENSE[] SEC("license") = "Dual BSD/GPL";
