// Live tracing: every bpf/<concern>.bpf.c object, loaded together over shared
// maps (traced set, ring buffer, counters, stacks), streaming records to a
// callback. Nothing is pinned: every link and map is owned by an fd of this
// process, so an exit, a crash or SIGKILL detaches everything.
#pragma once

#include <bpf/libbpf.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cpu_sampler.h"
#include "hangtrace/live.h"
#include "hangtrace/result.h"
#include "mapped_modules.h"

namespace hangtrace {

struct LiveOptions {
  std::vector<int> tgids;               // initial traced set
  uint64_t min_block_ns = 5'000'000;    // blocking syscalls/futex waits shorter than this are not streamed
  uint64_t ringbuf_bytes = 8u << 20;    // power of two
  uint32_t stack_map_entries = 16384;   // buckets of the shared stack map (see live_tracer.cpp)
  uint64_t wakeup_bytes = 64u << 10;    // ring buffer wakes userspace past this much data
  uint64_t rss_step_bytes = 64u << 20;  // an RSS event each time RSS moves this much
  // On-CPU samples of the traced threads per second per CPU (the
  // cpu_samples concern, cpu_sampler.h); 0: no sampler.
  uint32_t sample_hz = 0;
  // With sample_hz: the sampler's perf events are opened only by
  // set_cpu_sampling(true) (the daemon's on-demand profile), not at start.
  bool sample_on_demand = false;
  // Futex wakes are streamed at most once per thread and futex word this
  // often (0: every wake); who woke whom is counted exactly in kernel anyway.
  uint64_t futex_wake_sample_ns = 10'000'000;
  // false: wakeups are only counted in kernel and futex wakes not streamed
  // (the daemon's steady state: nothing per wake).
  bool stream_wakes = true;
  // Every wait that slept goes into in-kernel histograms (live_histograms.h).
  bool blocked_histograms = false;
  uint32_t histogram_entries = 16384;  // (process, wait kind, main thread) entries
  // /dev/shm: only failed calls and faults on a nearly full tmpfs are
  // streamed (the daemon), not every segment a DataLoader makes per batch.
  bool shm_trouble_only = false;
  // false: the hooks that run on every syscall, context switch and wakeup
  // of the machine (sys_enter/sys_exit, sched_switch, sched_waking) load but
  // stay detached until set_hot_hooks(true) -- the daemon's sampled steady
  // state, which costs a traced process nothing per call.
  bool hot_hooks = true;
  // Waits under min_block_ns are summed per thread and streamed
  // (HT_EV_SHORT_WAITS; a stall profile counts them); set_short_waits
  // switches it later (the daemon's on-demand profile).
  bool short_waits = false;
  // When the tracer reads the traced processes' mappings for the libraries
  // its concerns attach to (mapped_modules.h); Manual: only what
  // notice_mapped_file hands in.
  ModuleRescan module_rescan = ModuleRescan::Manual;
  int verbosity = 0;
};

// One hook of one concern, for the "which hooks are active" listing.
struct HookStatus {
  std::string concern;  // "futex", "process", ...
  std::string program;  // "sched_process_fork_btf"
  std::string attach;   // "tp_btf/sched_process_fork"
  bool active = false;
  std::string reason;  // why not active ("tp_btf unavailable: ...", "fentry upgrade not supported")
};

// The fds of the maps every concern shares (created once, before any load).
struct SharedMaps {
  int events = -1, traced_tgids = -1, counters = -1, stacks = -1;
  // Task storage (sched's wake batches, bpf/wake_batch.bpf.h) needs the BTF
  // of its value, so it is not created here: the first object loaded with
  // it creates it and adopt_created() keeps a duplicate of its fd for the
  // objects loaded after. Closed by LiveTracer.
  mutable int wake_batches = -1;
  // Points `obj`'s maps of these names at the shared fds; call before load.
  Result<bool> reuse_in(struct bpf_object* obj) const;
  // After `obj` loaded: the lazily shared maps it created.
  void adopt_created(struct bpf_object* obj) const;
};

// A concern: one BPF object (skeleton) and its hooks. Implementations live in
// userspace/collect/live_<concern>.cpp and are listed in live_tracer.cpp.
class TracerModule {
 public:
  virtual ~TracerModule() = default;
  virtual const char* name() const = 0;
  // open -> reuse shared maps -> set rodata -> probe -> set autoload -> load.
  virtual Result<bool> load(const SharedMaps& maps, const LiveOptions& options) = 0;
  // Attaches what loaded; failures of optional hooks are recorded, not fatal.
  virtual Result<bool> attach() = 0;
  virtual std::vector<HookStatus> hooks() const = 0;
  // A library (mapped_modules.h: libcuda, libnccl, CUPTI's) that traced
  // process `pid` maps executable, seen when its mappings are (re)read;
  // `path` is as that process sees it (open it through ProcFs::root_path).
  // Concerns that put uprobes on libraries attach to theirs here, also to
  // libraries loaded after the start.
  virtual void notice_mapped_file(int /*pid*/, const std::string& /*path*/) {}
  // Attaches (true) or detaches the concern's hot hooks (LiveOptions::hot_hooks).
  virtual Result<bool> set_hot_hooks(bool /*on*/) { return true; }
  // Starts or stops summing short waits (LiveOptions::short_waits).
  virtual void set_short_waits(bool /*on*/) {}
  // Opens or closes the on-CPU sampler's perf events (LiveOptions::sample_on_demand).
  virtual Result<bool> set_cpu_sampling(bool /*on*/) { return true; }
  // Adds what the concern keeps in its own maps rather than streaming (a
  // call still in progress) to the observation, when the window closes.
  virtual void contribute(LiveObservation& /*o*/) const {}
};

class LiveTracer {
 public:
  static Result<std::unique_ptr<LiveTracer>> start(const LiveOptions& options);
  ~LiveTracer();

  // Waits up to timeout_ms for records and hands each to `on_record` (raw
  // bytes starting with ht_event_header); then re-reads the mappings that
  // LiveOptions::module_rescan says are due. Returns records consumed or -errno.
  int poll(int timeout_ms, const std::function<void(const void* data, size_t size)>& on_record);
  // Traces `tgid` (and reads its mappings, see module_rescan). The processes
  // traced ones fork are traced by the kernel already, and their mappings
  // read when the fork record passes by; so are those of an exec.
  void trace_tgid(int tgid);
  // After a traced process exited and its last records were read: the
  // traced set is a bounded hash, and a long-running tracer (the daemon)
  // sees thousands of workers come and go; a reused pid is not traced.
  void untrace_tgid(int tgid);
  std::vector<HookStatus> hooks() const;
  // Attaches or detaches every concern's hot hooks (see LiveOptions::hot_hooks).
  Result<bool> set_hot_hooks(bool on);
  bool hot_hooks_attached() const { return hot_; }
  // Starts or stops HT_EV_SHORT_WAITS (LiveOptions::short_waits).
  void set_short_waits(bool on);
  // A file `pid` maps, by hand (what module_rescan would find): handed to
  // the concerns when it is one of their libraries, once per (pid, path).
  void notice_mapped_file(int pid, const std::string& path);
  // The traced processes' libraries and (live window) executable mappings.
  const MappedModules& mapped_modules() const { return *mapped_; }
  // Reads every traced process's mappings now (before resolving user stacks).
  void refresh_mapped_modules() { mapped_->refresh_all(); }
  // TracerModule::contribute for every concern, and the CUDA processes seen.
  void contribute(LiveObservation& o) const;
  uint64_t counter(int index) const;  // summed over CPUs (enum ht_counter)
  // The on-CPU samples (LiveOptions::sample_hz): stops the sampler and hands
  // over its counts, native stacks still as addresses. hz 0 when it did not run.
  CpuSampler::Taken take_cpu_samples();
  // LiveOptions::sample_on_demand: on opens the perf events and starts a
  // fresh sampler (take_cpu_samples() ends it); off closes them. false
  // when the concern did not load.
  bool set_cpu_sampling(bool on);
  // Symbolized later by the caller; raw addresses of a stack id, innermost first.
  std::vector<uint64_t> stack(int32_t stack_id) const;

 private:
  LiveTracer() = default;
  SharedMaps maps_;
  std::vector<std::unique_ptr<TracerModule>> modules_;
  struct ring_buffer* ring_ = nullptr;
  std::function<void(const void*, size_t)>* sink_ = nullptr;
  std::vector<HookStatus> failed_;  // concerns that did not load or attach, with why
  bool hot_ = true;
  std::unique_ptr<MappedModules> mapped_;
  std::unique_ptr<CpuSampler> sampler_;  // when the cpu_samples concern is active
  uint32_t sample_hz_ = 0;
  // Follows forks and execs in the records, for mapped_.
  void follow_processes(const void* data, size_t size);
};

}  // namespace hangtrace
