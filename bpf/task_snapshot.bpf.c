// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * One pass over the threads of the traced processes: scheduler state, time off
 * CPU, kernel stack and saved user registers, one struct ht_task_record per
 * thread, written to the iterator's seq_file (read() by task_iter.cpp). Also
 * the daemon's two passes: the brief one over the traced threads, and the
 * identity one over every process of the host.
 */
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "hangtrace/abi.h"
#include "sched_clock.bpf.h"
#include "syscall_regs.bpf.h"

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 1); /* sized from userspace before load */
  __type(key, __u32);
  __type(value, __u8);
} target_tgids SEC(".maps");

/* The record does not fit on the 512-byte BPF stack. */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct ht_task_record);
} scratch SEC(".maps");

/*
 * Every register DWARF CFI may name, so userspace can unwind code built
 * without frame pointers: a CFA can be rsp-relative anywhere and callee-saved
 * registers (rbx, r12..r15) hold values that caller frames' CFI refers to.
 * Called only after a probe read of the same pt_regs succeeded.
 */
static __always_inline void fill_unwind_regs(struct pt_regs* regs, struct ht_task_record* rec) {
#if defined(bpf_target_x86)
  rec->user_regs[0] = BPF_CORE_READ(regs, ax);
  rec->user_regs[1] = BPF_CORE_READ(regs, dx);
  rec->user_regs[2] = BPF_CORE_READ(regs, cx);
  rec->user_regs[3] = BPF_CORE_READ(regs, bx);
  rec->user_regs[4] = BPF_CORE_READ(regs, si);
  rec->user_regs[5] = BPF_CORE_READ(regs, di);
  rec->user_regs[6] = BPF_CORE_READ(regs, bp);
  rec->user_regs[7] = BPF_CORE_READ(regs, sp);
  rec->user_regs[8] = BPF_CORE_READ(regs, r8);
  rec->user_regs[9] = BPF_CORE_READ(regs, r9);
  rec->user_regs[10] = BPF_CORE_READ(regs, r10);
  rec->user_regs[11] = BPF_CORE_READ(regs, r11);
  rec->user_regs[12] = BPF_CORE_READ(regs, r12);
  rec->user_regs[13] = BPF_CORE_READ(regs, r13);
  rec->user_regs[14] = BPF_CORE_READ(regs, r14);
  rec->user_regs[15] = BPF_CORE_READ(regs, r15);
  rec->user_regs[16] = BPF_CORE_READ(regs, ip);
  rec->user_machine = HT_EM_X86_64;
  rec->user_nregs = HT_USER_REGS_X86_64;
#elif defined(bpf_target_arm64)
  /* x0..x30, sp and pc sit back to back in pt_regs (struct user_pt_regs). */
  if (bpf_core_read(rec->user_regs, 31 * sizeof(__u64), &regs->regs) != 0) return;
  rec->user_regs[31] = BPF_CORE_READ(regs, sp);
  rec->user_regs[32] = BPF_CORE_READ(regs, pc);
  rec->user_machine = HT_EM_AARCH64;
  rec->user_nregs = HT_USER_REGS_ARM64;
#endif
}

/* The six syscall arguments from the saved registers. */
static __always_inline void read_syscall_args(struct pt_regs* regs, __u64* args) {
  args[0] = HT_SC_ARG1(regs, false);
  args[1] = HT_SC_ARG2(regs, false);
  args[2] = HT_SC_ARG3(regs, false);
  args[3] = HT_SC_ARG4(regs, false);
  args[4] = HT_SC_ARG5(regs, false);
  args[5] = HT_SC_ARG6(regs, false);
}

/* on_cpu only exists on CONFIG_SMP kernels. */
static __always_inline bool ht_task_on_cpu(struct task_struct* t) {
  if (bpf_core_field_exists(t->on_cpu)) return BPF_CORE_READ(t, on_cpu) != 0;
  return false;
}

/*
 * Whether t waits for nothing but a CPU (on one, or runnable and queued:
 * its last_arrival then says nothing about a wait); else how long it has
 * been off CPU, with "now" from the reading task's own bookkeeping (same rq
 * clock, at most one tick stale) rather than bpf_ktime_get_ns(), which is a
 * different clock; exec_start is clock_task (steal-skewed).
 */
static __always_inline bool task_running(struct task_struct* t, __u32 state, __u64* off_cpu_ns) {
  if (ht_task_on_cpu(t) || (state == HT_TASK_STATE_RUNNING && BPF_CORE_READ(t, on_rq) != 0)) return true;
  struct task_struct* cur = bpf_get_current_task_btf();
  __u64 since = ht_task_sched_clock(t);
  __u64 now = ht_task_sched_clock(cur);
  if (since && now > since) *off_cpu_ns = now - since;
  return false;
}

static __always_inline void fill_user_regs(struct task_struct* t, struct ht_task_record* rec) {
  /* A kthread's pt_regs slot holds nothing it ever executed in user mode. */
  if (rec->task_flags & HT_PF_KTHREAD) return;
  struct pt_regs* regs = (struct pt_regs*)bpf_task_pt_regs(t);
  if (!regs) return;
  /*
   * A zombie's stack (where pt_regs live) is already freed. Probe reads
   * then fail and BPF_CORE_READ would quietly yield zeros, which read as
   * "in read(0, NULL, 0)"; so check one read and trust the rest only if
   * it worked (they are all on the same page). orig_ax is -1 outside a
   * syscall.
   */
  __s64 nr;
  if (HT_SC_NR_READ(&nr, regs) != 0) return;
  rec->syscall_nr = nr;
  rec->user_ip = PT_REGS_IP_CORE(regs);
  rec->user_sp = PT_REGS_SP_CORE(regs);
  rec->user_bp = PT_REGS_FP_CORE(regs);
  fill_unwind_regs(regs, rec);
  read_syscall_args(regs, rec->syscall_args);
  rec->sample_flags |= HT_TASK_HAS_USER_REGS;
}

SEC("iter/task")
int ht_task_snapshot(struct bpf_iter__task* ctx) {
  struct seq_file* seq = ctx->meta->seq;
  struct task_struct* t = ctx->task;
  __u32 zero = 0;

  if (!t) /* the final call after the last task */
    return 0;

  __u32 tgid = BPF_CORE_READ(t, tgid);
  if (!bpf_map_lookup_elem(&target_tgids, &tgid)) return 0;

  struct ht_task_record* rec = bpf_map_lookup_elem(&scratch, &zero);
  if (!rec) return 0;
  /* Reused per-CPU slot: stale frames or regs must not leak into this task. */
  __builtin_memset(rec, 0, sizeof(*rec));

  rec->abi_version = HT_ABI_VERSION;
  rec->tid = BPF_CORE_READ(t, pid);
  rec->tgid = tgid;
  rec->ppid = BPF_CORE_READ(t, real_parent, tgid);
  rec->state = BPF_CORE_READ(t, __state);
  rec->exit_state = BPF_CORE_READ(t, exit_state);
  rec->task_flags = BPF_CORE_READ(t, flags);
  rec->nvcsw = BPF_CORE_READ(t, nvcsw);
  rec->nivcsw = BPF_CORE_READ(t, nivcsw);
  rec->sum_exec_ns = BPF_CORE_READ(t, se.sum_exec_runtime);
  rec->start_boottime_ns = BPF_CORE_READ(t, start_boottime);
  rec->syscall_nr = -1;
  BPF_CORE_READ_STR_INTO(&rec->comm, t, comm);

  if (rec->task_flags & HT_PF_KTHREAD) rec->sample_flags |= HT_TASK_KTHREAD;
  if (rec->task_flags & HT_PF_EXITING) rec->sample_flags |= HT_TASK_EXITING;

  if (task_running(t, rec->state, &rec->off_cpu_ns)) rec->sample_flags |= HT_TASK_ON_CPU;

  long n = bpf_get_task_stack(t, rec->kstack, sizeof(rec->kstack), 0);
  rec->kstack_frames = n < 0 ? (__s32)n : (__s32)(n / sizeof(__u64));

  fill_user_regs(t, rec);

  bpf_seq_write(seq, rec, sizeof(*rec));
  return 0;
}

/*
 * The brief pass (the daemon's sampled steady state, once a second): state,
 * time off CPU, context switches and the syscall a blocked thread is in --
 * ~100 bytes a thread, no stack walk. Same filter and clock as above.
 */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct ht_task_brief);
} brief_scratch SEC(".maps");

SEC("iter/task")
int ht_task_brief(struct bpf_iter__task* ctx) {
  struct seq_file* seq = ctx->meta->seq;
  struct task_struct* t = ctx->task;
  __u32 zero = 0;
  if (!t) return 0;
  __u32 tgid = BPF_CORE_READ(t, tgid);
  if (!bpf_map_lookup_elem(&target_tgids, &tgid)) return 0;
  __u32 flags = BPF_CORE_READ(t, flags);
  if (flags & (HT_PF_KTHREAD | HT_PF_EXITING)) return 0;
  struct ht_task_brief* rec = bpf_map_lookup_elem(&brief_scratch, &zero);
  if (!rec) return 0;
  __builtin_memset(rec, 0, sizeof(*rec));
  rec->abi_version = HT_ABI_VERSION;
  rec->tid = BPF_CORE_READ(t, pid);
  rec->tgid = tgid;
  rec->state = BPF_CORE_READ(t, __state);
  rec->nvcsw = BPF_CORE_READ(t, nvcsw);
  rec->sum_exec_ns = BPF_CORE_READ(t, se.sum_exec_runtime);
  rec->syscall_nr = -1;
  if (task_running(t, rec->state, &rec->off_cpu_ns)) {
    rec->sample_flags |= HT_TASK_ON_CPU;
  } else {
    struct pt_regs* regs = (struct pt_regs*)bpf_task_pt_regs(t);
    __s64 nr;
    /* As in fill_user_regs: trust the registers only if one read worked. */
    if (regs && HT_SC_NR_READ(&nr, regs) == 0) {
      rec->syscall_nr = nr;
      read_syscall_args(regs, rec->syscall_args);
      rec->sample_flags |= HT_TASK_HAS_USER_REGS;
    }
  }
  bpf_seq_write(seq, rec, sizeof(*rec));
  return 0;
}

/*
 * The identity pass (the daemon's scan for jobs, every --scan-every): every
 * process of the host, not only the traced ones -- what /proc/PID/stat says
 * of who it is (parent, start time, comm, where its stack and argv are), one
 * 64-byte record each instead of a stat read each.
 */
SEC("iter/task")
int ht_process_identity(struct bpf_iter__task* ctx) {
  struct seq_file* seq = ctx->meta->seq;
  struct task_struct* t = ctx->task;
  if (!t) return 0;
  __u32 tgid = BPF_CORE_READ(t, tgid);
  if (BPF_CORE_READ(t, pid) != tgid) return 0; /* one record per process: its leader's */
  __u32 flags = BPF_CORE_READ(t, flags);
  struct mm_struct* mm = BPF_CORE_READ(t, mm);
  if ((flags & HT_PF_KTHREAD) || !mm) return 0; /* a kernel thread, a zombie, an exiting leader */
  struct ht_process_identity rec = {};
  rec.abi_version = HT_ABI_VERSION;
  rec.pid = tgid;
  rec.ppid = BPF_CORE_READ(t, real_parent, tgid);
  rec.task_flags = flags;
  rec.start_boottime_ns = BPF_CORE_READ(t, start_boottime);
  rec.start_stack = BPF_CORE_READ(mm, start_stack);
  rec.arg_start = BPF_CORE_READ(mm, arg_start);
  rec.arg_end = BPF_CORE_READ(mm, arg_end);
  BPF_CORE_READ_INTO(&rec.comm, t, comm);
  bpf_seq_write(seq, &rec, sizeof(rec));
  return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
