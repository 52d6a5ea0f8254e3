// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * RSS of traced processes, for the memory-growth finding: kmem/rss_stat
 * fires on every change of an mm's page counters (every fault, every unmap),
 * so the kernel side keeps each process's last streamed RSS and emits a
 * struct ht_rss_event only when RSS moved by rss_step_bytes since then (and
 * once, as a baseline, the first time a process is seen).
 */
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "live_maps.bpf.h"

/* MM_FILEPAGES, MM_ANONPAGES, MM_SHMEMPAGES: the mm counter indexes, an enum
 * of vmlinux.h (include/linux/mm_types_task.h). */

const volatile __u64 rss_step_bytes = 64 << 20;
/* Set from userspace: sysconf(_SC_PAGESIZE) as a shift. */
const volatile __u32 page_shift = 12;

/* Before 6.2 the counters were atomics in struct mm_rss_stat, not an array
 * of percpu_counter. */
struct mm_rss_stat___pre_6_2 {
  atomic_long_t count[4];
} __attribute__((preserve_access_index));

struct mm_struct___pre_6_2 {
  struct mm_rss_stat___pre_6_2 rss_stat;
} __attribute__((preserve_access_index));

/* tgid -> RSS bytes last streamed. */
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 4096);
  __type(key, __u32);
  __type(value, __u64);
} last_rss SEC(".maps");

/* Pages of one counter; percpu_counter.count lags the per-CPU deltas by at
 * most a batch per CPU, which is noise next to rss_step_bytes. */
static __always_inline __u64 mm_pages(struct mm_struct* mm, int member, bool btf) {
  long v;
  struct mm_struct___pre_6_2* old = (void*)mm;
  if (bpf_core_field_exists(old->rss_stat.count)) {
    v = BPF_CORE_READ(old, rss_stat.count[member].counter);
  } else {
    v = btf ? mm->rss_stat[member].count : BPF_CORE_READ(mm, rss_stat[member].count);
  }
  return v > 0 ? (__u64)v : 0;
}

/* Runs on every RSS counter change of the machine (every page fault that maps
 * a page), so the common case -- current changing its own mm, untraced -- is
 * a pointer compare and one hash lookup. */
/* `btf`: mm is a BTF-typed pointer (tp_btf twin), read with plain loads. */
static __always_inline int handle_rss_stat(struct mm_struct* mm, bool btf) {
  struct task_struct* cur = bpf_get_current_task_btf();
  struct task_struct* task;
  __u32 tgid;
  /* Usually current changes its own mm; otherwise (reclaim, exit, another
   * process's pages via process_vm_*), ask the mm who owns it. */
  if ((void*)cur->mm == (void*)mm) {
    task = cur;
    tgid = bpf_get_current_pid_tgid() >> 32;
  } else if (bpf_core_field_exists(mm->owner)) {
    task = BPF_CORE_READ(mm, owner);
    if (!task) return 0;
    tgid = BPF_CORE_READ(task, tgid);
  } else {
    return 0;
  }
  if (!ht_traced_tgid(tgid)) return 0;

  __u64 anon = mm_pages(mm, MM_ANONPAGES, btf) << page_shift;
  __u64 rss = anon + ((mm_pages(mm, MM_FILEPAGES, btf) + mm_pages(mm, MM_SHMEMPAGES, btf)) << page_shift);

  __u64* last = bpf_map_lookup_elem(&last_rss, &tgid);
  if (last) {
    __u64 moved = rss > *last ? rss - *last : *last - rss;
    if (moved < rss_step_bytes) return 0;
    /* Racing threads may both emit; the aggregator keeps the latest. */
    *last = rss;
  } else {
    bpf_map_update_elem(&last_rss, &tgid, &rss, BPF_ANY);
  }

  struct ht_rss_event* e = ht_reserve(HT_EV_RSS, sizeof(*e));
  if (!e) return 0;
  e->hdr.tgid = tgid;
  e->hdr.tid = BPF_CORE_READ(task, pid);
  BPF_CORE_READ_STR_INTO(&e->hdr.comm, task, comm);
  e->rss_bytes = rss;
  e->anon_bytes = anon;
  ht_submit(e);
  return 0;
}

SEC("tp_btf/rss_stat")
int BPF_PROG(memory_rss_stat_btf, struct mm_struct* mm, int member) { return handle_rss_stat(mm, true); }

SEC("raw_tp/rss_stat")
int BPF_PROG(memory_rss_stat_raw, struct mm_struct* mm, int member) { return handle_rss_stat(mm, false); }

char LICENSE[] SEC("license") = "Dual BSD/GPL";
