// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Blocking syscalls of the traced tasks (fd I/O, sockets, poll/select/epoll,
 * accept/connect, wait4/waitid, sleeps): one HT_EV_SYSCALL_BLOCK when a call
 * lasts at least min_block_ns, with the fd's object identity (inode and kind,
 * resolved at entry, while the fd is surely the one the call uses), the
 * kernel stack where it first slept and the user stack of the call (taken as
 * in futex.bpf.c).
 *
 * Hooks: raw_tp/sys_enter + raw_tp/sys_exit, for the reasons given in
 * futex.bpf.c; with some thirty syscalls here, per-syscall tracepoints would
 * also mean sixty attachments. A switch on the syscall number decides first
 * whether a call matters; every other syscall returns after it.
 */
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "live_maps.bpf.h"
#include "task_snapshot.bpf.h"

#define ENOENT 2

/* i_mode file types */
#define S_IFMT 00170000
#define S_IFSOCK 0140000
#define S_IFREG 0100000
#define S_IFIFO 0010000

/* ht_syscall_event.obj_kind */
#define OBJ_UNKNOWN 0
#define OBJ_PIPE 1
#define OBJ_SOCKET 2
#define OBJ_FILE 3
#define OBJ_ANON 4

/* Calls shorter than this are not streamed (set from LiveOptions). */
const volatile __u64 min_block_ns = 5000000;

/* How a syscall's arguments read: 0 = not traced, 1 = args[0] is an fd,
 * 2 = traced, no fd argument. x86_64 numbering (see abi.h). */
static __always_inline int syscall_class(long nr) {
  switch (nr) {
    case 0:   /* read */
    case 1:   /* write */
    case 17:  /* pread64 */
    case 18:  /* pwrite64 */
    case 19:  /* readv */
    case 20:  /* writev */
    case 295: /* preadv */
    case 296: /* pwritev */
    case 327: /* preadv2 */
    case 328: /* pwritev2 */
    case 42:  /* connect */
    case 43:  /* accept */
    case 288: /* accept4 */
    case 44:  /* sendto */
    case 45:  /* recvfrom */
    case 46:  /* sendmsg */
    case 47:  /* recvmsg */
    case 299: /* recvmmsg */
    case 307: /* sendmmsg */
    case 232: /* epoll_wait */
    case 281: /* epoll_pwait */
    case 441: /* epoll_pwait2 */
      return 1;
    case 7:   /* poll */
    case 271: /* ppoll */
    case 23:  /* select */
    case 270: /* pselect6 */
    case 61:  /* wait4 */
    case 247: /* waitid */
    case 35:  /* nanosleep */
    case 230: /* clock_nanosleep */
      return 2;
    default:
      return 0;
  }
}

/* Kernel stack walks are throttled per thread as in futex.bpf.c: sleeping
 * again in the same syscall on the same fd within this long reuses the last
 * walk's stack id. */
const volatile __u64 kstack_interval_ns = 10000000;

/* A call in progress, per thread, and the last kernel stack walk. */
struct syscall_pending {
  __u64 ts_ns; /* 0: no call in progress */
  __s64 nr;
  __u64 args[3];
  __u64 obj_inode;
  __s32 fd;
  __u32 obj_kind;
  __s32 kstack_id; /* -ENOENT until the task sleeps */
  __s32 walk_kstack_id;
  __u64 walk_ns;
  __s64 walk_nr;
  __s32 walk_fd;
  __u32 pad;
};

/* Task-local storage, for the reasons given in futex.bpf.c. */
struct {
  __uint(type, BPF_MAP_TYPE_TASK_STORAGE);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, int);
  __type(value, struct syscall_pending);
} syscall_tasks SEC(".maps");

/* current->files->fdt->fd[fd]->f_inode, bounds-checked against max_fds. */
static __always_inline void resolve_fd(int fd, struct syscall_pending* p) {
  if (fd < 0) return;
  struct task_struct* t = (struct task_struct*)bpf_get_current_task();
  struct fdtable* fdt = BPF_CORE_READ(t, files, fdt);
  if (!fdt) return;
  unsigned int max_fds = BPF_CORE_READ(fdt, max_fds);
  if ((unsigned int)fd >= max_fds) return;
  struct file** fds = BPF_CORE_READ(fdt, fd);
  struct file* f = NULL;
  if (bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]) != 0 || !f) return;
  struct inode* ino = BPF_CORE_READ(f, f_inode);
  if (!ino) return;
  p->obj_inode = BPF_CORE_READ(ino, i_ino);
  switch (BPF_CORE_READ(ino, i_mode) & S_IFMT) {
    case S_IFIFO:
      p->obj_kind = OBJ_PIPE;
      break;
    case S_IFSOCK:
      p->obj_kind = OBJ_SOCKET;
      break;
    case S_IFREG:
      p->obj_kind = OBJ_FILE;
      break;
    default:
      p->obj_kind = OBJ_ANON; /* eventfd, epoll, timerfd, char devices, ... */
  }
}

SEC("raw_tp/sys_enter")
int syscalls_sys_enter(struct bpf_raw_tracepoint_args* ctx) {
  long nr = (long)ctx->args[1];
  int cls = syscall_class(nr);
  if (!cls) return 0;
  if (!ht_current_traced()) return 0;

  struct syscall_pending* p =
      bpf_task_storage_get(&syscall_tasks, bpf_get_current_task_btf(), 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
  if (!p) return 0;
  struct pt_regs* regs = (struct pt_regs*)ctx->args[0];
  p->nr = nr;
  p->args[0] = HT_SYSCALL_ARG1_CORE(regs);
  p->args[1] = PT_REGS_PARM2_CORE(regs);
  p->args[2] = PT_REGS_PARM3_CORE(regs);
  p->fd = -1;
  p->obj_kind = OBJ_UNKNOWN;
  p->obj_inode = 0;
  p->kstack_id = -ENOENT;
  if (cls == 1) {
    p->fd = (__s32)p->args[0];
    resolve_fd(p->fd, p);
  }
  p->ts_ns = bpf_ktime_get_ns();
  return 0;
}

/* The kernel stack where the call first slept (see futex.bpf.c). */
SEC("raw_tp/sched_switch")
int syscalls_sched_switch(struct bpf_raw_tracepoint_args* ctx) {
  if (ctx->args[0]) /* preempt */
    return 0;
  struct syscall_pending* p = bpf_task_storage_get(&syscall_tasks, bpf_get_current_task_btf(), 0, 0);
  if (!p || !p->ts_ns || p->kstack_id != -ENOENT) return 0;
  __u64 now = bpf_ktime_get_ns();
  if (p->walk_kstack_id >= 0 && p->walk_nr == p->nr && p->walk_fd == p->fd &&
      now - p->walk_ns < kstack_interval_ns) {
    p->kstack_id = p->walk_kstack_id;
    return 0;
  }
  p->kstack_id = bpf_get_stackid(ctx, &stacks, 0);
  p->walk_ns = now;
  p->walk_nr = p->nr;
  p->walk_fd = p->fd;
  p->walk_kstack_id = p->kstack_id;
  return 0;
}

SEC("raw_tp/sys_exit")
int syscalls_sys_exit(struct bpf_raw_tracepoint_args* ctx) {
  struct pt_regs* regs = (struct pt_regs*)ctx->args[0];
  __s64 nr = -1;
  HT_SYSCALL_NR_CORE_INTO(&nr, regs);
  if (!syscall_class(nr)) return 0;

  struct syscall_pending* p = bpf_task_storage_get(&syscall_tasks, bpf_get_current_task_btf(), 0, 0);
  if (!p || !p->ts_ns) return 0;
  struct syscall_pending c = *p;
  p->ts_ns = 0;
  if (c.nr != nr) return 0; /* a stale entry (a call whose exit we missed) */

  __u64 duration = bpf_ktime_get_ns() - c.ts_ns;
  if (duration < min_block_ns) return 0;
  struct ht_syscall_event* e = ht_reserve(HT_EV_SYSCALL_BLOCK, sizeof(*e));
  if (!e) return 0;
  e->nr = nr;
  e->ret = (__s64)ctx->args[1];
  e->duration_ns = duration;
  e->fd = c.fd;
  e->obj_kind = c.obj_kind;
  e->obj_inode = c.obj_inode;
  e->args[0] = c.args[0];
  e->args[1] = c.args[1];
  e->args[2] = c.args[2];
  e->kstack_id = c.kstack_id;
  /* The user registers at exit are those at entry (the call returns where
   * it was made), so the user stack is walked only for calls reported. */
  e->ustack_id = bpf_get_stackid(ctx, &stacks, BPF_F_USER_STACK);
  ht_submit(e);
  return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
