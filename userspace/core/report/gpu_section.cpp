// The GPU side of a live window, as the reports show it: the host threads'
// CUDA/NCCL calls (uprobes), CUPTI's activity and NVML's samples.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "hangtrace/gpu.h"
#include "hangtrace/text.h"
#include "report_parts.h"

namespace hangtrace::report {

void render_gpu(const LiveObservation& live, int verbosity, const LineSink& line) {
  const GpuObservation& g = live.gpu;
  bool cuda_job = !g.cuda_pids.empty() || !g.threads.empty() || g.activity_records;
  if (!cuda_job && verbosity == 0) return;
  line("");
  std::string libs =
      g.libraries.empty() ? "no CUDA/NCCL library probed" : fmt::format("{}", fmt::join(g.libraries, "; "));
  line(fmt::format("GPU: {}", libs));
  uint64_t end = live.end_ns;
  auto ago = [&](uint64_t ns) { return end > ns ? format_seconds((end - ns) / 1e9) : std::string("0 s"); };
  for (const auto& t : g.threads) {
    std::string text = fmt::format("  thread {} ({}) of {}:", t.tid, t.comm, t.pid);
    if (t.in_fn) text += fmt::format(" in {} for {};", gpu_fn_name(t.in_fn), ago(t.in_since_ns));
    if (t.launches) text += fmt::format(" {} launches (the last {} ago);", t.launches, ago(t.last_launch_ns));
    if (t.syncs) text += fmt::format(" {} synchronizes;", t.syncs);
    if (t.collectives)
      text += fmt::format(" {} NCCL calls (the last: {} #{} of {} elements, {} ago);", t.collectives,
                          gpu_fn_name(t.last_collective_fn), t.collectives, t.last_collective_count,
                          ago(t.last_collective_ns));
    if (text.back() == ';') text.pop_back();
    line(text);
  }
  if (g.activity_records || !g.cupti_status.empty()) {
    uint64_t kernels = 0;
    for (const auto& [name, k] : g.kernel_durations) kernels += k.count;
    line(fmt::format("  CUPTI: {} activity records, {} kernels{}", g.activity_records, kernels,
                     g.cupti_calibrated ? fmt::format(" (clock calibrated to ±{:.1f} µs)",
                                                      g.cupti_clock_uncertainty_ns / 1e3)
                                        : ""));
    for (const auto& s : g.cupti_status) line("  CUPTI: " + s);
  }
  std::map<unsigned, std::vector<const NvmlSample*>> per_device;
  for (const auto& s : g.nvml)
    if (s.has_utilization) per_device[s.device].push_back(&s);
  for (const auto& [dev, samples] : per_device) {
    unsigned lo = 100, hi = 0;
    for (const auto* s : samples) {
      lo = std::min(lo, s->gpu_util_pct);
      hi = std::max(hi, s->gpu_util_pct);
    }
    const NvmlSample& last = *samples.back();
    std::string name;
    for (const auto& d : g.nvml_devices)
      if (d.index == dev) name = " (" + d.name + ")";
    line(fmt::format("  GPU {}{}: utilization {}-{}% over {} samples{}{}", dev, name, lo, hi, samples.size(),
                     last.has_power ? fmt::format(", {:.0f} W", last.power_mw / 1000.0) : "",
                     last.has_memory
                         ? fmt::format(", {:.1f} of {:.1f} GiB used", last.mem_used_bytes / 1073741824.0,
                                       last.mem_total_bytes / 1073741824.0)
                         : ""));
  }
  if (!g.nvml_status.empty()) line("  " + g.nvml_status);
}

nlohmann::json gpu_json(const LiveObservation& live) {
  using nlohmann::json;
  const GpuObservation& g = live.gpu;
  json threads = json::array();
  for (const auto& t : g.threads) {
    json j = {{"pid", t.pid},
              {"tid", t.tid},
              {"comm", t.comm},
              {"in_call", t.in_fn ? json(gpu_fn_name(t.in_fn)) : json(nullptr)},
              {"launches", t.launches},
              {"last_launch_ns", t.last_launch_ns},
              {"syncs", t.syncs},
              {"last_sync_end_ns", t.last_sync_end_ns},
              {"nccl_calls", t.collectives},
              {"nccl_group_depth", t.nccl_group_depth}};
    if (t.in_fn) {
      j["in_since_ns"] = t.in_since_ns;
      j["in_for_s"] = live.end_ns > t.in_since_ns ? (live.end_ns - t.in_since_ns) / 1e9 : 0.0;
      j["in_stream"] = t.in_stream;
    }
    if (t.collectives)
      j["last_nccl_call"] = {{"call", gpu_fn_name(t.last_collective_fn)},
                             {"seq", t.collectives},
                             {"count", t.last_collective_count},
                             {"datatype", t.last_collective_datatype},
                             {"comm", fmt::format("{:#x}", t.last_collective_comm)},
                             {"ts_ns", t.last_collective_ns}};
    threads.push_back(j);
  }
  json calls = json::array();
  size_t skip = g.calls.size() > 256 ? g.calls.size() - 256 : 0;
  for (size_t i = skip; i < g.calls.size(); ++i) {
    const GpuCall& c = g.calls[i];
    json j = {{"pid", c.pid},           {"tid", c.tid},       {"call", gpu_fn_name(c.fn)},
              {"start_ns", c.start_ns}, {"end_ns", c.end_ns}, {"ret", c.ret}};
    if (c.stream) j["stream"] = fmt::format("{:#x}", c.stream);
    if (c.count) j["count"] = c.count;
    if (c.seq) j["seq"] = c.seq;
    if (c.handle) j["handle"] = fmt::format("{:#x}", c.handle);
    if (c.datatype >= 0) j["datatype"] = c.datatype;
    if (c.peer >= 0) j["peer"] = c.peer;
    calls.push_back(j);
  }
  std::vector<std::pair<std::string, const KernelDurations*>> kernels;
  for (const auto& [name, k] : g.kernel_durations) kernels.push_back({name, &k});
  std::sort(kernels.begin(), kernels.end(),
            [](const auto& a, const auto& b) { return a.second->total_ns > b.second->total_ns; });
  json kernels_json = json::array();
  for (size_t i = 0; i < kernels.size() && i < 32; ++i)
    kernels_json.push_back({{"name", kernels[i].first},
                            {"count", kernels[i].second->count},
                            {"total_ns", kernels[i].second->total_ns},
                            {"median_ns", kernels[i].second->median_ns()},
                            {"max_ns", kernels[i].second->max_ns}});
  json devices = json::array();
  for (const auto& d : g.nvml_devices) devices.push_back({{"index", d.index}, {"name", d.name}});
  json samples = json::array();
  size_t nskip = g.nvml.size() > 240 ? g.nvml.size() - 240 : 0;
  for (size_t i = nskip; i < g.nvml.size(); ++i) {
    const NvmlSample& s = g.nvml[i];
    json procs = json::object();
    for (const auto& [pid, pct] : s.process_sm_util_pct) procs[std::to_string(pid)] = pct;
    json j = {{"ts_ns", s.ts_ns}, {"device", s.device}};
    if (s.has_utilization) {
      j["gpu_util_pct"] = s.gpu_util_pct;
      j["mem_util_pct"] = s.mem_util_pct;
    }
    if (s.has_power) j["power_mw"] = s.power_mw;
    if (s.has_memory) {
      j["mem_used_bytes"] = s.mem_used_bytes;
      j["mem_total_bytes"] = s.mem_total_bytes;
    }
    if (s.has_process_util) j["process_sm_util_pct"] = procs;
    samples.push_back(j);
  }
  return {{"libraries", g.libraries},
          {"cuda_pids", g.cuda_pids},
          {"threads", threads},
          {"calls", calls},
          {"activity_records", g.activity_records},
          {"kernels", kernels_json},
          {"cupti",
           {{"status", g.cupti_status},
            {"calibrated", g.cupti_calibrated},
            {"clock_offset_ns", g.cupti_clock_offset_ns},
            {"clock_uncertainty_ns", g.cupti_clock_uncertainty_ns}}},
          {"nvml", {{"status", g.nvml_status}, {"devices", devices}, {"samples", samples}}}};
}

}  // namespace hangtrace::report
