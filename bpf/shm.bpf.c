// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * /dev/shm (tmpfs) activity of traced tasks, as struct ht_shm_event records:
 * creation, truncate, fallocate, mmap and unlink of tmpfs files, those calls
 * failing (ENOSPC in particular), page faults on shared tmpfs mappings, and
 * the SIGBUS a fault on a full tmpfs ends in. The story this exists for: a
 * DataLoader worker ftruncates and mmaps a tensor file in a 64 MiB Docker
 * /dev/shm, the page fault cannot allocate, and the kernel kills it.
 *
 * Every hook is a twin (tp_btf/X and raw_tp/X) over one handler; userspace
 * keeps the tp_btf one where vmlinux BTF describes the tracepoint.
 */
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "live_maps.bpf.h"
#include "task_snapshot.bpf.h"

#define TMPFS_MAGIC 0x01021994
#define O_CREAT 0100
#define MAP_SHARED 0x01
#define MAP_ANONYMOUS 0x20
#define VM_SHARED 0x00000008
#define SIGBUS 7
#define ENOSPC 28
#define SI_KERNEL 0x80

/*
 * Syscalls whose exit we look at. The arguments are still in the saved user
 * registers at sys_exit, so one hook (exit only) sees arguments and result.
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
#error "shm.bpf.c: syscall numbers unknown for this arch"
#endif

/* Set from userspace: sysconf(_SC_PAGESIZE) as a shift (vm_pgoff units). */
const volatile __u32 page_shift = 12;
/* Faults are reported once per (process, file, this many bytes of file). */
const volatile __u32 fault_region_shift = 20;

/* The last fault each thread took on a shared tmpfs mapping: the SIGBUS that
 * follows a failed fault names the file from here. */
struct shm_fault_info {
  __u64 addr;
  __u64 inode;
  __u64 offset; /* byte offset in the file */
  __u64 fs_size;
  __u64 fs_used;
  char name[64];
};

struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 4096);
  __type(key, __u32); /* tid */
  __type(value, struct shm_fault_info);
} last_fault SEC(".maps");

/* Rate limit for HT_SHM_FAULT: a fault is streamed only when its region of
 * the file is new for the process. */
struct fault_key {
  __u32 tgid;
  __u32 pad;
  __u64 inode;
  __u64 region;
};

struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 16384);
  __type(key, struct fault_key);
  __type(value, __u8);
} fault_seen SEC(".maps");

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

static __always_inline int handle_sys_exit(struct pt_regs* regs, long ret) {
  __s64 nr = -1;
  if (HT_SYSCALL_NR_CORE_INTO(&nr, regs) != 0) return 0;
  /* Cheapest filter first: most syscalls are none of these. */
  switch (nr) {
    case NR_OPEN:
    case NR_CREAT:
    case NR_OPENAT:
    case NR_OPENAT2:
    case NR_FTRUNCATE:
    case NR_TRUNCATE:
    case NR_FALLOCATE:
    case NR_MMAP:
    case NR_UNLINK:
    case NR_UNLINKAT:
      break;
    /* The write family matters only when a tmpfs is full; a pipe ping-pong
     * must cost no more than this test. */
    case NR_WRITE:
    case NR_PWRITE64:
    case NR_WRITEV:
    case NR_PWRITEV:
    case NR_PWRITEV2:
      if (ret != -ENOSPC) return 0;
      break;
    default:
      return 0;
  }
  if (!ht_current_traced()) return 0;

  __u64 a1 = HT_SYSCALL_ARG1_CORE(regs);
  __u64 a2 = PT_REGS_PARM2_CORE(regs);
  __u64 a3 = PT_REGS_PARM3_CORE(regs);

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
    if (f) emit_file_op(HT_SHM_FALLOCATE, ret, f, a3 + HT_SYSCALL_ARG4_CORE(regs), 0);
  } else if (nr == NR_MMAP) {
    /* mmap(addr, len, prot, flags, fd, off): file mappings only. */
    __u64 mflags = HT_SYSCALL_ARG4_CORE(regs);
    if (mflags & MAP_ANONYMOUS) return 0;
    struct file* f = tmpfs_fd_file((long)(int)HT_SYSCALL_ARG5_CORE(regs));
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
  return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(shm_sys_exit_btf, struct pt_regs* regs, long ret) { return handle_sys_exit(regs, ret); }

SEC("raw_tp/sys_exit")
int BPF_PROG(shm_sys_exit_raw, struct pt_regs* regs, long ret) { return handle_sys_exit(regs, ret); }

/* bpf_find_vma callback: fills the scratch fault info when the VMA is a
 * shared mapping of a tmpfs file. */
static long shm_vma_cb(struct task_struct* task, struct vm_area_struct* vma, void* data) {
  struct shm_fault_info* info = data;
  struct file* f = BPF_CORE_READ(vma, vm_file);
  if (!is_tmpfs_file(f)) return 0;
  if (!(BPF_CORE_READ(vma, vm_flags) & VM_SHARED)) return 0;
  __u64 start = BPF_CORE_READ(vma, vm_start);
  info->offset = (BPF_CORE_READ(vma, vm_pgoff) << page_shift) + (info->addr - start);
  info->inode = BPF_CORE_READ(f, f_inode, i_ino);
  tmpfs_usage(f, &info->fs_size, &info->fs_used);
  read_file_name(f, info->name, sizeof(info->name));
  return 0;
}

/* Looks `addr` up in current's address space: true (and `info` filled)
 * when it lies in a shared tmpfs mapping. bpf_find_vma wants its callback
 * context on the stack. */
static __always_inline bool shm_mapping_of(__u64 addr, struct shm_fault_info* info) {
  info->addr = addr;
  info->inode = 0;
  info->offset = 0;
  info->name[0] = 0;
  bpf_find_vma(bpf_get_current_task_btf(), addr, shm_vma_cb, info, 0);
  return info->inode != 0;
}

static __always_inline int handle_fault(__u64 addr, __u64 error_code) {
  if (!ht_current_traced()) return 0;
  struct shm_fault_info found = {};
  struct shm_fault_info* info = &found;
  if (!shm_mapping_of(addr, info)) return 0;

  __u64 id = bpf_get_current_pid_tgid();
  __u32 tid = (__u32)id;
  bpf_map_update_elem(&last_fault, &tid, info, BPF_ANY);

  /* Shared anonymous mappings and memfds are shmem files too, on the
   * kernel's internal, unlimited mount: they cannot run out of tmpfs space,
   * so their faults are not worth a record (last_fault, above, still lets
   * a SIGBUS on them be explained; its fs_size of 0 tells them apart). */
  if (!info->fs_size) return 0;

  struct fault_key key = {
      .tgid = id >> 32, .inode = info->inode, .region = info->offset >> fault_region_shift};
  __u8 one = 1;
  if (bpf_map_update_elem(&fault_seen, &key, &one, BPF_NOEXIST) != 0) return 0;

  /* ret: the x86 page fault error code (bit 1: write); size: file offset. */
  struct ht_shm_event* e = reserve_shm(HT_SHM_FAULT, (__s32)error_code);
  if (!e) return 0;
  e->inode = info->inode;
  e->size = info->offset;
  e->addr = addr;
  e->fs_size = info->fs_size;
  e->fs_used = info->fs_used;
  __builtin_memcpy(e->name, info->name, sizeof(e->name));
  ht_submit(e);
  return 0;
}

SEC("tp_btf/page_fault_user")
int BPF_PROG(shm_page_fault_btf, unsigned long address, struct pt_regs* regs, unsigned long error_code) {
  return handle_fault(address, error_code);
}

SEC("raw_tp/page_fault_user")
int BPF_PROG(shm_page_fault_raw, unsigned long address, struct pt_regs* regs, unsigned long error_code) {
  return handle_fault(address, error_code);
}

/*
 * A kernel-generated SIGBUS (si_code 1..0x7f: BUS_ADRERR, ...) to a traced
 * task whose faulting address lies in a shared tmpfs mapping: the fault
 * could not get a page, almost always because the tmpfs is full.
 */
static __always_inline int handle_signal(int sig, struct kernel_siginfo* info, struct task_struct* task) {
  if (sig != SIGBUS) return 0;
  __u32 tgid = BPF_CORE_READ(task, tgid);
  if (!ht_traced_tgid(tgid)) return 0;
  if ((unsigned long)info <= 1) return 0; /* SEND_SIG_NOINFO / SEND_SIG_PRIV: from a user */
  int code = BPF_CORE_READ(info, si_code);
  if (code <= 0 || code >= SI_KERNEL) return 0;
  __u64 addr = (__u64)BPF_CORE_READ(info, _sifields._sigfault._addr);

  __u32 tid = BPF_CORE_READ(task, pid);
  struct shm_fault_info found = {};
  struct shm_fault_info* fault = bpf_map_lookup_elem(&last_fault, &tid);
  /* The page of the last recorded fault, else look the address up (the
   * fault tracepoint may be missing on this arch). Faults are raised by the
   * faulting task itself, so current's mm is the right one. */
  if (!fault || (fault->addr >> page_shift) != (addr >> page_shift)) {
    fault = NULL;
    if ((__u32)bpf_get_current_pid_tgid() == tid && shm_mapping_of(addr, &found)) fault = &found;
  }
  if (!fault) return 0;

  struct ht_shm_event* e = reserve_shm(HT_SHM_SIGBUS, code);
  if (!e) return 0;
  /* The receiver, not whoever generated it. */
  e->hdr.tgid = tgid;
  e->hdr.tid = tid;
  BPF_CORE_READ_STR_INTO(&e->hdr.comm, task, comm);
  e->inode = fault->inode;
  e->size = fault->offset;
  e->addr = addr;
  e->fs_size = fault->fs_size;
  e->fs_used = fault->fs_used;
  __builtin_memcpy(e->name, fault->name, sizeof(e->name));
  ht_submit(e);
  return 0;
}

SEC("tp_btf/signal_generate")
int BPF_PROG(shm_signal_generate_btf, int sig, struct kernel_siginfo* info, struct task_struct* task) {
  return handle_signal(sig, info, task);
}

SEC("raw_tp/signal_generate")
int BPF_PROG(shm_signal_generate_raw, int sig, struct kernel_siginfo* info, struct task_struct* task) {
  return handle_signal(sig, info, task);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
