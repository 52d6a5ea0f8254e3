/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The shm concern's syscall part, run by the syscall dispatcher
 * (bpf/syscalls.bpf.c): creation, truncate, fallocate, mmap and unlink of
 * tmpfs files by traced tasks, those calls failing (ENOSPC in particular),
 * and writes that fail with ENOSPC on a tmpfs, as struct ht_shm_event
 * records. Faults and SIGBUS are in bpf/shm.bpf.c.
 */
#ifndef HANGTRACE_SHM_CALLS_BPF_H
#define HANGTRACE_SHM_CALLS_BPF_H

#include "call_state.bpf.h"
#include "hangtrace/syscall_nr.h"
#include "tmpfs.bpf.h"

#define O_CREAT 0100
#define MAP_SHARED 0x01
#define MAP_ANONYMOUS 0x20

const volatile bool trace_shm_calls = true;
/* The daemon's steady state: only calls that failed (ENOSPC above all), not
 * the DataLoader's per-batch segment creations and unlinks. */
const volatile bool shm_trouble_only = false;

/*
 * A path-based operation: emitted only for absolute paths under /dev/shm/
 * (the name is what follows that prefix). Relative paths resolved against a
 * directory fd are not seen.
 */
static __always_inline void emit_path_op(__u32 op, long ret, const char* upath) {
  char prefix[10] = {};
  if (bpf_probe_read_user(prefix, 9, upath) != 0) return;
  /* "/dev/shm/" */
  if (prefix[0] != '/' || prefix[1] != 'd' || prefix[2] != 'e' || prefix[3] != 'v' || prefix[4] != '/' ||
      prefix[5] != 's' || prefix[6] != 'h' || prefix[7] != 'm' || prefix[8] != '/')
    return;
  if (ret == -ENOSPC) op = HT_SHM_ENOSPC;
  struct ht_shm_event* e = reserve_shm(op, (__s32)ret);
  if (!e) return;
  bpf_probe_read_user_str(e->name, sizeof(e->name), upath + 9);
  ht_submit(e);
}

/* open/openat/openat2/creat that succeeded with O_CREAT on a tmpfs file, or
 * failed on a /dev/shm path. */
static __always_inline void on_open(long ret, const char* upath, __u64 flags) {
  if (!(flags & O_CREAT)) return;
  if (ret >= 0) {
    struct file* f = tmpfs_fd_file(ret);
    if (f) emit_file_op(HT_SHM_CREATE, ret, f, BPF_CORE_READ(f, f_inode, i_size), 0);
    return;
  }
  emit_path_op(HT_SHM_CREATE, ret, upath);
}

/* sys_exit of a call the dispatcher classed as a /dev/shm one (the table's
 * shm column, hangtrace/syscall_dispatch.h). The arguments are still in the
 * saved user registers at sys_exit, so the exit alone sees arguments and
 * result. */
static __always_inline void shm_calls_exit(struct pt_regs* regs, __s64 nr, long ret, bool btf) {
  if (shm_trouble_only && ret >= 0) return;
  if (!ht_current_traced()) return;
  __u64 a1 = HT_SC_ARG1(regs, btf);
  __u64 a2 = HT_SC_ARG2(regs, btf);
  __u64 a3 = HT_SC_ARG3(regs, btf);

  if (nr == HT_NR_open) {
    on_open(ret, (const char*)a1, a2);
  } else if (nr == HT_NR_creat) {
    on_open(ret, (const char*)a1, O_CREAT);
  } else if (nr == HT_NR_openat) {
    on_open(ret, (const char*)a2, a3);
  } else if (nr == HT_NR_openat2) {
    __u64 flags = 0; /* struct open_how starts with flags */
    bpf_probe_read_user(&flags, sizeof(flags), (void*)a3);
    on_open(ret, (const char*)a2, flags);
  } else if (nr == HT_NR_ftruncate) {
    struct file* f = tmpfs_fd_file(a1);
    if (f) emit_file_op(HT_SHM_TRUNCATE, ret, f, a2, 0);
  } else if (nr == HT_NR_truncate) {
    emit_path_op(HT_SHM_TRUNCATE, ret, (const char*)a1);
  } else if (nr == HT_NR_fallocate) {
    /* fallocate(fd, mode, offset, len): size is where the file would end. */
    struct file* f = tmpfs_fd_file(a1);
    if (f) emit_file_op(HT_SHM_FALLOCATE, ret, f, a3 + HT_SC_ARG4(regs, btf), 0);
  } else if (nr == HT_NR_mmap) {
    /* mmap(addr, len, prot, flags, fd, off): file mappings only. */
    __u64 mflags = HT_SC_ARG4(regs, btf);
    if (mflags & MAP_ANONYMOUS) return;
    struct file* f = tmpfs_fd_file((long)(int)HT_SC_ARG5(regs, btf));
    /* A private mapping of a tmpfs file shares nothing; leave it out. */
    if (f && (mflags & MAP_SHARED)) emit_file_op(HT_SHM_MMAP, ret < 0 ? ret : 0, f, a2, ret < 0 ? 0 : ret);
  } else if (nr == HT_NR_unlink) {
    emit_path_op(HT_SHM_UNLINK, ret, (const char*)a1);
  } else if (nr == HT_NR_unlinkat) {
    emit_path_op(HT_SHM_UNLINK, ret, (const char*)a2);
  } else if (ret == -ENOSPC) {
    /* write family: only interesting when a tmpfs is full. */
    struct file* f = tmpfs_fd_file(a1);
    if (f) emit_file_op(HT_SHM_ENOSPC, ret, f, a3, 0);
  }
}

#endif /* HANGTRACE_SHM_CALLS_BPF_H */
