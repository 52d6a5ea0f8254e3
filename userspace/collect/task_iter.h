// One pass of the BPF task iterator (bpf/task_snapshot.bpf.c) over the
// threads of a set of processes: scheduler state, how long each thread has
// been off CPU (the kernel's own bookkeeping, so waits that began before
// hangtrace started are measured in full), kernel stack, user registers.
#pragma once

#include <string>
#include <vector>

#include "hangtrace/model.h"
#include "hangtrace/procfs.h"
#include "hangtrace/wait_sampler.h"
#include "hangtrace/result.h"

namespace hangtrace {

struct KernelTaskSample {
  int tid = 0;
  int tgid = 0;
  int ppid = 0;
  std::string comm;
  KernelTaskView view;  // view.stack holds raw addresses, symbols left empty
  int64_t syscall_nr = -1;
  uint64_t syscall_args[6] = {0, 0, 0, 0, 0, 0};
};

// Loads the iterator (open -> set map sizes/rodata -> load -> attach), runs it
// once, and detaches everything before returning: nothing stays attached.
// With keep_task_iterator_loaded(true) the loaded program and its maps stay
// (held by this process's fds: they go when it exits, however it exits) and
// later passes only refill the tgid map and attach a fresh iterator link:
// verifying the program is most of a capture's cost (30-75 ms here), which a
// process that captures more than once (--duration, a daemon) pays once.
// Error messages read "failed to load BPF task iterator: <reason>".
Result<std::vector<KernelTaskSample>> sample_kernel_tasks(const std::vector<int>& tgids);
// The brief pass (bpf ht_task_brief): what the daemon samples each second.
// Same kept object and errors as sample_kernel_tasks. Kernel threads and
// exiting tasks are left out.
Result<std::vector<TaskBrief>> sample_task_briefs(const std::vector<int>& tgids);
// The identity pass (bpf ht_process_identity): every process of the host with
// an address space (no kernel thread, no zombie), as /proc/PID/stat would
// give pid, ppid, flags, comm, start time (in clock ticks), start_stack,
// arg_start and arg_end, in pid order; pids of the initial pid namespace.
// Same kept object and errors as sample_kernel_tasks; the tgid map is left
// as the last brief pass set it.
Result<std::vector<procfs::ProcStat>> sample_process_identities();
// false (the default) also unloads a kept program now.
void keep_task_iterator_loaded(bool keep);

// libbpf's own messages on stderr: 0 none (default), 1 warnings and info
// (a failed load's verifier log is a warning), 2 also debug (CO-RE relocations).
void set_bpf_verbosity(int level);
// Routes libbpf's messages through that filter (every loader calls it first).
void install_bpf_print();

// Why BPF cannot be used here (not root, no CAP_BPF and CAP_PERFMON, no BTF,
// ...), or empty when it can.
std::string bpf_unavailable_reason();

// Whether this process has `cap` (CAP_BPF, ...) in its effective set.
bool has_capability(int cap);

}  // namespace hangtrace
