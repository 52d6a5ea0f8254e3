// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * GPU activity from hangtrace's CUPTI injection library (userspace/cupti/):
 * its USDT probe hangtrace:gpu_activity passes the address of a struct
 * ht_gpu_activity in the firing process, copied here into the ring buffer as
 * an ht_gpu_activity_event. Userspace attaches it per library file (any
 * process), so the traced set is checked here.
 */
#include "vmlinux.h"

#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/usdt.bpf.h>

#include "live_maps.bpf.h"

SEC("usdt")
int cupti_gpu_activity(struct pt_regs* ctx) {
  if (!ht_current_traced()) return 0;
  long addr = 0;
  if (bpf_usdt_arg(ctx, 0, &addr) || !addr) return 0;
  struct ht_gpu_activity_event* e = ht_reserve(HT_EV_GPU_ACTIVITY, sizeof(*e));
  if (!e) return 0;
  if (bpf_probe_read_user(&e->act, sizeof(e->act), (const void*)addr)) {
    /* Not resident (the library's record is on its stack, so hardly ever). */
    bpf_ringbuf_discard(e, 0);
    return 0;
  }
  ht_submit(e);
  return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
