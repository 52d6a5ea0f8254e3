/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Maps and helpers shared by every live-tracing program (bpf/<concern>.bpf.c).
 * Each concern is its own BPF object; userspace creates these maps once and
 * hands the same fds to every object (bpf_map__reuse_fd) before load, so all
 * concerns filter on one traced set and write into one ring buffer.
 */
#ifndef HANGTRACE_LIVE_MAPS_BPF_H
#define HANGTRACE_LIVE_MAPS_BPF_H

#include "hangtrace/abi.h"
#include "uapi.bpf.h"

/* Sized from userspace before load (bpf_map__set_max_entries). */
struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 4 << 20);
} events SEC(".maps");

/* The traced processes: the target, its descendants (followed on fork), and
 * whatever userspace adds. Key: tgid. */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 4096);
  __type(key, __u32);
  __type(value, __u8);
} traced_tgids SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, HT_CNT_MAX);
  __type(key, __u32);
  __type(value, __u64);
} counters SEC(".maps");

/* Created by userspace (live_tracer.cpp, which says why this size). */
struct {
  __uint(type, BPF_MAP_TYPE_STACK_TRACE);
  __uint(max_entries, 16384);
  __uint(key_size, sizeof(__u32));
  __uint(value_size, 127 * sizeof(__u64));
} stacks SEC(".maps");

/* Wake userspace only when this much is queued; it also polls on a timer,
 * so a quiet job's events still arrive within the poll interval. */
const volatile __u64 ht_wakeup_bytes = 64 << 10;

/* false (the daemon's steady state): wakeups are only counted in kernel
 * (sched's `wakeups`), futex wakes not reported; nothing streamed per wake. */
const volatile bool ht_stream_wakes = true;

static __always_inline void ht_count(__u32 idx) {
  __u64* v = bpf_map_lookup_elem(&counters, &idx);
  if (v) (*v)++;
}

/* bpf_get_stackid into `stacks`; a stack whose bucket another stack holds
 * (-EEXIST) is lost for the whole run, and counted so the report says so. */
static __always_inline __s32 ht_stackid(void* ctx, __u64 flags) {
  __s32 id = bpf_get_stackid(ctx, &stacks, flags);
  if (id == -EEXIST) ht_count(HT_CNT_STACKS_LOST);
  return id;
}

static __always_inline bool ht_traced_tgid(__u32 tgid) {
  return bpf_map_lookup_elem(&traced_tgids, &tgid) != NULL;
}

static __always_inline bool ht_current_traced(void) {
  return ht_traced_tgid(bpf_get_current_pid_tgid() >> 32);
}

/* Reserves a record and fills its header for the current task, stamped
 * `now_ns`; NULL (and a counted drop) when the ring buffer is full. */
static __always_inline void* ht_reserve_at(__u32 type, __u32 size, __u64 now_ns) {
  struct ht_event_header* h = bpf_ringbuf_reserve(&events, size, 0);
  if (!h) {
    ht_count(HT_CNT_DROPPED);
    return NULL;
  }
  __u64 id = bpf_get_current_pid_tgid();
  h->type = type;
  h->size = size;
  h->ts_ns = now_ns;
  h->tgid = id >> 32;
  h->tid = (__u32)id;
  /* Two plain loads from the task instead of a helper call: this runs
   * once per record (TASK_COMM_LEN is 16, NUL-padded by the kernel). */
  struct task_struct* task = bpf_get_current_task_btf();
  __u64* to = (__u64*)h->comm;
  to[0] = *(__u64*)&task->comm[0];
  to[1] = *(__u64*)&task->comm[8];
  return h;
}

static __always_inline void* ht_reserve(__u32 type, __u32 size) {
  return ht_reserve_at(type, size, bpf_ktime_get_ns());
}

/* Wakes the consumer once, when this record takes the queue across
 * ht_wakeup_bytes: a consumer that is behind is already awake, and a wakeup
 * (an IPI) per record would only slow both sides. `size` is the record's
 * size as reserved. */
static __always_inline void ht_submit_sized(void* rec, __u32 size) {
  __u64 queued = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
  bool crossing = queued >= ht_wakeup_bytes && queued < ht_wakeup_bytes + size + 8;
  bpf_ringbuf_submit(rec, crossing ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
  ht_count(HT_CNT_EVENTS);
}

#define ht_submit(rec) ht_submit_sized((rec), sizeof(*(rec)))

#endif /* HANGTRACE_LIVE_MAPS_BPF_H */
