// gpu-starved and gpu-wait: the GPU's side of the story, paired with what the
// host threads that feed it are blocked on.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "hangtrace/abi.h"
#include "hangtrace/gpu.h"
#include "hangtrace/text.h"
#include "rules.h"

namespace hangtrace::rules {

namespace {

// Where "now" is for the observation: the end of the live window, else the snapshot.
uint64_t observed_until_ns(const RuleContext& ctx) {
  if (ctx.live && ctx.live->end_ns) return ctx.live->end_ns;
  return ctx.snap.sampled_at_monotonic_ns;
}

// Native frames of a CUDA call that waits for the device (driver or runtime API).
const char* native_host_wait(const std::string& function) {
  static const char* const kWaits[] = {
      "cuCtxSynchronize",      "cuStreamSynchronize",   "cuEventSynchronize",
      "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
      "cuMemcpyDtoH",          "cuMemcpyHtoD",          "cudaMemcpy",
      "cudaThreadSynchronize", "cuStreamWaitValue",     "ncclCommDestroy",
  };
  for (const char* w : kWaits) {
    size_t n = std::char_traits<char>::length(w);
    // cuMemcpyDtoH_v2, cuStreamSynchronize_ptsz, but not cudaMemcpyAsync.
    if (function.compare(0, n, w) == 0 && function.find("Async") == std::string::npos) return w;
  }
  return nullptr;
}

// Python frames that synchronize with the device (torch/cuda/__init__.py, streams.py).
bool python_host_wait(const UserFrame& f) {
  return f.function == "synchronize" && (f.file.find("torch/cuda/") != std::string::npos ||
                                         f.file.find("torch\\cuda\\") != std::string::npos);
}

// "; 71 W; 70.0 of 140.0 GiB used", with what NVML could read.
std::string power_and_memory(const NvmlSample& s) {
  std::string out;
  if (s.has_power) out += fmt::format("; {:.0f} W", s.power_mw / 1000.0);
  if (s.has_memory)
    out += fmt::format("; {:.1f} of {:.1f} GiB used", s.mem_used_bytes / 1073741824.0,
                       s.mem_total_bytes / 1073741824.0);
  return out;
}

struct IdleReading {
  bool known = false;  // some source could tell
  bool nvml = false;   // NVML was one of them
  bool idle = true;    // every source that could tell says idle
  std::vector<std::string> evidence;
};

// Is the GPU idle at the end of the observation? NVML utilization, CUPTI
// activity and the launches the uprobes saw each answer when they can.
IdleReading gpu_idle(const RuleContext& ctx) {
  IdleReading r;
  const LiveObservation* live = ctx.live;
  if (!live) return r;
  const GpuObservation& g = live->gpu;
  uint64_t end = observed_until_ns(ctx);
  double window_s = live->duration_s;
  // NVML: the devices' utilization over the end of the window (a long
  // window, as in launch mode, holds the busy time before the stall too).
  uint64_t recent_ns = static_cast<uint64_t>(ctx.opt.gpu_idle_recent_s * 1e9);
  uint64_t recent_from = std::max(live->start_ns, end > recent_ns ? end - recent_ns : 0);
  if (!g.nvml.empty()) {
    std::map<unsigned, std::pair<unsigned, unsigned>> max_and_count;  // device -> (max util, samples)
    std::map<unsigned, NvmlSample> last;
    for (const auto& s : g.nvml) {
      if (s.ts_ns < recent_from || !s.has_utilization) continue;
      auto& [mx, n] = max_and_count[s.device];
      mx = std::max(mx, s.gpu_util_pct);
      ++n;
      last[s.device] = s;
    }
    for (const auto& [dev, mc] : max_and_count) {
      r.known = r.nvml = true;
      const NvmlSample& s = last[dev];
      std::string name;
      for (const auto& d : g.nvml_devices)
        if (d.index == dev) name = d.name;
      bool idle = mc.first <= ctx.opt.gpu_idle_util_pct;
      if (!idle) r.idle = false;
      r.evidence.push_back(
          fmt::format("NVML: GPU {}{} utilization at most {}% in {} samples over the last {}{}", dev,
                      name.empty() ? "" : " (" + name + ")", mc.first, mc.second,
                      format_short_duration((end - recent_from) / 1e9), power_and_memory(s)));
    }
  }
  // CUPTI: when the device last did anything.
  bool cupti_on = false;
  for (const auto& line : g.cupti_status)
    if (line.find("enabled") != std::string::npos) cupti_on = true;
  if (cupti_on || g.activity_records) {
    uint64_t last_gpu_end = 0;
    uint64_t gpu_records = 0;
    for (const auto& a : g.activity)
      if (a.kind == HT_GPU_ACT_KERNEL || a.kind == HT_GPU_ACT_MEMCPY || a.kind == HT_GPU_ACT_MEMSET) {
        last_gpu_end = std::max(last_gpu_end, a.end_ns);
        ++gpu_records;
      }
    uint64_t quiet_ns = static_cast<uint64_t>(ctx.opt.gpu_idle_quiet_s * 1e9);
    bool idle = last_gpu_end + quiet_ns <= end;
    if (window_s >= ctx.opt.gpu_idle_quiet_s) {
      r.known = true;
      if (!idle) r.idle = false;
      if (last_gpu_end)
        r.evidence.push_back(
            fmt::format("CUPTI: the last kernel or copy on the GPU ended {} before the end of "
                        "the observation ({} kernels and copies recorded)",
                        format_ns(end - std::min(end, last_gpu_end)), gpu_records));
      else
        r.evidence.push_back(fmt::format("CUPTI: no kernel or copy ran on the GPU during the {} window",
                                         format_short_duration(window_s)));
    }
  }
  // Uprobes: launches during the window.
  bool libcuda = false;
  for (const auto& l : g.libraries)
    if (l.find("libcuda") != std::string::npos) libcuda = true;
  if (libcuda && window_s >= ctx.opt.gpu_idle_quiet_s) {
    uint64_t last_launch = 0;
    int by = 0;
    for (const auto& t : g.threads)
      if (t.last_launch_ns > last_launch) {
        last_launch = t.last_launch_ns;
        by = t.tid;
      }
    bool idle = last_launch + static_cast<uint64_t>(ctx.opt.gpu_idle_quiet_s * 1e9) <= end;
    r.known = true;
    if (!idle) r.idle = false;
    if (last_launch)
      r.evidence.push_back(
          fmt::format("uprobes: the last kernel launch was {} before the end of the observation, "
                      "by {}",
                      format_ns(end - std::min(end, last_launch)), ctx.thread_label(by)));
    else
      r.evidence.push_back(fmt::format("uprobes on libcuda: no kernel launched during the {} window",
                                       format_short_duration(window_s)));
  }
  return r;
}

// The host thread that feeds the GPU: the one that launched the most
// kernels, else the main thread of a process that loaded libcuda.
std::optional<int> feeder_thread(const RuleContext& ctx, std::string* how) {
  if (!ctx.live) return std::nullopt;
  const GpuObservation& g = ctx.live->gpu;
  const GpuThreadState* best = nullptr;
  for (const auto& t : g.threads)
    if (t.launches && (!best || t.launches > best->launches)) best = &t;
  if (best) {
    *how = fmt::format("launched {} kernels while traced", best->launches);
    return best->tid;
  }
  std::map<int, uint64_t> api_launches;  // tid -> launches (CUPTI API records)
  for (const auto& a : g.activity)
    if ((a.kind == HT_GPU_ACT_DRIVER_API || a.kind == HT_GPU_ACT_RUNTIME_API) && a.tid &&
        a.name.find("Launch") != std::string::npos)
      ++api_launches[a.tid];
  if (!api_launches.empty()) {
    auto it = std::max_element(api_launches.begin(), api_launches.end(),
                               [](const auto& a, const auto& b) { return a.second < b.second; });
    *how = fmt::format("made {} launch calls (CUPTI)", it->second);
    return it->first;
  }
  if (!g.cuda_pids.empty()) {
    int pid = g.cuda_pids.count(ctx.snap.target_pid) ? ctx.snap.target_pid : *g.cuda_pids.begin();
    if (ctx.snap.process(pid)) {
      *how = "the main thread of a process that loaded libcuda";
      return pid;
    }
  }
  return std::nullopt;
}

// A host thread waiting for the GPU: a CUDA synchronize (or a synchronous
// copy) seen in progress by the uprobes, or in the thread's stacks.
struct HostGpuWait {
  int pid = 0, tid = 0;
  std::string call;     // "cuCtxSynchronize", "torch.cuda.synchronize"
  double waited_s = 0;  // so far, at the end of the observation
  std::string source;   // "uprobe", "native stack", "python stack"
  bool certain = false;
};

// Every host thread waiting for the GPU.
std::vector<HostGpuWait> host_gpu_waits(const RuleContext& ctx) {
  std::vector<HostGpuWait> out;
  std::set<int> seen;
  uint64_t end = observed_until_ns(ctx);
  if (ctx.live)
    for (const auto& t : ctx.live->gpu.threads) {
      if (!gpu_fn_is_host_wait(t.in_fn) || !t.in_since_ns) continue;
      HostGpuWait w;
      w.pid = t.pid;
      w.tid = t.tid;
      w.call = gpu_fn_name(t.in_fn);
      w.waited_s = end > t.in_since_ns ? (end - t.in_since_ns) / 1e9 : 0;
      w.source = "uprobe";
      w.certain = true;
      // A call that started before the window and was still running is the
      // same wait the snapshot saw: take the longer reading.
      if (auto it = ctx.graph.threads.find(t.tid); it != ctx.graph.threads.end() && it->second.blocked_s)
        w.waited_s = std::max(w.waited_s, *it->second.blocked_s);
      seen.insert(t.tid);
      out.push_back(w);
    }
  // Waits that began before hangtrace attached: the uprobes cannot see them,
  // the stacks can.
  for (const auto& p : ctx.snap.processes)
    for (const auto& t : p.threads) {
      if (seen.count(t.tid)) continue;
      HostGpuWait w;
      w.pid = p.pid;
      w.tid = t.tid;
      for (const auto& f : t.native_stack)
        if (const char* call = native_host_wait(f.function)) {
          w.call = call;
          w.source = "native stack";
          w.certain = true;
          break;
        }
      if (w.call.empty())
        for (const auto& f : t.python_stack)
          if (python_host_wait(f)) {
            w.call = "torch.cuda.synchronize";
            if (f.file.find("streams.py") != std::string::npos)
              w.call = "torch.cuda stream/event synchronize";
            w.source = "python stack";
            break;
          }
      if (w.call.empty()) continue;
      auto it = ctx.graph.threads.find(t.tid);
      if (it != ctx.graph.threads.end() && it->second.blocked_s) w.waited_s = *it->second.blocked_s;
      // Still in it at the end of the live window: the window adds to the wait.
      if (ctx.live && ctx.live->end_ns > ctx.snap.sampled_at_monotonic_ns && ctx.snap.sampled_at_monotonic_ns)
        w.waited_s += (ctx.live->end_ns - ctx.snap.sampled_at_monotonic_ns) / 1e9;
      out.push_back(w);
    }
  return out;
}

// A host thread in a CUDA wait for long, and what the device does meanwhile.
Finding gpu_wait(const RuleContext& ctx, const HostGpuWait& w, const IdleReading& idle) {
  const GpuObservation* g = ctx.live ? &ctx.live->gpu : nullptr;
  uint64_t end = observed_until_ns(ctx);
  Finding f(FindingKind::GpuWait);
  add_unique(f.pids, w.pid);
  add_unique(f.tids, w.tid);
  f.chain_tids = {w.tid};
  f.confidence = w.certain ? Confidence::Certain : Confidence::Probable;
  std::string who = ctx.thread_label(w.tid);
  f.chain.push_back({who, "waits in", w.call});
  f.chain.push_back({w.call, "waits for", "work on the GPU"});
  f.evidence.push_back(fmt::format("{} has been in {} for {} (seen by {})", who, w.call,
                                   format_short_duration(w.waited_s), w.source));
  nlohmann::json details = {
      {"pid", w.pid}, {"tid", w.tid}, {"call", w.call}, {"source", w.source}, {"waited_s", w.waited_s}};
  // What the device is doing meanwhile.
  std::string device_state;
  uint64_t usual_ns = 0, usual_max_ns = 0;
  if (g) {
    for (const auto& [name, d] : g->kernel_durations) {
      usual_ns = std::max(usual_ns, d.median_ns());
      usual_max_ns = std::max(usual_max_ns, d.max_ns);
    }
    // Launches whose kernel never came back (CUPTI: API record without a
    // kernel record of the same correlation id).
    std::set<uint32_t> finished;
    for (const auto& a : g->activity)
      if (a.kind == HT_GPU_ACT_KERNEL) finished.insert(a.correlation_id);
    const GpuActivity* oldest_pending = nullptr;
    size_t pending = 0;
    for (const auto& a : g->activity)
      if ((a.kind == HT_GPU_ACT_DRIVER_API || a.kind == HT_GPU_ACT_RUNTIME_API) && a.correlation_id &&
          a.name.find("Launch") != std::string::npos && !finished.count(a.correlation_id) && a.pid == w.pid) {
        ++pending;
        if (!oldest_pending || a.start_ns < oldest_pending->start_ns) oldest_pending = &a;
      }
    if (oldest_pending) {
      double age = end > oldest_pending->start_ns ? (end - oldest_pending->start_ns) / 1e9 : 0;
      f.evidence.push_back(
          fmt::format("CUPTI: {} launch{} without a finished kernel; the oldest ({}, correlation {}) {} ago",
                      pending, pending > 1 ? "es" : "", oldest_pending->name, oldest_pending->correlation_id,
                      format_short_duration(age)));
      details["pending_launches"] = pending;
      details["oldest_pending_s"] = age;
      device_state = fmt::format("a kernel launched {} ago has not finished", format_short_duration(age));
      if (usual_ns) {
        f.evidence.push_back(
            fmt::format("kernels of this job took a median {} (longest {}) when they finished",
                        format_ns(usual_ns), format_ns(usual_max_ns)));
        details["usual_kernel_ns"] = usual_ns;
        details["longest_kernel_ns"] = usual_max_ns;
        if (age * 1e9 >= 1000.0 * static_cast<double>(usual_max_ns))
          device_state += fmt::format(", over 1000x the longest kernel seen ({})", format_ns(usual_max_ns));
      }
    }
    for (const auto& t : g->threads)
      if (t.tid == w.tid && t.last_launch_ns && t.last_launch_ns > t.last_sync_end_ns) {
        f.evidence.push_back(fmt::format(
            "uprobes: {} launched kernels after its last completed synchronize (the latest {} ago)", who,
            format_ns(end - std::min(end, t.last_launch_ns))));
        if (device_state.empty()) device_state = "work launched before the wait has not completed";
      }
  }
  for (const auto& e : idle.evidence) f.evidence.push_back(e);
  const bool nvml_busy = idle.nvml && !idle.idle, nvml_idle = idle.nvml && idle.idle;
  if (nvml_busy && device_state.empty()) device_state = "the GPU is busy: a kernel is running";
  if (nvml_idle)
    device_state += std::string(device_state.empty() ? "" : "; ") +
                    "yet the GPU is idle: what it waits for is not running (an event never recorded, a "
                    "collective whose peers never came)";
  if (!device_state.empty()) details["device"] = device_state;
  f.summary = fmt::format("{} has waited {} in {} for the GPU{}", who, format_short_duration(w.waited_s),
                          w.call, device_state.empty() ? "" : ": " + device_state);
  bool overrun =
      details.contains("oldest_pending_s") && details.contains("longest_kernel_ns") &&
      details["oldest_pending_s"].get<double>() * 1e9 >= 1000.0 * details["longest_kernel_ns"].get<double>();
  f.severity =
      (w.waited_s >= ctx.opt.gpu_wait_critical_s || overrun) ? Severity::Critical : Severity::Warning;
  f.details = details;
  f.advice = {
      "A kernel that never ends: look for a spin on a flag no one sets, an out-of-bounds loop or a "
      "deadlock between blocks; rerun with CUDA_LAUNCH_BLOCKING=1 to name the kernel, and under "
      "compute-sanitizer.",
      "If the pending work is a collective (NCCL), the GPU waits for a peer rank: see collective-wait, "
      "set NCCL_DEBUG=INFO and a timeout on the process group (TORCH_NCCL_ASYNC_ERROR_HANDLING=1).",
      "py-spy or hangtrace's py: lines show which Python line waits (.item(), .cpu(), "
      "torch.cuda.synchronize()).",
  };
  return f;
}

// The GPU idle while the thread that feeds it is blocked on the host (and
// not in a GPU wait itself).
std::optional<Finding> gpu_starved(const RuleContext& ctx, const IdleReading& idle,
                                   const std::vector<HostGpuWait>& waits) {
  std::string how;
  std::optional<int> feeder = feeder_thread(ctx, &how);
  if (!feeder || !idle.known || !idle.idle) return std::nullopt;
  auto it = ctx.graph.threads.find(*feeder);
  const ThreadWait* tw = it == ctx.graph.threads.end() ? nullptr : &it->second;
  bool in_gpu_wait = std::any_of(waits.begin(), waits.end(), [&](const auto& w) { return w.tid == *feeder; });
  if (!tw || in_gpu_wait ||
      (tw->activity != Activity::Blocked && tw->activity != Activity::TimedWait &&
       tw->activity != Activity::DiskWait))
    return std::nullopt;
  Finding f(FindingKind::GpuStarved);
  add_unique(f.pids, tw->pid);
  add_unique(f.tids, *feeder);
  std::string who = ctx.thread_label(*feeder);
  f.chain.push_back({"GPU", "is idle, fed by", who});
  for (auto& step : ctx.chain_from(*feeder)) f.chain.push_back(step);
  f.chain_tids = {*feeder};
  bool stuck = ctx.stuck(*feeder);
  f.severity = stuck ? Severity::Critical : Severity::Warning;
  f.confidence = stuck ? Confidence::Certain : Confidence::Probable;
  std::string waits_on = tw->summary.empty() ? activity_name(tw->activity) : tw->summary;
  f.summary =
      fmt::format("the GPU is idle because the thread that feeds it, {}, {}{}", who, waits_on,
                  tw->blocked_s ? fmt::format(" (for {})", format_short_duration(*tw->blocked_s)) : "");
  f.evidence.push_back(fmt::format("{} {}", who, how));
  for (const auto& e : idle.evidence) f.evidence.push_back(e);
  // Point at the host finding that explains the feeder's wait.
  for (const auto& host : ctx.findings)
    if (std::find(host.chain_tids.begin(), host.chain_tids.end(), *feeder) != host.chain_tids.end() ||
        std::find(host.tids.begin(), host.tids.end(), *feeder) != host.tids.end()) {
      f.details["host_finding_kind"] = finding_kind_name(host.kind);
      f.evidence.push_back(fmt::format("the host side: {} — {}", finding_kind_name(host.kind), host.summary));
      break;
    }
  f.details["feeder_tid"] = *feeder;
  f.details["feeder_pid"] = tw->pid;
  f.details["feeder_wait"] = waits_on;
  f.details["stuck"] = stuck;
  f.advice = {
      "Fix the host wait first (the chain above): the GPU only runs what this thread launches.",
      "A DataLoader too slow to keep up shows the same way: raise num_workers, use pin_memory and "
      "prefetch_factor, and keep Python work out of the training step.",
  };
  return f;
}

}  // namespace

std::vector<Finding> gpu_findings(const RuleContext& ctx) {
  std::vector<Finding> out;
  IdleReading idle = gpu_idle(ctx);
  std::vector<HostGpuWait> waits = host_gpu_waits(ctx);
  for (const HostGpuWait& w : waits)
    if (w.waited_s >= ctx.opt.gpu_wait_after_s) out.push_back(gpu_wait(ctx, w, idle));
  if (auto f = gpu_starved(ctx, idle, waits)) out.push_back(std::move(*f));
  return out;
}

}  // namespace hangtrace::rules
