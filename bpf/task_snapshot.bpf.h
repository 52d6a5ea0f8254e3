/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* BPF-side helpers for task_snapshot.bpf.c (CO-RE reads that need care). */
#ifndef HANGTRACE_TASK_SNAPSHOT_BPF_H
#define HANGTRACE_TASK_SNAPSHOT_BPF_H

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

/* Before 5.14 the field was `long state`. */
struct task_struct___pre_5_14 {
  long state;
} __attribute__((preserve_access_index));

static __always_inline __u32 ht_task_state(struct task_struct* t) {
  if (bpf_core_field_exists(t->__state)) return BPF_CORE_READ(t, __state);
  return (__u32)BPF_CORE_READ((struct task_struct___pre_5_14*)t, state);
}

/* on_cpu only exists on CONFIG_SMP kernels. */
static __always_inline bool ht_task_on_cpu(struct task_struct* t) {
  if (bpf_core_field_exists(t->on_cpu)) return BPF_CORE_READ(t, on_cpu) != 0;
  return false;
}

/*
 * Syscall number and arguments as the syscall entry saved them. libbpf 1.1
 * has no PT_REGS_PARM6 nor a syscall-number accessor, so these are per arch.
 */
#if defined(bpf_target_x86)
#define HT_SYSCALL_NR_CORE_INTO(dst, r) bpf_core_read(dst, sizeof(*(dst)), &(r)->orig_ax)
#define HT_SYSCALL_ARG4_CORE(r) BPF_CORE_READ(r, r10)
#define HT_SYSCALL_ARG5_CORE(r) BPF_CORE_READ(r, r8)
#define HT_SYSCALL_ARG6_CORE(r) BPF_CORE_READ(r, r9)
#define HT_SYSCALL_ARG1_CORE(r) PT_REGS_PARM1_CORE(r)
#elif defined(bpf_target_arm64)
/* x0 is overwritten by the return value; orig_x0 keeps the first argument. */
#define HT_SYSCALL_NR_CORE_INTO(dst, r) bpf_core_read(dst, sizeof(*(dst)), &(r)->syscallno)
#define HT_SYSCALL_ARG4_CORE(r) BPF_CORE_READ(r, regs[3])
#define HT_SYSCALL_ARG5_CORE(r) BPF_CORE_READ(r, regs[4])
#define HT_SYSCALL_ARG6_CORE(r) BPF_CORE_READ(r, regs[5])
#define HT_SYSCALL_ARG1_CORE(r) BPF_CORE_READ(r, orig_x0)
#else
#error "task_snapshot.bpf.c: syscall register layout unknown for this arch"
#endif

#endif /* HANGTRACE_TASK_SNAPSHOT_BPF_H */
