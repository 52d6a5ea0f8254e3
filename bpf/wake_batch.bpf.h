/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The wakee's current wake batch (bpf/sched.bpf.c says how batches count
 * wakeups), in task storage: its waker is the thread's latest waker. The
 * syscall dispatcher reads it to name who ended a short wait
 * (short_waits.bpf.h). Shared between the two objects: the first one loaded
 * creates the map, the other reuses its fd (live_tracer.cpp, SharedMaps).
 */
#ifndef HANGTRACE_WAKE_BATCH_BPF_H
#define HANGTRACE_WAKE_BATCH_BPF_H

#include "hangtrace/abi.h"

struct wake_batch {
  __u32 waker_tgid;
  __u32 waker_tid;
  __u64 pending;     /* wakeups in this batch not yet in `wakeups` */
  __u64 since_ns;    /* bpf_ktime_get_ns() when the batch began */
  __u64 since_clock; /* waker_clock() then */
  __u64 last_clock;  /* ... and at its latest wakeup */
  char waker_comm[HT_COMM_LEN];
};

struct {
  __uint(type, BPF_MAP_TYPE_TASK_STORAGE);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, int);
  __type(value, struct wake_batch);
} wake_batches SEC(".maps");

#endif /* HANGTRACE_WAKE_BATCH_BPF_H */
