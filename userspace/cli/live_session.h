// A live-tracing window for the CLI: the tracer, the aggregator, and the
// bookkeeping that must happen while processes are still alive (their
// cgroup, their /dev/shm usage when they hit ENOSPC or SIGBUS).
#pragma once

#include <atomic>
#include <functional>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "hangtrace/kallsyms.h"
#include "hangtrace/live.h"
#include "hangtrace/procfs.h"
#include "hangtrace/result.h"
#include "live_tracer.h"
#include "nvml_sampler.h"

namespace hangtrace {

class LiveSession {
 public:
  static Result<std::unique_ptr<LiveSession>> start(const std::vector<int>& tgids,
                                                    const LiveOptions& options);

  // Polls the ring buffer until `stop()` is true or `interrupted` is set;
  // `stop` is checked about every 100 ms.
  void run_until(const std::function<bool()>& stop, const std::atomic<bool>& interrupted);
  void trace(int tgid);
  // Closes the window and resolves the stack ids its records name: kernel
  // ones from kallsyms, user ones with `symbolize_user` (thread, addresses
  // innermost first; when unset they stay unnamed addresses).
  // Names user frames: `frames` come with addr, file (the module) and
  // module_offset (the file offset) filled in from the process's executable
  // mappings; it fills in function (and build_id) where it can.
  using UserSymbolizer = std::function<void(std::vector<UserFrame>& frames)>;
  LiveObservation finish(const UserSymbolizer& symbolize_user = {});
  const std::set<int>& traced() const { return traced_; }
  // Each traced thread's CUDA / NCCL state now (the gpu concern's map).
  std::vector<GpuThreadState> gpu_threads() const;
  uint64_t now_ns() const;

 private:
  void on_record(const void* data, size_t size);
  // /dev/shm usage as `pid` sees it; when `pid` is already gone, through a
  // live traced process in the same mount namespace, else the last reading.
  void note_shm_usage(int pid);
  // Records arrive in batches, after the fact: a /dev/shm that filled up and
  // was freed again by the time a SIGBUS record is read must still show full,
  // so the usage of every /dev/shm the job touched is sampled on each poll.
  void sample_shm();
  // User frames against the executable mappings the tracer kept of each
  // traced process (read again first: the last look at the living).
  void resolve_stacks(LiveObservation& o, const UserSymbolizer& symbolize_user);
  // The samples counted by native stack, named and added to o.cpu_samples.
  void resolve_cpu_samples(LiveObservation& o, const std::vector<CpuSampler::NativeSample>& native,
                           const UserSymbolizer& symbolize_user);
  // A stack id's kernel frames (without our own BPF frames), and a user
  // stack's addresses against process `tgid`'s executable mappings.
  std::vector<KernelFrame> kernel_frames(int32_t id, const KernelSymbols* symbols) const;
  std::vector<UserFrame> user_frames(int tgid, const std::vector<uint64_t>& addrs) const;
  struct ShmSample {
    uint64_t ts_ns, used, size;
  };
  std::map<uint64_t, std::deque<ShmSample>> shm_samples_;  // mount ns -> recent samples
  std::map<uint64_t, int> shm_sampler_pid_;                // mount ns -> a live process in it
  // Each traced thread's schedstat: the stall profile's time on CPU.
  void sample_thread_times(bool window_start);
  // The mounts the window's file waits went to (mountinfo of their processes).
  std::map<int, ThreadTimes> thread_times_;
  std::map<int, procfs::Schedstat> first_schedstat_;
  uint64_t last_times_ns_ = 0;
  std::unique_ptr<LiveTracer> tracer_;
  std::unique_ptr<NvmlSampler> nvml_;
  Aggregator aggregator_;
  std::set<int> traced_;
  uint64_t start_ns_ = 0;
  uint64_t undecodable_ = 0;
  // A poll that returns fewer records than this is followed by a 1 ms pause.
  static constexpr int kBatchRecords = 512;
};

}  // namespace hangtrace
