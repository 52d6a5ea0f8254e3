// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The "process" concern: follows the traced set through fork (every new
 * process of a traced parent becomes traced before it runs its first
 * instruction), and streams the events that end processes: exec, exit with
 * status, signals generated for traced tasks (and who sent them), OOM kills
 * (with the victim's memory cgroup and its limit).
 *
 * Twins: <hook>_btf (tp_btf: typed args, BTF-checked at load) and <hook>_raw
 * (raw_tp: the same args as u64s) share one handler; userspace keeps one of
 * each pair. No classic tracepoints (SEC("tp/...")): they need tracefs event
 * ids, which some kernels and containers do not expose; raw tracepoints
 * attach by name through the bpf syscall alone.
 */
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "live_maps.bpf.h"
#include "uapi.bpf.h"

char LICENSE[] SEC("license") = "GPL";

/* Set from userspace before load. */
const volatile __u32 page_shift = 12;
/* oom:mark_victim's first argument: the victim's task_struct (6.8+:
 * TP_PROTO(struct task_struct *task, uid_t uid)) or, before, its pid. */
const volatile bool mark_victim_has_task = true;

static __always_inline void fill_proc(struct ht_proc_event* e, struct task_struct* task) {
  e->parent_tgid = BPF_CORE_READ(task, real_parent, tgid);
  e->child_tgid = 0;
  e->exit_code = 0;
  e->flags = 0;
}

/* ---- fork: follow new processes of traced parents ------------------------ */

static __always_inline int on_fork(struct task_struct* parent, struct task_struct* child) {
  __u32 ptgid = BPF_CORE_READ(parent, tgid);
  if (!ht_traced_tgid(ptgid)) return 0;
  __u32 cpid = BPF_CORE_READ(child, pid);
  __u32 ctgid = BPF_CORE_READ(child, tgid);
  /* A new thread: its process is traced already. */
  if (cpid != ctgid) return 0;
  __u8 one = 1;
  /* The child cannot have run yet (the tracepoint fires before
   * wake_up_new_task), so nothing it does escapes the filter. */
  if (bpf_map_update_elem(&traced_tgids, &ctgid, &one, BPF_NOEXIST) == 0) ht_count(HT_CNT_TRACED_ADDED);

  struct ht_proc_event* e = ht_reserve(HT_EV_PROC_FORK, sizeof(*e));
  if (!e) return 0;
  e->parent_tgid = ptgid;
  e->child_tgid = ctgid;
  e->exit_code = 0;
  e->flags = 0;
  ht_submit(e);
  return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(sched_process_fork_btf, struct task_struct* parent, struct task_struct* child) {
  return on_fork(parent, child);
}

SEC("raw_tp/sched_process_fork")
int BPF_PROG(sched_process_fork_raw, struct task_struct* parent, struct task_struct* child) {
  return on_fork(parent, child);
}

/* ---- exec and exit: always about current, so raw_tp alone will do ------- */

SEC("raw_tp/sched_process_exec")
int sched_process_exec(void* ctx) {
  if (!ht_current_traced()) return 0;
  struct task_struct* task = (struct task_struct*)bpf_get_current_task();
  struct ht_proc_event* e = ht_reserve(HT_EV_PROC_EXEC, sizeof(*e));
  if (!e) return 0;
  fill_proc(e, task);
  ht_submit(e);
  return 0;
}

SEC("raw_tp/sched_process_exit")
int sched_process_exit(void* ctx) {
  if (!ht_current_traced()) return 0;
  struct task_struct* task = (struct task_struct*)bpf_get_current_task();
  /* do_exit() has already dropped signal->live (atomic_dec_and_test), so 0
   * means this is the group's last thread: the process is gone. That holds
   * on every kernel, unlike the group_dead argument added in 6.x. */
  int live = BPF_CORE_READ(task, signal, live.counter);
  __u32 pid = BPF_CORE_READ(task, pid);
  __u32 tgid = BPF_CORE_READ(task, tgid);
  bool group_dead = live == 0;
  /* Other threads' exits are routine (thread pools); only the leader's and
   * the last thread's say something about the process. */
  if (!group_dead && pid != tgid) return 0;
  struct ht_proc_event* e = ht_reserve(HT_EV_PROC_EXIT, sizeof(*e));
  if (!e) return 0;
  fill_proc(e, task);
  e->exit_code = BPF_CORE_READ(task, exit_code);
  e->flags = group_dead ? HT_PROC_WHOLE_PROCESS : 0;
  /* The tgid stays in traced_tgids: events still queued for it must match,
   * and userspace removes it once the report no longer needs it. */
  ht_submit(e);
  return 0;
}

/* ---- signals generated for traced tasks --------------------------------- */

static __always_inline int on_signal(int sig, struct kernel_siginfo* info, struct task_struct* task,
                                     int result) {
  /* Job control and child bookkeeping, delivered all the time. */
  if (sig == SIGCHLD || sig == SIGWINCH || sig == SIGURG) return 0;
  __u32 tgid = BPF_CORE_READ(task, tgid);
  if (!ht_traced_tgid(tgid)) return 0;
  /* The same decoding the tracepoint does (TP_STORE_SIGINFO): 0 and 1 are
   * the SEND_SIG_NOINFO / SEND_SIG_PRIV markers, not pointers. */
  int code;
  if ((unsigned long)info == 0)
    code = SI_USER;
  else if ((unsigned long)info == 1)
    code = SI_KERNEL;
  else
    code = BPF_CORE_READ(info, si_code);

  struct ht_signal_event* e = ht_reserve(HT_EV_SIGNAL, sizeof(*e));
  if (!e) return 0;
  /* The header is about the receiver; the sender is current. */
  e->sender_tgid = e->hdr.tgid;
  e->sender_tid = e->hdr.tid;
  __builtin_memcpy(e->sender_comm, e->hdr.comm, sizeof(e->sender_comm));
  e->hdr.tgid = tgid;
  e->hdr.tid = BPF_CORE_READ(task, pid);
  bpf_probe_read_kernel_str(e->hdr.comm, sizeof(e->hdr.comm), &task->comm);
  e->sig = sig;
  e->code = code;
  e->result = result;
  e->pad = 0;
  ht_submit(e);
  return 0;
}

SEC("tp_btf/signal_generate")
int BPF_PROG(signal_generate_btf, int sig, struct kernel_siginfo* info, struct task_struct* task, int group,
             int result) {
  return on_signal(sig, info, task, result);
}

SEC("raw_tp/signal_generate")
int BPF_PROG(signal_generate_raw, int sig, struct kernel_siginfo* info, struct task_struct* task, int group,
             int result) {
  return on_signal(sig, info, task, result);
}

/* ---- OOM kills ----------------------------------------------------------- */

/* rss_stat is a percpu_counter array (6.2+); .count is the value the
 * kernel's own get_mm_counter() and the tracepoint report. A macro so the
 * index stays a constant for the CO-RE relocation. */
#define MM_COUNTER_PAGES(mm, member)                      \
  ({                                                      \
    __s64 _v = BPF_CORE_READ(mm, rss_stat[member].count); \
    _v > 0 ? (__u64)_v : 0;                               \
  })

/* `t` is the victim when the kernel passes it; else only its tid is known
 * (before 6.8), and only a main thread can be matched to a traced tgid. */
static __always_inline int on_victim(struct task_struct* t, __u32 tid, __u32 uid) {
  __u32 tgid = t ? BPF_CORE_READ(t, tgid) : tid;
  if (!ht_traced_tgid(tgid)) return 0;

  struct ht_oom_event* e = ht_reserve(HT_EV_OOM_VICTIM, sizeof(*e));
  if (!e) return 0;
  /* The header is about the victim; current is whoever hit the limit. */
  e->hdr.tgid = tgid;
  e->hdr.tid = tid;
  e->total_vm_kb = 0;
  e->anon_rss_kb = 0;
  e->file_rss_kb = 0;
  e->shmem_rss_kb = 0;
  e->uid = uid;
  e->oom_score_adj = 0;
  e->memcg_id = 0;
  e->memcg_limit_pages = 0;
  if (t) {
    bpf_probe_read_kernel_str(e->hdr.comm, sizeof(e->hdr.comm), &t->comm);
    e->oom_score_adj = BPF_CORE_READ(t, signal, oom_score_adj);
    struct mm_struct* mm = BPF_CORE_READ(t, mm);
    __u32 kb_shift = page_shift - 10;
    if (mm) {
      e->total_vm_kb = BPF_CORE_READ(mm, total_vm) << kb_shift;
      e->anon_rss_kb = MM_COUNTER_PAGES(mm, MM_ANONPAGES) << kb_shift;
      e->file_rss_kb = MM_COUNTER_PAGES(mm, MM_FILEPAGES) << kb_shift;
      e->shmem_rss_kb = MM_COUNTER_PAGES(mm, MM_SHMEMPAGES) << kb_shift;
    }
    if (bpf_core_enum_value_exists(enum cgroup_subsys_id, memory_cgrp_id)) {
      int id = bpf_core_enum_value(enum cgroup_subsys_id, memory_cgrp_id);
      struct cgroup_subsys_state* css = NULL;
      struct css_set* cset = BPF_CORE_READ(t, cgroups);
      if (cset && id >= 0 && id < CGROUP_SUBSYS_COUNT) bpf_core_read(&css, sizeof(css), &cset->subsys[id]);
      if (css) {
        /* The kernfs id is the cgroup directory's inode number. */
        e->memcg_id = BPF_CORE_READ(css, cgroup, kn, id);
        /* css is mem_cgroup's first member; memory.max is the limit
         * (v1 limit_in_bytes, v2 memory.max) in pages. */
        struct mem_cgroup* memcg = (struct mem_cgroup*)css;
        e->memcg_limit_pages = BPF_CORE_READ(memcg, memory.max);
      }
    }
  }
  ht_submit(e);
  return 0;
}

SEC("tp_btf/mark_victim")
int BPF_PROG(mark_victim_btf, struct task_struct* task, uid_t uid) {
  return on_victim(task, BPF_CORE_READ(task, pid), uid);
}

SEC("raw_tp/mark_victim")
int mark_victim_raw(struct bpf_raw_tracepoint_args* ctx) {
  if (mark_victim_has_task) {
    struct task_struct* t = (struct task_struct*)ctx->args[0];
    return on_victim(t, BPF_CORE_READ(t, pid), (__u32)ctx->args[1]);
  }
  return on_victim(NULL, (__u32)ctx->args[0], 0);
}
