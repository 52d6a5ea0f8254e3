// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Host-side CUDA driver and NCCL calls of traced tasks, from uprobes on
 * libcuda and libnccl (userspace/collect/live_gpu.cpp attaches them to the
 * libraries the traced processes map). One entry and one return program
 * serve every function: the attach cookie (HT_GPU_COOKIE) says which
 * function it is and where its arguments are.
 *
 * The uprobes are attached for every process mapping the library, so the
 * first thing each program does is leave untraced tasks alone.
 *
 * Per thread, `gpu_threads` keeps what a hang needs and no record carries:
 * the call it is in right now (a cuCtxSynchronize that never returns sends
 * nothing), its last launch and its NCCL call count. Records go out when a
 * call returns: host waits that lasted ht_min_block_ns, and every NCCL
 * transfer (a rank's sequence of collectives is what pairs it with its peers).
 */
#include "vmlinux.h"

#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "live_maps.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

const volatile __u64 ht_min_block_ns = 5000000;

/* Key: tid. Sized from userspace before load. */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 16384);
  __type(key, __u32);
  __type(value, struct ht_gpu_thread);
} gpu_threads SEC(".maps");

/* As gpu_fn_is_* in userspace/core/gpu.cpp. */
static __always_inline bool fn_is_launch(__u32 fn) {
  return fn == HT_GPU_LAUNCH_KERNEL || fn == HT_GPU_LAUNCH_KERNEL_EX || fn == HT_GPU_LAUNCH_COOPERATIVE;
}

static __always_inline bool fn_is_host_wait(__u32 fn) {
  return fn == HT_GPU_CTX_SYNCHRONIZE || fn == HT_GPU_STREAM_SYNCHRONIZE || fn == HT_GPU_EVENT_SYNCHRONIZE ||
         fn == HT_GPU_MEMCPY || fn == HT_GPU_MEMSET;
}

static __always_inline bool fn_is_nccl_transfer(__u32 fn) {
  return fn >= HT_GPU_NCCL_ALL_REDUCE && fn <= HT_GPU_NCCL_RECV;
}

/* Argument `n` (1-based) at function entry; 0 for n == 0. */
static __always_inline __u64 call_arg(struct pt_regs* ctx, __u32 n) {
  switch (n) {
    case 0:
      return 0;
    case 1:
      return PT_REGS_PARM1(ctx);
    case 2:
      return PT_REGS_PARM2(ctx);
    case 3:
      return PT_REGS_PARM3(ctx);
    case 4:
      return PT_REGS_PARM4(ctx);
    case 5:
      return PT_REGS_PARM5(ctx);
#if defined(__TARGET_ARCH_arm64)
    case 6:
      return ((struct user_pt_regs*)ctx)->regs[5];
    case 7:
      return ((struct user_pt_regs*)ctx)->regs[6];
    case 8:
      return ((struct user_pt_regs*)ctx)->regs[7];
  }
  /* AAPCS64: x0..x7, then the stack, the ninth argument at sp (the return
   * address is in the link register, not on the stack). */
  __u64 v = 0;
  bpf_probe_read_user(&v, sizeof(v), (void*)(PT_REGS_SP(ctx) + 8 * (n - 9)));
  return v;
#else
    case 6:
      return ctx->r9; /* this libbpf's bpf_tracing.h stops at PT_REGS_PARM5 */
  }
  /* SysV x86_64: six in registers, then the stack; at entry sp points at the
   * return address, so the seventh argument is at sp + 8. */
  __u64 v = 0;
  bpf_probe_read_user(&v, sizeof(v), (void*)(PT_REGS_SP(ctx) + 8 * (n - 6)));
  return v;
#endif
}

static __always_inline __s32 signed_arg(struct pt_regs* ctx, __u32 n) {
  return n ? (__s32)call_arg(ctx, n) : -1;
}

static __always_inline __u64 stream_arg(struct pt_regs* ctx, __u64 cookie) {
  if (!(cookie & HT_GPU_COOKIE_STREAM_IN_CONFIG)) return call_arg(ctx, HT_GPU_COOKIE_ARG(cookie, 16));
  /* cuLaunchKernelEx(const CUlaunchConfig* config, ...): config->hStream. */
  __u64 config = PT_REGS_PARM1(ctx), stream = 0;
  if (config)
    bpf_probe_read_user(&stream, sizeof(stream), (void*)(config + HT_CU_LAUNCH_CONFIG_STREAM_OFFSET));
  return stream;
}

/* A call's return address at its entry (before the return probe replaces
 * it): on the stack on x86_64, in the link register on arm64. */
static __always_inline __u64 entry_return_address(struct pt_regs* ctx) {
#if defined(__TARGET_ARCH_arm64)
  return ((struct user_pt_regs*)ctx)->regs[30];
#else
  __u64 ret = 0;
  bpf_probe_read_user(&ret, sizeof(ret), (void*)PT_REGS_SP(ctx));
  return ret;
#endif
}

/* The calling thread's state, created on its first call (or taken over from
 * an exited thread whose tid this one reuses). */
static __always_inline struct ht_gpu_thread* thread_state(__u32 tid, __u32 tgid) {
  struct ht_gpu_thread* t = bpf_map_lookup_elem(&gpu_threads, &tid);
  if (t && t->tgid == tgid) return t;
  struct ht_gpu_thread fresh = {};
  fresh.tgid = tgid;
  fresh.last_collective_datatype = -1;
  fresh.in_datatype = -1;
  fresh.in_peer = -1;
  fresh.in_ustack_id = -1;
  if (bpf_map_update_elem(&gpu_threads, &tid, &fresh, BPF_ANY) != 0) return NULL;
  return bpf_map_lookup_elem(&gpu_threads, &tid);
}

SEC("uprobe")
int gpu_call_enter(struct pt_regs* ctx) {
  if (!ht_current_traced()) return 0;
  __u64 id = bpf_get_current_pid_tgid();
  struct ht_gpu_thread* t = thread_state((__u32)id, id >> 32);
  if (!t) return 0;
  __u64 cookie = bpf_get_attach_cookie(ctx);
  __u32 fn = HT_GPU_COOKIE_FN(cookie);
  __u64 now = bpf_ktime_get_ns();
  /* Stacks grow down: a call nested in the one the thread is in enters
   * below that one's entry. One entered above it, or at it from the same
   * call site, comes after that call returned without its return being seen
   * (left by longjmp, or begun before its return probe): start over instead
   * of nesting under it forever. At the same stack pointer with another
   * return address it is a tail call (ncclBcast jumping to ncclBroadcast:
   * the return address is the return probe's trampoline), nested. */
  __u64 sp = PT_REGS_SP(ctx);
  if (t->call_depth &&
      (sp > t->in_sp || (sp == t->in_sp && t->in_ret && entry_return_address(ctx) == t->in_ret)))
    t->call_depth = 0;
  bool outermost = t->call_depth == 0;
  t->call_depth++;

  __u64 count = call_arg(ctx, HT_GPU_COOKIE_ARG(cookie, 20)) << HT_GPU_COOKIE_ARG(cookie, 24);
  __u64 handle = call_arg(ctx, HT_GPU_COOKIE_ARG(cookie, 28));
  __s32 datatype = signed_arg(ctx, HT_GPU_COOKIE_ARG(cookie, 32));
  if (fn_is_launch(fn)) {
    t->launches++;
    t->last_launch_ns = now;
  } else if (fn_is_host_wait(fn)) {
    t->syncs++;
  } else if (fn_is_nccl_transfer(fn)) {
    /* ncclBcast is ncclBroadcast underneath: one transfer, counted once. */
    if (outermost || !fn_is_nccl_transfer(t->in_fn)) {
      t->collectives++;
      t->last_collective_ns = now;
      t->last_collective_count = count;
      t->last_collective_comm = handle;
      t->last_collective_fn = fn;
      t->last_collective_datatype = datatype;
    }
  } else if (fn == HT_GPU_NCCL_GROUP_START) {
    t->nccl_group_depth++;
  } else if (fn == HT_GPU_NCCL_GROUP_END) {
    if (t->nccl_group_depth) t->nccl_group_depth--;
  }
  if (!outermost) return 0;

  t->in_fn = fn;
  t->in_sp = sp;
  /* Launches are the hot path: no read for them. */
  t->in_ret = fn_is_host_wait(fn) || fn_is_nccl_transfer(fn) ? entry_return_address(ctx) : 0;
  t->in_since_ns = now;
  t->in_stream = stream_arg(ctx, cookie);
  t->in_handle = handle;
  t->in_count = count;
  t->in_datatype = datatype;
  t->in_peer = signed_arg(ctx, HT_GPU_COOKIE_ARG(cookie, 36));
  /* Only calls that may be streamed need a stack; launches are the hot path. */
  t->in_ustack_id = fn_is_host_wait(fn) || fn_is_nccl_transfer(fn) ? ht_stackid(ctx, BPF_F_USER_STACK) : -1;
  bpf_get_current_comm(t->comm, sizeof(t->comm));
  return 0;
}

SEC("uretprobe")
int gpu_call_return(struct pt_regs* ctx) {
  /* Only a call whose entry was seen (a traced thread's) has a depth here. */
  __u32 tid = (__u32)bpf_get_current_pid_tgid();
  struct ht_gpu_thread* t = bpf_map_lookup_elem(&gpu_threads, &tid);
  if (!t || t->call_depth == 0) return 0;
  __u64 now = bpf_ktime_get_ns();
  __u32 fn = HT_GPU_COOKIE_FN(bpf_get_attach_cookie(ctx));
  if (fn_is_host_wait(fn)) t->last_sync_end_ns = now;
  if (--t->call_depth > 0) return 0;

  __u32 in_fn = t->in_fn;
  t->in_fn = HT_GPU_FN_NONE;
  bool nccl = fn_is_nccl_transfer(in_fn);
  if (!nccl && !(fn_is_host_wait(in_fn) && now - t->in_since_ns >= ht_min_block_ns)) return 0;

  struct ht_gpu_call_event* e = ht_reserve_at(HT_EV_GPU_CALL, sizeof(*e), now);
  if (!e) return 0;
  e->fn = in_fn;
  e->ret = (__s32)PT_REGS_RC(ctx);
  e->start_ns = t->in_since_ns;
  e->stream = t->in_stream;
  e->handle = t->in_handle;
  e->count = t->in_count;
  e->seq = nccl ? t->collectives : 0;
  e->datatype = t->in_datatype;
  e->peer = t->in_peer;
  e->ustack_id = t->in_ustack_id;
  e->pad = 0;
  ht_submit(e);
  return 0;
}
