#include "live_session.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "hangtrace/kallsyms.h"
#include "hangtrace/profile.h"

#include <time.h>

#include "hangtrace/abi.h"
#include "process_meta.h"

namespace hangtrace {

uint64_t LiveSession::now_ns() const {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

Result<std::unique_ptr<LiveSession>> LiveSession::start(const std::vector<int>& tgids,
                                                        const LiveOptions& options) {
  LiveOptions o = options;
  o.tgids = tgids;
  // User stack addresses mean something only against their process's
  // mappings, and the process may be gone when the window closes: the
  // tracer keeps every traced process's executable mappings, re-read while
  // tracing (mapped_modules.h).
  o.module_rescan = ModuleRescan::Window;
  auto tracer = LiveTracer::start(o);
  if (!tracer) return make_error(tracer.error());
  std::unique_ptr<LiveSession> s(new LiveSession());
  s->tracer_ = std::move(*tracer);
  s->start_ns_ = s->now_ns();
  s->aggregator_.set_window_start(s->start_ns_);
  // Device counters while tracing; without the NVIDIA driver this is one
  // status line in the report.
  s->nvml_ = NvmlSampler::open();
  s->nvml_->start();
  for (int pid : tgids) s->trace(pid);
  s->sample_thread_times(true);
  return s;
}

void LiveSession::sample_thread_times(bool window_start) {
  last_times_ns_ = now_ns();
  read_thread_times(procfs::ProcFs(), traced_, last_times_ns_, window_start, thread_times_, first_schedstat_);
}

std::vector<GpuThreadState> LiveSession::gpu_threads() const {
  LiveObservation o;
  tracer_->contribute(o);
  return std::move(o.gpu.threads);
}

void LiveSession::trace(int tgid) {
  if (!traced_.insert(tgid).second) return;
  tracer_->trace_tgid(tgid);
  aggregator_.set_meta(read_process_meta(tgid));
}

void LiveSession::on_record(const void* data, size_t size) {
  // Futex waits and wakes and blocking syscalls (nearly all records) need no
  // bookkeeping here: the aggregator takes them from the raw bytes.
  switch (aggregator_.add_raw(data, size)) {
    case Aggregator::Raw::Added:
      return;
    case Aggregator::Raw::Undecodable:
      ++undecodable_;
      return;
    case Aggregator::Raw::NotHot:
      break;
  }
  auto event = decode_event(data, size);
  if (!event) {
    ++undecodable_;
    return;
  }
  const TraceEvent& e = *event;
  switch (e.type) {
    case HT_EV_PROC_FORK:
      // The kernel already follows it (and the tracer has read its
      // mappings); read what must be read while it lives.
      if (e.child_tgid && traced_.insert(e.child_tgid).second)
        aggregator_.set_meta(read_process_meta(e.child_tgid));
      break;
    case HT_EV_PROC_EXEC:
      aggregator_.set_meta(read_process_meta(e.tgid));
      break;
    case HT_EV_SIGNAL:
      if (e.sig == 7) note_shm_usage(e.tgid);  // SIGBUS: how full is its /dev/shm?
      break;
    case HT_EV_SHM:
      // Measured in the kernel at the event: exact even when the process (and
      // its mount namespace) is gone by the time the record is read.
      if (e.fs_size) {
        aggregator_.note_shm_usage(e.tgid, e.fs_used, e.fs_size);
      } else {
        note_shm_usage(e.tgid);
      }
      break;
    default:
      break;
  }
  aggregator_.add(e);
}

void LiveSession::sample_shm() {
  for (auto it = shm_sampler_pid_.begin(); it != shm_sampler_pid_.end(); ++it) {
    ShmSample sample{0, 0, 0};
    bool have = false;
    auto read = [&](int pid) {
      if (auto u = shm_usage_of(pid)) {
        sample.used = u->first;
        sample.size = u->second;
        have = true;
      }
    };
    read(it->second);
    // That process is gone: sample through another traced one in the namespace.
    for (auto pid = traced_.begin(); !have && pid != traced_.end(); ++pid) {
      const ProcessMeta* m = aggregator_.meta(*pid);
      if (*pid != it->second && m && m->mount_ns == it->first) {
        read(*pid);
        if (have) it->second = *pid;
      }
    }
    if (!have) continue;
    sample.ts_ns = now_ns();
    auto& q = shm_samples_[it->first];
    q.push_back(sample);
    if (q.size() > 32) q.pop_front();
  }
}

void LiveSession::note_shm_usage(int pid) {
  const ProcessMeta* m = aggregator_.meta(pid);
  uint64_t ns = m ? m->mount_ns : 0;
  if (ns && !shm_sampler_pid_.count(ns)) {
    shm_sampler_pid_[ns] = pid;
    sample_shm();
  }
  // The fullest the namespace's /dev/shm was in the last 2 s, or now.
  std::optional<std::pair<uint64_t, uint64_t>> best = shm_usage_of(pid);
  if (auto it = shm_samples_.find(ns); it != shm_samples_.end()) {
    uint64_t horizon = now_ns() - 2'000'000'000ull;
    for (const auto& smp : it->second)
      if (smp.ts_ns >= horizon && (!best || smp.used > best->first))
        best = std::make_pair(smp.used, smp.size);
  }
  if (best) aggregator_.note_shm_usage(pid, best->first, best->second);
}

void LiveSession::run_until(const std::function<bool()>& stop, const std::atomic<bool>& interrupted) {
  auto sink = [this](const void* data, size_t size) { on_record(data, size); };
  while (!interrupted.load() && !stop()) {
    int n = tracer_->poll(100, sink);
    sample_shm();
    // A thread that dies in the window keeps the CPU time of its last reading.
    if (now_ns() - last_times_ns_ >= 1'000'000'000ull) sample_thread_times(false);
    // The ring buffer reads as ready as soon as it holds one record (the
    // kernel's wakeup threshold spares only a consumer already asleep), so
    // under a steady stream epoll returns at once with a handful of records
    // each time, and every round costs epoll_wait + waitpid -- with the BPF
    // programs that run on each of our own syscalls -- for a few records.
    // Let a batch pile up instead: 1 ms is ~90 KiB at 1 M records/s against
    // a ring buffer of megabytes, and nothing waits on these records sooner.
    if (n > 0 && n < kBatchRecords) {
      timespec pause{0, 1'000'000};
      nanosleep(&pause, nullptr);
    }
  }
  // Drain what is already queued.
  for (int i = 0; i < 8 && tracer_->poll(0, sink) > 0; ++i) {
  }
}

LiveObservation LiveSession::finish(const UserSymbolizer& symbolize_user) {
  sample_thread_times(false);
  LiveObservation o = aggregator_.finish(start_ns_, now_ns(), tracer_->counter(HT_CNT_EVENTS),
                                         tracer_->counter(HT_CNT_DROPPED));
  o.thread_times = thread_times_;
  read_file_mounts(procfs::ProcFs(), o);
  o.undecodable = undecodable_;
  o.stacks_lost = tracer_->counter(HT_CNT_STACKS_LOST);
  tracer_->contribute(o);
  if (nvml_) {
    nvml_->stop();
    nvml_->sample_once();  // a window shorter than the interval still gets a reading at its end
    nvml_->contribute(o.gpu);
  }
  for (const auto& h : tracer_->hooks())
    o.hooks.push_back({h.concern, h.program, h.attach, h.active, h.reason});
  CpuSampler::Taken cpu = tracer_->take_cpu_samples();
  o.cpu_samples = std::move(cpu.samples);
  resolve_stacks(o, symbolize_user);
  resolve_cpu_samples(o, cpu.native, symbolize_user);  // live_session_samples.cpp
  return o;
}

void LiveSession::resolve_stacks(LiveObservation& o, const UserSymbolizer& symbolize_user) {
  std::set<int32_t> kernel_ids;
  std::set<std::pair<int, int32_t>> user_ids;  // (thread whose maps apply, id)
  for (const auto& [tid, intervals] : o.blocked)
    for (const auto& b : intervals) {
      if (b.kstack_id >= 0) kernel_ids.insert(b.kstack_id);
      if (b.ustack_id >= 0) user_ids.insert({tid, b.ustack_id});
    }
  auto add_waker = [&](const TraceEvent& e) {
    if (e.kstack_id >= 0) kernel_ids.insert(e.kstack_id);
    if (e.ustack_id >= 0 && e.waker_tid > 0) user_ids.insert({e.waker_tid, e.ustack_id});
  };
  for (const auto& [wakee, e] : o.last_waker) add_waker(e);
  for (const auto& [tid, totals] : o.wait_totals)
    for (const auto& t : totals) {
      if (t.kstack_id >= 0) kernel_ids.insert(t.kstack_id);
      if (t.ustack_id >= 0) user_ids.insert({tid, t.ustack_id});
    }
  for (const auto& [wakee, q] : o.recent_wakeups)
    for (const auto& e : q) add_waker(e);
  if (!kernel_ids.empty()) {
    auto symbols = KernelSymbols::load();
    for (int32_t id : kernel_ids) {
      std::vector<KernelFrame> frames = kernel_frames(id, symbols ? &*symbols : nullptr);
      if (!frames.empty()) o.kernel_stacks[id] = std::move(frames);
    }
  }
  tracer_->refresh_mapped_modules();  // the last look at the living
  const MappedModules& mapped = tracer_->mapped_modules();
  for (const auto& [tid, id] : user_ids) {
    std::vector<UserFrame> frames = user_frames(mapped.tgid_of(tid), tracer_->stack(id));
    if (frames.empty()) continue;
    if (symbolize_user) symbolize_user(frames);
    o.user_stacks[{tid, id}] = std::move(frames);
  }
}

std::vector<KernelFrame> LiveSession::kernel_frames(int32_t id, const KernelSymbols* symbols) const {
  std::vector<KernelFrame> frames;
  for (uint64_t addr : tracer_->stack(id)) {
    std::string name = symbols ? symbols->symbolize(addr) : std::string();
    const bool ours = name.starts_with("bpf_prog_") || name.starts_with("bpf_trace_run") ||
                      name.starts_with("__bpf_trace_") || name.starts_with("bpf_get_stack");
    // The stack was walked from inside our own program: its innermost
    // frames are the BPF trampoline and program, not the traced task's.
    if (frames.empty() && ours) continue;
    // Further out, one of our programs was what an interrupt interrupted (a
    // timer's wakeup taken while another task ran our sys_exit hook): what
    // lies beyond is that task's tracing, not the waker's.
    if (ours) break;
    frames.push_back({addr, std::move(name)});
  }
  return frames;
}

std::vector<UserFrame> LiveSession::user_frames(int tgid, const std::vector<uint64_t>& addrs) const {
  const MappedModules& mapped = tracer_->mapped_modules();
  const std::vector<Mapping>* code = mapped.code_maps(tgid);
  std::vector<UserFrame> frames;
  for (uint64_t addr : addrs) {
    UserFrame f;
    f.addr = addr;
    if (code) {
      // The kernel walks user stacks by frame pointer; code built without
      // them (libc's syscall wrappers, most of a distribution) leaves the
      // walk on garbage after a frame or two: an address outside every
      // executable mapping ends the stack.
      auto m = std::find_if(code->begin(), code->end(),
                            [&](const Mapping& m) { return addr >= m.start && addr < m.end; });
      if (m == code->end()) break;
      f.file = m->path;
      f.module_offset = addr - m->start + m->offset;
    }
    frames.push_back(std::move(f));
  }
  return frames;
}

}  // namespace hangtrace
