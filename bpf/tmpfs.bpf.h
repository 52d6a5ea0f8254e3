/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * tmpfs (/dev/shm) helpers shared by the shm concern's fault and signal hooks
 * (bpf/shm.bpf.c) and its syscall part, run by the syscall dispatcher
 * (bpf/shm_calls.bpf.h in bpf/syscalls.bpf.c).
 */
#ifndef HANGTRACE_TMPFS_BPF_H
#define HANGTRACE_TMPFS_BPF_H

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>

#include "live_maps.bpf.h"
#include "uapi.bpf.h"

#define TMPFS_MAGIC 0x01021994

/* Set from userspace: sysconf(_SC_PAGESIZE) as a shift (vm_pgoff units). */
const volatile __u32 page_shift = 12;

static __always_inline bool is_tmpfs_file(struct file* f) {
  return f && BPF_CORE_READ(f, f_inode, i_sb, s_magic) == TMPFS_MAGIC;
}

/* current's open file for `fd`, or NULL. */
static __always_inline struct file* fd_file(long fd) {
  struct task_struct* t = bpf_get_current_task_btf();
  struct fdtable* fdt = BPF_CORE_READ(t, files, fdt);
  if (!fdt || fd < 0 || fd >= BPF_CORE_READ(fdt, max_fds)) return NULL;
  struct file** fds = BPF_CORE_READ(fdt, fd);
  struct file* f = NULL;
  bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]);
  return f;
}

static __always_inline struct file* tmpfs_fd_file(long fd) {
  struct file* f = fd_file(fd);
  return is_tmpfs_file(f) ? f : NULL;
}

/* The tmpfs's size limit and bytes in use, from its shmem_sb_info (in
 * pages). Measured in the kernel because the job's mount namespace, and
 * with it the tmpfs, may be gone by the time anyone can statfs it. */
static __always_inline void tmpfs_usage(struct file* f, __u64* size, __u64* used) {
  struct shmem_sb_info* sbi = BPF_CORE_READ(f, f_inode, i_sb, s_fs_info);
  *size = 0;
  *used = 0;
  if (!sbi) return;
  __s64 u = BPF_CORE_READ(sbi, used_blocks.count);
  *size = BPF_CORE_READ(sbi, max_blocks) << page_shift;
  *used = u > 0 ? (__u64)u << page_shift : 0;
}

static __always_inline void read_file_name(struct file* f, char* name, __u32 len) {
  const unsigned char* s = BPF_CORE_READ(f, f_path.dentry, d_name.name);
  bpf_probe_read_kernel_str(name, len, s);
}

static __always_inline struct ht_shm_event* reserve_shm(__u32 op, __s32 ret) {
  struct ht_shm_event* e = ht_reserve(HT_EV_SHM, sizeof(*e));
  if (!e) return NULL;
  e->op = op;
  e->ret = ret;
  e->inode = 0;
  e->size = 0;
  e->addr = 0;
  e->fs_size = 0;
  e->fs_used = 0;
  __builtin_memset(e->name, 0, sizeof(e->name));
  return e;
}

/* An fd-based operation on a tmpfs file: the name and inode come from it. */
static __always_inline void emit_file_op(__u32 op, long ret, struct file* f, __u64 size, __u64 addr) {
  /* Any of them failing for want of space is the finding; say so. */
  if (ret == -ENOSPC) op = HT_SHM_ENOSPC;
  struct ht_shm_event* e = reserve_shm(op, (__s32)ret);
  if (!e) return;
  e->inode = BPF_CORE_READ(f, f_inode, i_ino);
  e->size = size;
  e->addr = addr;
  read_file_name(f, e->name, sizeof(e->name));
  tmpfs_usage(f, &e->fs_size, &e->fs_used);
  ht_submit(e);
}

#endif /* HANGTRACE_TMPFS_BPF_H */
