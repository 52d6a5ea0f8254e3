// The collector's threads: their state, syscalls and the memory those
// syscalls point at, the fds they wait on, the progress samples either side
// of the window, kernel stacks and off-CPU times (BPF) and native stacks.
#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "collector_pass.h"
#include "hangtrace/kallsyms.h"
#include "hangtrace/syscalls.h"
#include "task_iter.h"
#include "wait_memory.h"

namespace hangtrace::collector_pass {

void Collector::collect_threads(ProcessInfo& p) {
  int err = 0;
  auto tids = proc_.tids(p.pid, &err);
  if (!tids) {
    if (!is_gone_errno(err)) limitation(fmt::format("no threads of {}: {}", p.pid, tids.error()));
    return;
  }
  for (int tid : *tids) {
    auto st = proc_.thread_stat(p.pid, tid, &err);
    if (!st) continue;  // the thread exited
    ThreadInfo t;
    t.tid = tid;
    t.comm = st->comm;
    t.state = st->state;
    if (auto status = proc_.thread_status(p.pid, tid)) {
      t.voluntary_switches = status->voluntary_ctxt_switches;
      t.involuntary_switches = status->nonvoluntary_ctxt_switches;
    }
    auto sc = proc_.thread_syscall(p.pid, tid, &err);
    if (sc) {
      t.syscall = *sc;
    } else if (!is_gone_errno(err) && p.state != 'Z') {
      limitation(fmt::format("syscalls of the threads of {} unknown: {}", p.pid,
                             err ? std::strerror(err) : sc.error()));
    }
    if (!memory_blocked_.count(p.pid)) {
      WaitMemoryRead read = read_wait_memory(t.tid, t.syscall);
      t.memory = std::move(read.memory);
      auto& addresses = futex_addresses_[p.pid];
      addresses.insert(addresses.end(), read.futex_addresses.begin(), read.futex_addresses.end());
    }
    p.threads.push_back(std::move(t));
  }
}

std::vector<int> Collector::waited_fds(const ProcessInfo& p, const ThreadInfo& t) const {
  std::vector<int> fds = directly_waited_fds(t.syscall, t.memory);
  if (t.syscall.mode == SyscallState::Mode::InSyscall &&
      describe_syscall(t.syscall.nr).wait == WaitClass::Epoll) {
    int epfd = static_cast<int>(t.syscall.args[0]);
    for (const auto& f : p.fds) {
      if (f.fd != epfd) continue;
      for (const auto& w : f.epoll) fds.push_back(w.target_fd);
    }
  }
  std::sort(fds.begin(), fds.end());
  fds.erase(std::unique(fds.begin(), fds.end()), fds.end());
  return fds;
}

ProgressSample Collector::sample_progress(int pid, int tid) const {
  ProgressSample s;
  auto cpu = proc_.thread_schedstat(pid, tid);
  auto io = proc_.thread_io(pid, tid);
  if (!cpu || !io) return s;
  s.ok = true;
  s.cpu_ns = *cpu;
  s.io_bytes = io->rchar + io->wchar;
  return s;
}

void Collector::take_progress_samples(bool start) {
  for (auto& p : snap_.processes) {
    for (auto& t : p.threads) {
      ProgressSample s = sample_progress(p.pid, t.tid);
      if (start) {
        t.progress_sampled = s.ok;
        t.cpu_ns_start = t.cpu_ns_end = s.cpu_ns;
        t.io_bytes_start = t.io_bytes_end = s.io_bytes;
      } else if (t.progress_sampled) {
        if (!s.ok) {
          t.progress_sampled = false;  // exited in between: no second sample
          continue;
        }
        t.cpu_ns_end = s.cpu_ns;
        t.io_bytes_end = s.io_bytes;
      }
    }
  }
}

void Collector::collect_kernel_views() {
  std::string unavailable = bpf_unavailable_reason();
  if (!unavailable.empty()) {
    limitation("no kernel stacks or blocked times: " + unavailable);
    return;
  }
  std::vector<int> tgids;
  for (const auto& p : snap_.processes) tgids.push_back(p.pid);
  auto samples = sample_kernel_tasks(tgids);
  if (!samples) {
    limitation("no kernel stacks or blocked times: " + samples.error());
    return;
  }
  // The iterator measured every off-CPU time just now: that is the instant
  // "blocked for X s" counts back from.
  record_sample_clocks(snap_);
  auto symbols = KernelSymbols::load(options_.proc_root);
  if (!symbols) limitation("kernel stacks not symbolized: " + symbols.error());
  std::unordered_map<int, KernelTaskSample*> by_tid;
  for (auto& s : *samples) by_tid[s.tid] = &s;
  for (auto& p : snap_.processes) {
    for (auto& t : p.threads) {
      auto it = by_tid.find(t.tid);
      if (it == by_tid.end()) continue;
      KernelTaskView view = it->second->view;
      if (symbols) {
        for (auto& frame : view.stack) frame.symbol = symbols->symbolize(frame.addr);
      }
      // /proc said nothing (unreadable): the BPF copy of the registers can.
      if (t.syscall.mode == SyscallState::Mode::Unknown && it->second->syscall_nr >= 0 &&
          !memory_blocked_.count(p.pid)) {
        t.syscall.mode = SyscallState::Mode::InSyscall;
        t.syscall.nr = it->second->syscall_nr;
        std::copy(std::begin(it->second->syscall_args), std::end(it->second->syscall_args), t.syscall.args);
        t.syscall.sp = view.user_sp;
        t.syscall.pc = view.user_ip;
        WaitMemoryRead read = read_wait_memory(t.tid, t.syscall);
        t.memory = std::move(read.memory);
        auto& addresses = futex_addresses_[p.pid];
        addresses.insert(addresses.end(), read.futex_addresses.begin(), read.futex_addresses.end());
      }
      t.kernel = std::move(view);
    }
  }
}

// Every process of the tree, Python or not: a stuck C++ extension or a
// non-Python peer is as likely the culprit. Per-thread failures stay on the
// thread (native_stack_error); only a whole process failing is a limitation.
void Collector::collect_native_stacks() {
  NativeStackCache& cache = options_.native_cache ? *options_.native_cache : process_native_stack_cache();
  const double started = monotonic_s();
  for (auto& p : snap_.processes) {
    if (memory_blocked_.count(p.pid) || exited_.count(p.pid)) continue;
    std::string failure = cache.unwind_process(p, proc_id(p.pid));
    if (!failure.empty()) limitation(fmt::format("native stacks of {} not unwound: {}", p.pid, failure));
  }
  const NativeStackStats st = cache.stats();
  debug(fmt::format("native stacks in {:.3f} s (cumulative: {} thread(s) unwound, {} failed, {} frames)",
                    monotonic_s() - started, st.threads_unwound, st.threads_failed, st.frames));
}

}  // namespace hangtrace::collector_pass
