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
#include "tmpfs.bpf.h"

#define O_CREAT 0100
#define MAP_SHARED 0x01
#define MAP_ANONYMOUS 0x20

const volatile bool trace_shm_calls = true;
/* The daemon's steady state: only calls that failed (ENOSPC above all), not
 * the DataLoader's per-batch segment creations and unlinks. */
const volatile bool shm_trouble_only = false;

/*
 * Syscalls whose exit the dispatcher hands to shm_calls_exit(). The arguments
 * are still in the saved user registers at sys_exit, so the exit alone sees
 * arguments and result.
 * Negative: the syscall does not exist on this arch.
 */
#if defined(bpf_target_x86)
#define NR_WRITE 1
#define NR_OPEN 2
#define NR_MMAP 9
#define NR_PWRITE64 18
#define NR_WRITEV 20
#define NR_TRUNCATE 76
#define NR_FTRUNCATE 77
#define NR_CREAT 85
#define NR_UNLINK 87
#define NR_OPENAT 257
#define NR_UNLINKAT 263
#define NR_FALLOCATE 285
#define NR_PWRITEV 296
#define NR_PWRITEV2 328
#define NR_OPENAT2 437
#elif defined(bpf_target_arm64)
#define NR_WRITE 64
#define NR_OPEN -100
#define NR_MMAP 222
#define NR_PWRITE64 68
#define NR_WRITEV 66
#define NR_TRUNCATE 45
#define NR_FTRUNCATE 46
#define NR_CREAT -101
#define NR_UNLINK -102
#define NR_OPENAT 56
#define NR_UNLINKAT 35
#define NR_FALLOCATE 47
#define NR_PWRITEV 70
#define NR_PWRITEV2 287
#define NR_OPENAT2 437
#else
#error "shm_calls.bpf.h: syscall numbers unknown for this arch"
#endif

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

/* sys_exit of a call the dispatcher classed as a /dev/shm one. */
static __always_inline void shm_calls_exit(struct pt_regs* regs, __s64 nr, long ret, bool btf) {
  if (shm_trouble_only && ret >= 0) return;
  if (!ht_current_traced()) return;
  __u64 a1 = HT_SC_ARG1(regs, btf);
  __u64 a2 = HT_SC_ARG2(regs, btf);
  __u64 a3 = HT_SC_ARG3(regs, btf);

  if (nr == NR_OPEN) {
    on_open(ret, (const char*)a1, a2);
  } else if (nr == NR_CREAT) {
    on_open(ret, (const char*)a1, O_CREAT);
  } else if (nr == NR_OPENAT) {
    on_open(ret, (const char*)a2, a3);
  } else if (nr == NR_OPENAT2) {
    __u64 flags = 0; /* struct open_how starts with flags */
    bpf_probe_read_user(&flags, sizeof(flags), (void*)a3);
    on_open(ret, (const char*)a2, flags);
  } else if (nr == NR_FTRUNCATE) {
    struct file* f = tmpfs_fd_file(a1);
    if (f) emit_file_op(HT_SHM_TRUNCATE, ret, f, a2, 0);
  } else if (nr == NR_TRUNCATE) {
    emit_path_op(HT_SHM_TRUNCATE, ret, (const char*)a1);
  } else if (nr == NR_FALLOCATE) {
    /* fallocate(fd, mode, offset, len): size is where the file would end. */
    struct file* f = tmpfs_fd_file(a1);
    if (f) emit_file_op(HT_SHM_FALLOCATE, ret, f, a3 + HT_SC_ARG4(regs, btf), 0);
  } else if (nr == NR_MMAP) {
    /* mmap(addr, len, prot, flags, fd, off): file mappings only. */
    __u64 mflags = HT_SC_ARG4(regs, btf);
    if (mflags & MAP_ANONYMOUS) return;
    struct file* f = tmpfs_fd_file((long)(int)HT_SC_ARG5(regs, btf));
    /* A private mapping of a tmpfs file shares nothing; leave it out. */
    if (f && (mflags & MAP_SHARED)) emit_file_op(HT_SHM_MMAP, ret < 0 ? ret : 0, f, a2, ret < 0 ? 0 : ret);
  } else if (nr == NR_UNLINK) {
    emit_path_op(HT_SHM_UNLINK, ret, (const char*)a1);
  } else if (nr == NR_UNLINKAT) {
    emit_path_op(HT_SHM_UNLINK, ret, (const char*)a2);
  } else if (ret == -ENOSPC) {
    /* write family: only interesting when a tmpfs is full. */
    struct file* f = tmpfs_fd_file(a1);
    if (f) emit_file_op(HT_SHM_ENOSPC, ret, f, a3, 0);
  }
}

#endif /* HANGTRACE_SHM_CALLS_BPF_H */
