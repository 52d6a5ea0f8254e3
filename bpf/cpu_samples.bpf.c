// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * On-CPU samples: userspace opens a software cpu-clock perf event per online
 * CPU at LiveOptions::sample_hz (freq mode) and attaches cpu_sample to each.
 * When the task the timer interrupted is in a traced process, one
 * HT_EV_CPU_SAMPLE is streamed with its kernel stack id (shared map) and its
 * user stack (frame-pointer walk, copied into the record); userspace then
 * reads the thread's Python stack from outside (userspace/collect/cpu_sampler).
 * Every other task -- the idle task included -- costs one hash lookup.
 */
#include "vmlinux.h"

#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "live_maps.bpf.h"

SEC("perf_event")
int cpu_sample(struct bpf_perf_event_data* ctx) {
  __u64 id = bpf_get_current_pid_tgid();
  __u32 tgid = id >> 32;
  if (!tgid || !ht_traced_tgid(tgid)) return 0;

  struct ht_cpu_sample_event* e = ht_reserve(HT_EV_CPU_SAMPLE, sizeof(*e));
  if (!e) return 0;
  e->cpu = bpf_get_smp_processor_id();
  e->pad = 0;
  /* The interrupted context's stacks (the perf event's registers): no
   * kernel stack when it was in user mode. */
  e->kstack_id = ht_stackid(ctx, 0);
  long n = bpf_get_stack(ctx, e->ustack, sizeof(e->ustack), BPF_F_USER_STACK);
  e->ustack_len = n > 0 ? (__u32)(n / sizeof(__u64)) : 0;
  /* The kernel's own wakeup rule (flags 0): the consumer is woken when it
   * had caught up -- asleep in epoll -- so it reads the thread's Python stack
   * while the thread is (likely) still where the sample found it; one that is
   * draining a stream takes the record with the rest, <= 1 ms later. A forced
   * wakeup per sample cost the consumer 2.5% of a core at 100 Hz on a torch
   * job, more than the Python walks themselves (docs/benchmarks.md). */
  bpf_ringbuf_submit(e, 0);
  ht_count(HT_CNT_EVENTS);
  return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
