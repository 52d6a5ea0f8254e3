// The userspace half of the on-CPU sampler (bpf/cpu_samples.bpf.c): each
// HT_EV_CPU_SAMPLE names a traced thread that was on a CPU a moment ago; a
// worker thread of its own reads that thread's Python stack from outside the
// process (PythonThreadStacks: process_vm_readv, the process never stopped)
// and counts it. Where the process runs no Python, the thread has no Python
// thread state or frames, or the walk fails, the sample's native stack (the
// kernel's frame-pointer walk, carried in the record) is counted instead, to
// be symbolized when the window closes (LiveSession).
//
// Bounded: the ring-buffer callback only copies the record into a queue of
// kQueueSamples (past it a sample is counted unreadable), at most
// kMaxWalksPerSecond Python walks are made (the ones past it count as
// unreadable: a thread of a Python process would otherwise be credited with
// its interpreter's native frames), and the counts are capped per thread and
// in threads (hangtrace/cpu_samples.h).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "hangtrace/abi.h"
#include "hangtrace/live.h"
#include "hangtrace/procfs.h"

namespace hangtrace {

class PythonThreadStacks;

class CpuSampler {
 public:
  static constexpr size_t kQueueSamples = 4096;
  // ~30 us each: at most ~6 % of a core on walks.
  static constexpr uint32_t kMaxWalksPerSecond = 2000;
  // A process whose interpreter could not be found is asked again (it may
  // not have initialized Python yet) after 1 s, then twice as long each
  // time, up to kMaxRetryOpenNs: a native process is looked at rarely.
  static constexpr uint64_t kRetryOpenNs = 1'000'000'000;
  static constexpr uint64_t kMaxRetryOpenNs = 64'000'000'000;
  // Distinct native stacks kept in all (each up to HT_SAMPLE_USER_FRAMES addresses).
  static constexpr size_t kMaxNativeStacks = 32768;

  explicit CpuSampler(uint32_t hz, std::string proc_root = "/proc");
  ~CpuSampler();
  CpuSampler(const CpuSampler&) = delete;
  CpuSampler& operator=(const CpuSampler&) = delete;

  // From the ring buffer's callback: queues the record; never blocks on a walk.
  void add(const void* data, size_t size);
  // The process exec'd: whatever interpreter it ran is gone.
  void forget(int tgid);

  // A sample counted by its native stack, symbolized later.
  struct NativeSample {
    int tgid = 0, tid = 0;
    int32_t kstack_id = -1;
    std::vector<uint64_t> ustack;  // innermost first
    uint64_t count = 0;
  };
  struct Taken {
    CpuSamples samples;  // the Python stacks counted, and every total
    std::vector<NativeSample> native;
  };
  // Stops the worker once the queued samples are counted, and hands over
  // what it counted; later records are ignored.
  Taken take();

 private:
  struct Sample {
    int tgid, tid;
    int32_t kstack_id;
    uint32_t ustack_len;
    uint64_t ustack[HT_SAMPLE_USER_FRAMES];
  };
  struct Process {
    std::unique_ptr<PythonThreadStacks> python;
    uint64_t retry_ns = 0;  // no interpreter found: when to look again
    uint64_t backoff_ns = 0;
  };
  using NativeKey = std::pair<int32_t, std::vector<uint64_t>>;

  void run();
  void count(const Sample& s, uint64_t now_ns);
  void count_native(const Sample& s);

  const uint32_t hz_;
  procfs::ProcFs fs_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Sample> queue_;    // guarded by mu_
  std::vector<int> forgotten_;  // guarded by mu_
  bool stop_ = false;           // guarded by mu_
  uint64_t overflow_ = 0;       // guarded by mu_: samples the full queue turned away
  std::thread worker_;
  // The worker's own, read by take() after it is joined.
  CpuSamples counted_;
  std::map<int, Process> processes_;
  std::map<int, std::pair<int, std::map<NativeKey, uint64_t>>> native_;  // tid -> (tgid, counts)
  size_t native_keys_ = 0;
  uint64_t window_start_ns_ = 0;
  uint32_t window_walks_ = 0;
  bool taken_ = false;
};

}  // namespace hangtrace
