// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * /dev/shm (tmpfs) activity of traced tasks, as struct ht_shm_event records:
 * creation, truncate, fallocate, mmap and unlink of tmpfs files, those calls
 * failing (ENOSPC in particular), page faults on shared tmpfs mappings, and
 * the SIGBUS a fault on a full tmpfs ends in. The story this exists for: a
 * DataLoader worker ftruncates and mmaps a tensor file in a 64 MiB Docker
 * /dev/shm, the page fault cannot allocate, and the kernel kills it.
 *
 * The syscalls (create, truncate, mmap, unlink, ENOSPC) are run by the
 * syscall dispatcher (bpf/shm_calls.bpf.h in bpf/syscalls.bpf.c); this object
 * has the fault and signal hooks. Every hook is a twin (tp_btf/X and raw_tp/X)
 * over one handler; userspace keeps the tp_btf one where vmlinux BTF
 * describes the tracepoint.
 */
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "live_maps.bpf.h"
#include "tmpfs.bpf.h"
#include "uapi.bpf.h"

#define VM_SHARED 0x00000008

/* Faults are reported once per (process, file, this many bytes of file). */
const volatile __u32 fault_region_shift = 20;
/* The daemon's steady state: faults only while the tmpfs is 90 % full, when
 * a SIGBUS is near; not one per new region of every per-batch segment. */
const volatile bool shm_trouble_only = false;

/* What a faulting address lies in, when it is a shared tmpfs mapping. */
struct shm_fault_info {
  __u64 addr;
  __u64 inode;
  __u64 offset; /* byte offset in the file */
  __u64 fs_size;
  __u64 fs_used;
  __u64 file;             /* struct file *, for its name once a record is due */
  __u64 vm_start, vm_end; /* the VMA found (any kind), for the cache */
  __u64 vm_pgoff_bytes;   /* file offset of vm_start */
};

/*
 * Per thread, the last VMA a fault was looked up in, shared tmpfs or not, and
 * the mm's mm_lock_seq at the time. Every change to an address space's VMAs
 * happens under mmap_write_lock, whose unlock moves mm_lock_seq, so while it
 * is unchanged (and even: no writer in progress) a fault in the same range
 * needs no bpf_find_vma walk -- a loop faulting in the pages of one mapping
 * pays one walk, not one per page. Kernels without per-VMA locks have no
 * mm_lock_seq and walk every time.
 */
struct fault_cache {
  __u64 mm;
  __u32 seq;
  __u32 pad;
  __u64 vm_start, vm_end;
  __u64 vm_pgoff_bytes;
  __u64 file; /* 0: not a shared mapping of a real tmpfs */
  __u64 inode;
};

struct {
  __uint(type, BPF_MAP_TYPE_TASK_STORAGE);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, int);
  __type(value, struct fault_cache);
} fault_caches SEC(".maps");

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

/* bpf_find_vma callback: the VMA's range, and the file details when it is
 * a shared mapping of a tmpfs file. */
static long shm_vma_cb(struct task_struct* task, struct vm_area_struct* vma, void* data) {
  struct shm_fault_info* info = data;
  info->vm_start = BPF_CORE_READ(vma, vm_start);
  info->vm_end = BPF_CORE_READ(vma, vm_end);
  struct file* f = BPF_CORE_READ(vma, vm_file);
  if (!is_tmpfs_file(f)) return 0;
  if (!(BPF_CORE_READ(vma, vm_flags) & VM_SHARED)) return 0;
  info->vm_pgoff_bytes = BPF_CORE_READ(vma, vm_pgoff) << page_shift;
  info->offset = info->vm_pgoff_bytes + (info->addr - info->vm_start);
  info->inode = BPF_CORE_READ(f, f_inode, i_ino);
  info->file = (__u64)f;
  tmpfs_usage(f, &info->fs_size, &info->fs_used);
  return 0;
}

/* Looks `addr` up in current's address space: true (and `info` filled)
 * when it lies in a shared tmpfs mapping. bpf_find_vma wants its callback
 * context on the stack. */
static __always_inline bool shm_mapping_of(__u64 addr, struct shm_fault_info* info) {
  info->addr = addr;
  info->inode = 0;
  bpf_find_vma(bpf_get_current_task_btf(), addr, shm_vma_cb, info, 0);
  return info->inode != 0;
}

static __always_inline void fill_from_mapping(struct ht_shm_event* e, const struct shm_fault_info* info) {
  e->inode = info->inode;
  e->size = info->offset;
  e->addr = info->addr;
  e->fs_size = info->fs_size;
  e->fs_used = info->fs_used;
  read_file_name((struct file*)info->file, e->name, sizeof(e->name));
}

/* mm->mm_lock_seq (an int before 6.13, a seqcount_t since; its sequence
 * either way); false when the kernel has none or a writer is in progress. */
static __always_inline bool mm_lock_seq_of(struct mm_struct* mm, __u32* seq) {
  if (!bpf_core_field_exists(mm->mm_lock_seq)) return false;
  __u32 off = bpf_core_field_offset(mm->mm_lock_seq);
  if (bpf_probe_read_kernel(seq, sizeof(*seq), (void*)mm + off) != 0) return false;
  return (*seq & 1) == 0;
}

static __always_inline int handle_fault(__u64 addr, __u64 error_code) {
  if (!ht_current_traced()) return 0;
  struct task_struct* task = bpf_get_current_task_btf();
  struct fault_cache* cache = bpf_task_storage_get(&fault_caches, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
  if (!cache) return 0;
  struct mm_struct* mm = BPF_CORE_READ(task, mm);
  __u32 seq = 0;
  bool seq_ok = mm_lock_seq_of(mm, &seq);

  struct shm_fault_info info = {};
  info.addr = addr;
  if (seq_ok && cache->mm == (__u64)mm && cache->seq == seq && addr >= cache->vm_start &&
      addr < cache->vm_end) {
    if (!cache->file) return 0;
    info.file = cache->file;
    info.inode = cache->inode;
    info.offset = cache->vm_pgoff_bytes + (addr - cache->vm_start);
  } else {
    bpf_find_vma(task, addr, shm_vma_cb, &info, 0);
    if (!info.vm_end) return 0; /* no VMA: the fault ends in SIGSEGV */
    cache->mm = seq_ok ? (__u64)mm : 0;
    cache->seq = seq;
    cache->vm_start = info.vm_start;
    cache->vm_end = info.vm_end;
    cache->vm_pgoff_bytes = info.vm_pgoff_bytes;
    /* Shared anonymous mappings and memfds are shmem files too, on the
     * kernel's internal, unlimited mount: they cannot run out of tmpfs
     * space, so their faults are not worth a record (fs_size 0). */
    cache->file = info.inode && info.fs_size ? info.file : 0;
    cache->inode = info.inode;
    if (!cache->file) return 0;
  }

  if (shm_trouble_only) {
    tmpfs_usage((struct file*)info.file, &info.fs_size, &info.fs_used);
    if (info.fs_used * 10 < info.fs_size * 9) return 0;
  }
  struct fault_key key = {.tgid = bpf_get_current_pid_tgid() >> 32,
                          .inode = info.inode,
                          .region = info.offset >> fault_region_shift};
  /* A lookup first: a fault loop over a known region must not take the LRU
   * map's lock on every fault. */
  if (bpf_map_lookup_elem(&fault_seen, &key)) return 0;
  __u8 one = 1;
  if (bpf_map_update_elem(&fault_seen, &key, &one, BPF_NOEXIST) != 0) return 0;

  /* ret: the x86 page fault error code (bit 1: write); size: file offset.
   * The tmpfs usage is read now, not from the cache: it is what moves. */
  struct ht_shm_event* e = reserve_shm(HT_SHM_FAULT, (__s32)error_code);
  if (!e) return 0;
  tmpfs_usage((struct file*)info.file, &info.fs_size, &info.fs_used);
  fill_from_mapping(e, &info);
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

  /* A fault's SIGBUS is raised by the faulting task itself, in the fault,
   * so current's address space still maps the page it could not get. */
  __u32 tid = BPF_CORE_READ(task, pid);
  if ((__u32)bpf_get_current_pid_tgid() != tid) return 0;
  struct shm_fault_info mapping = {};
  if (!shm_mapping_of(addr, &mapping)) return 0;

  struct ht_shm_event* e = reserve_shm(HT_SHM_SIGBUS, code);
  if (!e) return 0;
  /* The receiver, not whoever generated it (the same task here; stated
   * for clarity). */
  e->hdr.tgid = tgid;
  e->hdr.tid = tid;
  fill_from_mapping(e, &mapping);
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
