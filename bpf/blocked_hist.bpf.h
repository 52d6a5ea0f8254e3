/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * In-kernel blocked-time histograms, run by the syscall dispatcher
 * (bpf/syscalls.bpf.c) for every call of a traced task that slept, however
 * short: the daemon's steady state needs the distribution of waits by
 * process and kind without one record per wait. A per-CPU hash: each CPU
 * adds to its own copy with plain increments; userspace sums them.
 */
#ifndef HANGTRACE_BLOCKED_HIST_BPF_H
#define HANGTRACE_BLOCKED_HIST_BPF_H

#include "call_state.bpf.h"

const volatile bool hist_blocked = false;

/* Sized from userspace before load. */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_HASH);
  __uint(max_entries, 16384);
  __type(key, struct ht_hist_key);
  __type(value, struct ht_hist_value);
} blocked_hist SEC(".maps");

/* floor(log2(v)) for v > 0, without loops the verifier must bound. */
static __always_inline __u32 hist_log2(__u64 v) {
  __u32 r = 0, shift;
  shift = (v > 0xffffffffull) << 5;
  v >>= shift;
  r |= shift;
  shift = (v > 0xffff) << 4;
  v >>= shift;
  r |= shift;
  shift = (v > 0xff) << 3;
  v >>= shift;
  r |= shift;
  shift = (v > 0xf) << 2;
  v >>= shift;
  r |= shift;
  shift = (v > 0x3) << 1;
  v >>= shift;
  r |= shift;
  r |= (v >> 1);
  return r;
}

/* `wait_kind`: enum ht_wait_kind, from the dispatcher's classification. */
static __always_inline void hist_add_blocked(struct task_struct* t, __u8 wait_kind, __u64 duration_ns) {
  struct ht_hist_key key = {};
  key.tgid = t->tgid;
  key.wait_kind = wait_kind;
  key.main_thread = t->pid == t->tgid;
  __u64 us = duration_ns / 1000;
  __u32 bucket = us ? hist_log2(us) : 0;
  if (bucket >= HT_HIST_BUCKETS) bucket = HT_HIST_BUCKETS - 1;
  struct ht_hist_value* v = bpf_map_lookup_elem(&blocked_hist, &key);
  if (!v) {
    struct ht_hist_value zero = {};
    bpf_map_update_elem(&blocked_hist, &key, &zero, BPF_NOEXIST);
    v = bpf_map_lookup_elem(&blocked_hist, &key);
    if (!v) return;
  }
  v->count[bucket & (HT_HIST_BUCKETS - 1)]++;
  v->sum_ns += duration_ns;
}

#endif /* HANGTRACE_BLOCKED_HIST_BPF_H */
