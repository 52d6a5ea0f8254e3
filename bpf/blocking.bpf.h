/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The blocking-syscalls concern, run by the syscall dispatcher
 * (bpf/syscalls.bpf.c): fd I/O, sockets, poll/select/epoll, accept/connect,
 * wait4/waitid and sleeps of the traced tasks become HT_EV_SYSCALL_BLOCK when
 * a call lasts at least min_block_ns, with the fd's object identity (inode
 * and kind), the kernel stack where it first slept and the user stack of the
 * call.
 *
 * The fd is resolved to its object only for a call being reported, at its
 * exit: most blocking calls are short and never reported, and a pipe
 * ping-pong must not pay seven probe reads per call for them. The call holds
 * its file while it runs and the fd is looked up by the same thread right
 * after, so the table entry is the call's unless another thread closed and
 * reused the fd number meanwhile -- the one race this accepts.
 */
#ifndef HANGTRACE_BLOCKING_BPF_H
#define HANGTRACE_BLOCKING_BPF_H

#include "call_state.bpf.h"
#include "uapi.bpf.h"

/* i_mode file types */
#define S_IFMT 00170000
#define S_IFSOCK 0140000
#define S_IFREG 0100000
#define S_IFIFO 0010000

const volatile bool trace_blocking = true;

/* current->files->fdt->fd[fd]->f_inode, bounds-checked against max_fds.
 * `btf` (a constant after inlining): the caller is a tp_btf program, which
 * runs under RCU, so the chain is followed with plain loads of trusted
 * pointers; the raw_tp twin probe-reads each hop. */
static __always_inline void blocking_resolve_fd(struct call_state* s, bool btf) {
  s->resolved = 1;
  int fd = (int)s->obj;
  if (fd < 0) return;
  struct task_struct* t = bpf_get_current_task_btf();
  struct fdtable* fdt = btf ? t->files->fdt : BPF_CORE_READ(t, files, fdt);
  if (!fdt) return;
  unsigned int max_fds = btf ? fdt->max_fds : BPF_CORE_READ(fdt, max_fds);
  if ((unsigned int)fd >= max_fds) return;
  struct file** fds = btf ? fdt->fd : BPF_CORE_READ(fdt, fd);
  struct file* f = NULL;
  /* A variable index into the array: a probe read in either twin. */
  if (bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]) != 0 || !f) return;
  struct inode* ino = BPF_CORE_READ(f, f_inode);
  if (!ino) return;
  s->obj_inode = BPF_CORE_READ(ino, i_ino);
  switch (BPF_CORE_READ(ino, i_mode) & S_IFMT) {
    case S_IFIFO:
      s->obj_kind = HT_OBJ_PIPE;
      break;
    case S_IFSOCK:
      s->obj_kind = HT_OBJ_SOCKET;
      break;
    case S_IFREG:
      s->obj_kind = HT_OBJ_FILE;
      break;
    default:
      s->obj_kind = HT_OBJ_ANON;
  }
}

/* Starts tracking a blocking call from its argument registers (at sys_enter,
 * or at its first sleep; has_fd: its first argument is an fd). */
static __always_inline void blocking_begin(struct call_state* s, struct pt_regs* regs, __s64 nr, bool has_fd,
                                           bool btf) {
  s->kind = CALL_BLOCKING;
  s->nr = nr;
  s->args[0] = HT_SC_ARG1(regs, btf);
  s->args[1] = HT_SC_ARG2(regs, btf);
  s->args[2] = HT_SC_ARG3(regs, btf);
  s->obj = has_fd ? (__u64)(__s64)(__s32)s->args[0] : (__u64)-1;
  s->obj_kind = HT_OBJ_UNKNOWN;
  s->obj_inode = 0;
  s->resolved = !has_fd;
  s->slept = 0;
  s->kstack_id = -ENOENT;
  s->ts_ns = 0;
  call_mark_begun(s);
}

/* sys_enter of a blocking call (every call tracked from entry). */
static __always_inline void blocking_enter(struct pt_regs* regs, __s64 nr, bool has_fd, bool btf) {
  struct call_state* s = traced_call_state(bpf_get_current_task_btf());
  if (s) blocking_begin(s, regs, nr, has_fd, btf);
}

/* A regular file's mount id and "parent/name" into a record being sent (a
 * second walk of the fd table, for file calls only: they are the rare
 * records, and naming the file is what makes them useful). Probe reads in
 * both twins: the names are read with bpf_probe_read_kernel_str anyway. */
static __always_inline void blocking_name_file(struct ht_syscall_event* e, int fd) {
  if (fd < 0) return;
  struct task_struct* t = bpf_get_current_task_btf();
  struct fdtable* fdt = BPF_CORE_READ(t, files, fdt);
  if (!fdt || (unsigned int)fd >= BPF_CORE_READ(fdt, max_fds)) return;
  struct file** fds = BPF_CORE_READ(fdt, fd);
  struct file* f = NULL;
  if (bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]) != 0 || !f) return;
  struct vfsmount* vm = BPF_CORE_READ(f, f_path.mnt);
  if (vm) {
    struct mount* m = (struct mount*)((void*)vm - bpf_core_field_offset(struct mount, mnt));
    e->mnt_id = BPF_CORE_READ(m, mnt_id);
  }
  struct dentry* d = BPF_CORE_READ(f, f_path.dentry);
  if (!d) return;
  struct dentry* parent = BPF_CORE_READ(d, d_parent);
  __u32 off = 0;
  if (parent && parent != d) {
    long n = bpf_probe_read_kernel_str(e->file, HT_FILE_COMPONENT_LEN, BPF_CORE_READ(parent, d_name.name));
    if (n >= 1 && n <= HT_FILE_COMPONENT_LEN) off = (__u32)n;
  }
  if (off > HT_FILE_COMPONENT_LEN) off = 0; /* for the verifier */
  if (off) e->file[off - 1] = '/';
  bpf_probe_read_kernel_str(e->file + off, HT_FILE_COMPONENT_LEN, BPF_CORE_READ(d, d_name.name));
}

/* A call that lasted long enough (its state already cleared by the caller). */
static __always_inline void blocking_emit(void* ctx, struct call_state* s, long ret, __u64 duration,
                                          __u64 now, bool btf) {
  if (!s->resolved) blocking_resolve_fd(s, btf);
  struct ht_syscall_event* e = ht_reserve_at(HT_EV_SYSCALL_BLOCK, sizeof(*e), now);
  if (!e) return;
  e->nr = s->nr;
  e->ret = ret;
  e->duration_ns = duration;
  e->fd = (__s32)s->obj;
  e->obj_kind = s->obj_kind;
  e->obj_inode = s->obj_inode;
  e->args[0] = s->args[0];
  e->args[1] = s->args[1];
  e->args[2] = s->args[2];
  e->kstack_id = s->kstack_id;
  e->ustack_id = take_user_stack(ctx, s, now);
  e->mnt_id = 0;
  e->file_pad = 0;
  e->file[0] = 0;
  if (s->obj_kind == HT_OBJ_FILE) blocking_name_file(e, (int)s->obj);
  ht_submit(e);
}

#endif /* HANGTRACE_BLOCKING_BPF_H */
