/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The scheduler's clock as a task sees it, read with plain loads from the
 * task (t: a BTF pointer: the iterator's task, current, a tp_btf argument).
 * Used where bpf_ktime_get_ns() would be another clock (the snapshot's
 * off-CPU times) or too dear on a hot path (sched_switch, sys_exit,
 * sched_waking: on kernels with return-thunk mitigations its chain of calls
 * was a third of the sched_switch program).
 */
#ifndef HANGTRACE_SCHED_CLOCK_BPF_H
#define HANGTRACE_SCHED_CLOCK_BPF_H

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>

/*
 * The rq clock value when the task last stopped running: last_arrival is the
 * rq clock when it was last put on a CPU, and sum - prev_sum is how long that
 * stint lasted (prev_sum_exec_runtime is snapshotted when a fair-class task
 * is picked; an RT task's is not, and reads late). For the running task this
 * is "now" as of its last update_curr() -- at most a tick behind; at
 * sched_switch the dequeue has just brought it up to date. Both parts come
 * from rq_clock() (not clock_task), so steal/irq time does not skew the
 * difference between two readings. 0 without CONFIG_SCHED_INFO, or before the
 * task first ran.
 */
static __always_inline __u64 ht_task_sched_clock(struct task_struct* t) {
  if (!bpf_core_field_exists(t->sched_info.last_arrival)) return 0;
  __u64 arrival = t->sched_info.last_arrival;
  if (!arrival) return 0;
  __u64 sum = t->se.sum_exec_runtime, prev = t->se.prev_sum_exec_runtime;
  return arrival + (sum > prev ? sum - prev : 0);
}

#endif /* HANGTRACE_SCHED_CLOCK_BPF_H */
