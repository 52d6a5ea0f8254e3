// The collector's threads: their state, syscalls and the memory those
// syscalls point at, the fds they wait on, the progress samples either side
// of the window, kernel stacks and off-CPU times (BPF) and native stacks.
#include <algorithm>
#include <cstring>
#include <future>
#include <system_error>
#include <unordered_map>

#include "collector_pass.h"
#include "hangtrace/kallsyms.h"
#include "hangtrace/syscalls.h"
#include "python_stacks.h"
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
    // Before the state and the syscall: what those say holds only if the
    // thread did not run again before the last progress sample.
    auto runs = proc_.thread_schedstat_fields(p.pid, tid);
    auto st = proc_.thread_stat(p.pid, tid, &err);
    if (!st) continue;  // the thread exited
    ThreadInfo t;
    if (runs) t.runs_at_read = runs->timeslices;
    t.tid = tid;
    t.comm = st->comm;
    t.state = st->state;
    if (auto status = proc_.thread_status(p.pid, tid)) {
      if (status->ns_pids.size() > 1) t.ns_tid = status->ns_pids.back();
      t.voluntary_switches = status->voluntary_ctxt_switches;
      t.involuntary_switches = status->nonvoluntary_ctxt_switches;
      if (status->tracer_pid > 0) {
        t.tracer_pid = status->tracer_pid;
        if (auto comm = proc_.comm(status->tracer_pid)) t.tracer_comm = trim(*comm);
      }
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
  auto cpu = proc_.thread_schedstat_fields(pid, tid);
  auto io = proc_.thread_io(pid, tid);
  if (!cpu || !io) return s;
  s.ok = true;
  s.cpu_ns = cpu->run_ns;
  s.runs = cpu->timeslices;
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
        t.runs_end = s.runs;
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
  // /proc/kallsyms (~5 MB of text the kernel writes out on each read: tens
  // of ms) is read and parsed while the task iterator loads and runs.
  const double started = monotonic_s();
  std::future<Result<KernelSymbols>> loading;
  try {
    loading =
        std::async(std::launch::async, [root = options_.proc_root] { return KernelSymbols::load(root); });
  } catch (const std::system_error&) {  // no thread to spare: read it after the iterator
  }
  auto samples = sample_kernel_tasks(tgids);
  const double sampled = monotonic_s();
  if (!samples) {
    limitation("no kernel stacks or blocked times: " + samples.error());
    return;
  }
  // The iterator measured every off-CPU time just now: that is the instant
  // "blocked for X s" counts back from.
  record_sample_clocks(snap_);
  auto symbols = loading.valid() ? loading.get() : KernelSymbols::load(options_.proc_root);
  if (!symbols) limitation("kernel stacks not symbolized: " + symbols.error());
  debug(fmt::format("task iterator in {:.3f} s ({} task(s)), kallsyms ready {:.3f} s later",
                    sampled - started, samples->size(), monotonic_s() - sampled));
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
      // The BPF copy of the registers, when /proc's reading does not stand.
      if (!memory_blocked_.count(p.pid) &&
          adopt_iterator_syscall(t, view, it->second->syscall_nr, it->second->syscall_args)) {
        WaitMemoryRead read = read_wait_memory(t.tid, t.syscall);
        t.memory = std::move(read.memory);
        auto& addresses = futex_addresses_[p.pid];
        addresses.insert(addresses.end(), read.futex_addresses.begin(), read.futex_addresses.end());
      }
      t.kernel = std::move(view);
    }
  }
}

// Per process: its maps, read once (a PyTorch process has ~2,000 mappings,
// 200 KB of text, and the Python runtime search and the native unwinder need
// them as much as the futex and /dev/shm resolution does), then its Python
// stacks, then its native stacks. Native stacks for every process of the
// tree, Python or not: a stuck C++ extension or a non-Python peer is as likely
// the culprit. Per-thread failures stay on the thread (python_stack_error,
// native_stack_error); only a whole process failing is a limitation.
void Collector::collect_maps_and_stacks() {
  NativeStackCache& cache = options_.native_cache ? *options_.native_cache : process_native_stack_cache();
  const bool native = options_.use_bpf && options_.native_stacks;
  const NativeStackStats before = cache.stats();
  double maps_s = 0, python_s = 0, native_s = 0;
  size_t mappings = 0;
  for (auto& p : snap_.processes) {
    if (memory_blocked_.count(p.pid) || exited_.count(p.pid)) continue;
    double t0 = monotonic_s();
    int err = 0;
    auto maps = proc_.maps(proc_id(p.pid), &err);
    if (!maps) {
      if (!is_gone_errno(err)) limitation(fmt::format("no memory maps of {}: {}", p.pid, maps.error()));
    } else {
      keep_maps(p, *maps);
      mappings += maps->size();
    }
    const std::vector<Mapping>* known = maps ? &*maps : nullptr;
    double t1 = monotonic_s();
    if (p.is_python) {
      std::string failure = collect_python_stacks(p, proc_, proc_id(p.pid), options_.python_symbols, known);
      if (!failure.empty()) limitation(fmt::format("Python stacks of {} not read: {}", p.pid, failure));
    }
    double t2 = monotonic_s();
    if (native) {
      std::string failure = cache.unwind_process(p, proc_id(p.pid), known);
      if (!failure.empty()) limitation(fmt::format("native stacks of {} not unwound: {}", p.pid, failure));
    }
    double t3 = monotonic_s();
    maps_s += t1 - t0;
    python_s += t2 - t1;
    native_s += t3 - t2;
  }
  const NativeStackStats st = cache.stats();
  debug(fmt::format("maps in {:.3f} s ({} mappings), Python stacks in {:.3f} s", maps_s, mappings, python_s));
  if (!native) return;
  debug(fmt::format(
      "native stacks in {:.3f} s: {} thread(s) unwound, {} failed, {} frames; modules reported {:.1f} ms "
      "({} Dwfl(s) new, {} reused), unwinding {:.1f} ms, symbolizing {:.1f} ms ({} symbol cache misses)",
      native_s, st.threads_unwound - before.threads_unwound, st.threads_failed - before.threads_failed,
      st.frames - before.frames, st.report_ms - before.report_ms, st.dwfl_created - before.dwfl_created,
      st.dwfl_reused - before.dwfl_reused, st.unwind_ms - before.unwind_ms,
      st.symbolize_ms - before.symbolize_ms, st.symbol_cache_misses - before.symbol_cache_misses));
}

}  // namespace hangtrace::collector_pass
