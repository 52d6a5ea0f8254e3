#include "hangtrace/report.h"
#include "hangtrace/stacks.h"
#include "hangtrace/gpu.h"
#include "hangtrace/text.h"

#include <fmt/format.h>

#include <algorithm>
#include <ctime>
#include <functional>
#include <map>
#include <optional>
#include <set>

namespace hangtrace {
namespace {

std::string blocked_text(const ThreadWait& w) {
  if (w.activity == Activity::Running) return "-";
  if (!w.blocked_s) return "?";
  double s = *w.blocked_s;
  if (s >= 3600) return fmt::format("{:.1f}h", s / 3600);
  if (s >= 120) return fmt::format("{:.1f}m", s / 60);
  return fmt::format("{:.1f}s", s);
}

std::string truncate(const std::string& s, size_t n) {
  return s.size() <= n ? s : s.substr(0, n - 3) + "...";
}

// Frames innermost first, " <- " between them, at most `limit` of them.
template <typename Text>
std::string frames_text(const std::vector<UserFrame>& stack, size_t limit, Text text) {
  std::string out;
  for (size_t i = 0; i < stack.size() && i < limit; ++i) {
    if (i) out += " <- ";
    out += text(stack[i]);
  }
  if (stack.size() > limit) out += fmt::format(" <- ... ({} more)", stack.size() - limit);
  return out;
}

// "dataset.py:88 Dataset.__getitem__ <- fetch.py:58 fetch <- ...": file names
// without their directory.
std::string python_stack_text(const std::vector<UserFrame>& stack, size_t limit) {
  return frames_text(stack, limit, [](const UserFrame& f) {
    std::string file = f.file.substr(f.file.rfind('/') + 1);
    return f.line > 0 ? fmt::format("{}:{} {}", file, f.line, f.function)
                      : fmt::format("{} {}", file, f.function);
  });
}

// The native frames of a blocked thread that say how it got into its wait:
// up to the first frame of the Python interpreter loop (beyond that the py:
// line says it better), all of them in a process without Python.
std::string native_stack_text(const std::vector<UserFrame>& stack, size_t limit) {
  auto eval = std::find_if(stack.begin(), stack.end(),
                           [](const UserFrame& f) { return is_python_eval_frame(f.function); });
  return frames_text(std::vector<UserFrame>(stack.begin(), eval), limit, user_frame_text);
}

std::string stack_text(const std::vector<UserFrame>& stack, size_t limit) {
  return frames_text(stack, limit, user_frame_text);
}

nlohmann::json user_frame_json(const UserFrame& f) {
  using nlohmann::json;
  json j = {{"kind", f.kind == UserFrame::Kind::Python ? "python" : "native"},
            {"function", f.function},
            {"file", f.file}};
  if (f.kind == UserFrame::Kind::Python) {
    j["line"] = f.line;
  } else {
    j["addr"] = fmt::format("0x{:x}", f.addr);
    j["module_offset"] = fmt::format("0x{:x}", f.module_offset);
    j["build_id"] = f.build_id.empty() ? json(nullptr) : json(f.build_id);
  }
  return j;
}

// ---- per-thread timelines ------------------------------------------------------------
constexpr size_t kTimelineThreadsText = 8, kTimelineIntervalsText = 6;
constexpr size_t kTimelineThreadsJson = 32;

// The threads whose history explains the verdict: the main thread, then the
// top finding's chain and threads, at most `limit`; `*left_out` counts the rest.
// A thread neither in the snapshot nor seen live (a job that already exited)
// has no timeline.
std::vector<int> timeline_tids(const Snapshot& snap, const Diagnosis& d, const LiveObservation& live,
                               size_t limit, size_t* left_out) {
  std::vector<int> all;
  auto add = [&](int tid) {
    bool known = d.graph.threads.count(tid) || live.blocked.count(tid) || live.last_waker.count(tid);
    if (known && std::find(all.begin(), all.end(), tid) == all.end()) all.push_back(tid);
  };
  add(snap.target_pid);
  if (!d.findings.empty()) {
    for (int t : d.findings.front().chain_tids) add(t);
    for (int t : d.findings.front().tids) add(t);
  }
  *left_out = all.size() > limit ? all.size() - limit : 0;
  if (all.size() > limit) all.resize(limit);
  return all;
}

struct ThreadIdentity {
  int pid = 0;
  std::string comm = "?";
  std::string title;
};

ThreadIdentity identify(const Snapshot& snap, const LiveObservation* live, int tid) {
  ThreadIdentity id;
  id.pid = tid;
  const ProcessInfo* owner = nullptr;
  for (const auto& p : snap.processes)
    for (const auto& t : p.threads)
      if (t.tid == tid) {
        owner = &p;
        id.pid = p.pid;
        id.comm = t.comm;
      }
  if (!owner && live) {
    if (auto it = live->last_waker.find(tid); it != live->last_waker.end()) {
      id.pid = it->second.tgid;
      id.comm = it->second.comm;
    }
  }
  std::string role = !owner                               ? "process"
                     : owner->role == ProcessRole::Target ? "main"
                     : owner->role == ProcessRole::Peer   ? "peer"
                     : owner->ppid == snap.target_pid     ? "worker"
                                                          : "descendant";
  id.title = tid == id.pid ? fmt::format("{} {} ({})", role, id.pid, id.comm)
                           : fmt::format("thread {} ({}) of {} {}", tid, id.comm, role, id.pid);
  return id;
}

// Where the snapshot's current wait of `tid` began, CLOCK_MONOTONIC ns, when
// the snapshot recorded both its blocked time and its clock.
std::optional<uint64_t> current_wait_start_ns(const Snapshot& snap, const ThreadWait& w) {
  if (!w.blocked_s || !snap.sampled_at_monotonic_ns) return std::nullopt;
  if (w.activity != Activity::Blocked && w.activity != Activity::TimedWait) return std::nullopt;
  uint64_t back = static_cast<uint64_t>(*w.blocked_s * 1e9);
  return back > snap.sampled_at_monotonic_ns ? 0 : snap.sampled_at_monotonic_ns - back;
}

std::string waker_text(const TraceEvent& w) {
  if (w.waker_tgid == 0) return "interrupt context (a timer, a packet)";
  return fmt::format("{} ({}, tid {})", w.waker_tgid, w.waker_comm, w.waker_tid);
}

void render_timelines(const Snapshot& snap, const Diagnosis& d, const LiveObservation& live,
                      const std::function<void(const std::string&)>& line) {
  size_t left_out = 0;
  std::vector<int> tids = timeline_tids(snap, d, live, kTimelineThreadsText, &left_out);
  if (tids.empty()) return;
  auto offset = [&](uint64_t ns) {
    double s = (static_cast<double>(ns) - static_cast<double>(live.start_ns)) / 1e9;
    return fmt::format("{:+.3f} s", s);
  };
  line("");
  line(fmt::format("TIMELINES (offsets from the start of the {:.1f} s live window; T = the snapshot)",
                   live.duration_s));
  for (int tid : tids) {
    ThreadIdentity id = identify(snap, &live, tid);
    line("  " + id.title);
    size_t shown = 0;
    if (auto it = live.blocked.find(tid); it != live.blocked.end()) {
      const auto& intervals = it->second;
      size_t skip = intervals.size() > kTimelineIntervalsText ? intervals.size() - kTimelineIntervalsText : 0;
      if (skip) line(fmt::format("    +{} earlier blocked interval(s)", skip));
      for (size_t i = skip; i < intervals.size(); ++i, ++shown) {
        const BlockedInterval& b = intervals[i];
        line(fmt::format("    {:>11}  blocked {:>9}  {}", offset(b.start_ns),
                         fmt::format("{:.3f} s", (b.end_ns - b.start_ns) / 1e9), b.what));
      }
    }
    auto w = d.graph.threads.find(tid);
    if (w != d.graph.threads.end() && w->second.blocked_s &&
        (w->second.activity == Activity::Blocked || w->second.activity == Activity::TimedWait)) {
      std::optional<uint64_t> start = current_wait_start_ns(snap, w->second);
      bool before_window = start && *start < live.start_ns;
      line(fmt::format("    {:>11}  ongoing {:>9}  {} (since T-{:.1f} s{})", start ? offset(*start) : "?", "",
                       w->second.summary, *w->second.blocked_s, before_window ? ", before the window" : ""));
      ++shown;
    }
    if (shown == 0) line("    no blocked interval seen");
    if (auto it = live.last_waker.find(tid); it != live.last_waker.end())
      line(fmt::format("    last woken by {} at {}", waker_text(it->second), offset(it->second.ts_ns)));
    else
      line("    not woken during the window");
  }
  if (left_out) line(fmt::format("  +{} more thread(s) of the finding not shown", left_out));
}

nlohmann::json timelines_json(const Snapshot& snap, const Diagnosis& d, const LiveObservation& live) {
  using nlohmann::json;
  size_t left_out = 0;
  json out = json::array();
  for (int tid : timeline_tids(snap, d, live, kTimelineThreadsJson, &left_out)) {
    ThreadIdentity id = identify(snap, &live, tid);
    json intervals = json::array();
    if (auto it = live.blocked.find(tid); it != live.blocked.end())
      for (const auto& b : it->second)
        intervals.push_back({{"start_ns", b.start_ns}, {"end_ns", b.end_ns}, {"what", b.what}});
    if (auto w = d.graph.threads.find(tid); w != d.graph.threads.end()) {
      if (auto start = current_wait_start_ns(snap, w->second))
        intervals.push_back({{"start_ns", *start}, {"end_ns", nullptr}, {"what", w->second.summary}});
    }
    json waker = nullptr;
    if (auto it = live.last_waker.find(tid); it != live.last_waker.end())
      waker = {{"ts_ns", it->second.ts_ns},
               {"waker_pid", it->second.waker_tgid},
               {"waker_tid", it->second.waker_tid},
               {"waker_comm", it->second.waker_comm}};
    out.push_back(
        {{"tid", tid}, {"pid", id.pid}, {"comm", id.comm}, {"intervals", intervals}, {"last_woken", waker}});
  }
  return out;
}

void render_progress_stop(const ProgressStop& ps, const std::function<void(const std::string&)>& line) {
  line(fmt::format("PROGRESS STOPPED: {}{}, {} ago: {} was the last to block, {}",
                   ps.at_the_latest ? "at the latest " : "", format_utc(ps.unix_time), format_seconds(ps.ago_s),
                   ps.thread, ps.waits_on));
  std::string basis =
      ps.basis == "live"
          ? "its last wakeup seen while tracing"
          : fmt::format("blocked times (kernel scheduler clock) of {} stuck thread(s)", ps.tids.size());
  if (ps.timed_waits_not_counted)
    basis += fmt::format("; {} timed wait(s) not counted (a retry loop restarts its wait)",
                         ps.timed_waits_not_counted);
  if (!ps.live_note.empty()) basis += "; " + ps.live_note;
  line("  basis: " + basis);
}

// The GPU side, as the live window saw it (empty when the job loaded no
// CUDA and no GPU library was probed).
void render_gpu(const LiveObservation& live, int verbosity,
                const std::function<void(const std::string&)>& line) {
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

}  // namespace

std::string render_text(const Snapshot& snap, const Diagnosis& d, const ReportOptions& opt,
                        const LiveObservation* live) {
  std::string out;
  auto line = [&](const std::string& s = "") { out += s + "\n"; };
  const ProcessInfo* target = snap.process(snap.target_pid);
  line(fmt::format("hangtrace {} | pid {} ({}) | {} | kernel {} | {}", snap.hangtrace_version,
                   snap.target_pid,
                   target ? truncate(target->cmdline.empty() ? target->comm : target->cmdline, 60) : "?",
                   snap.hostname, snap.kernel_release, format_local_time(snap.taken_at_unix)));
  line();
  line(fmt::format("VERDICT: {}", d.verdict.summary));
  if (d.progress_stopped) render_progress_stop(*d.progress_stopped, line);

  if (!d.findings.empty()) {
    const Finding& top = d.findings.front();
    if (!top.chain.empty()) {
      line();
      line("WAIT CHAIN");
      std::string indent = "  ";
      line(indent + top.chain.front().from);
      for (const auto& step : top.chain) {
        line(fmt::format("{}└─ {} {}", indent, step.edge, step.to));
        indent += "   ";
      }
      if (top.kind == FindingKind::OrphanedLock || top.kind == FindingKind::DeadPeer)
        line(fmt::format("{}✗ nothing alive can end this wait", indent));
      else if (top.kind == FindingKind::DeadlockCycle)
        line(fmt::format("{}↺ back to the start: a cycle", indent));
    }
    if (!top.advice.empty()) {
      line();
      line("FIX");
      for (const auto& a : top.advice) line("  - " + a);
    }
  }

  // Threads that appear in findings are always listed; the rest are grouped.
  std::set<int> interesting;
  for (const auto& f : d.findings) interesting.insert(f.tids.begin(), f.tids.end());
  line();
  line("PROCESSES AND THREADS");
  line(fmt::format("  {:<8} {:<10} {:<5} {:>7}  {}", "PID", "ROLE", "STATE", "THREADS", "COMMAND"));
  for (const auto& p : snap.processes) {
    std::string role = p.role == ProcessRole::Target ? "main"
                       : p.role == ProcessRole::Peer ? "peer"
                       : p.ppid == snap.target_pid   ? "worker"
                                                     : "descendant";
    line(fmt::format("  {:<8} {:<10} {:<5} {:>7}  {}", p.pid, role, std::string(1, p.state), p.threads.size(),
                     truncate(p.cmdline.empty() ? p.comm : p.cmdline, 70)));
  }
  line();
  line(fmt::format("  {:<8} {:<8} {:<16} {:<11} {:>7}  {}", "TID", "PID", "COMM", "ACTIVITY", "BLOCKED",
                   "WAIT"));
  for (const auto& p : snap.processes) {
    std::map<std::string, std::vector<int>> grouped;  // summary -> tids
    for (const auto& t : p.threads) {
      auto it = d.graph.threads.find(t.tid);
      if (it == d.graph.threads.end()) continue;
      const ThreadWait& w = it->second;
      bool show = opt.verbosity > 0 || t.tid == p.pid || interesting.count(t.tid);
      if (!show) {
        grouped[fmt::format("{} {}", activity_name(w.activity), w.summary)].push_back(t.tid);
        continue;
      }
      line(fmt::format("  {:<8} {:<8} {:<16} {:<11} {:>7}  {}", t.tid, p.pid, truncate(t.comm, 16),
                       activity_name(w.activity), blocked_text(w), truncate(w.summary, 90)));
      if (!t.python_stack.empty())
        line(fmt::format("    py: {}", python_stack_text(t.python_stack, opt.verbosity > 0 ? 24 : 6)));
      else if (opt.verbosity > 0 && !t.python_stack_error.empty())
        line(fmt::format("    py: ({})", truncate(t.python_stack_error, 120)));
      if (!t.native_stack.empty() && w.activity != Activity::Running) {
        std::string native = native_stack_text(t.native_stack, opt.verbosity > 0 ? 24 : 6);
        if (!native.empty()) line(fmt::format("    native: {}", native));
      }
      if (opt.verbosity > 0 && !t.native_stack.empty() && !t.python_stack.empty())
        line(fmt::format("    stack: {}", stack_text(merged_user_stack(t), 40)));
      if (opt.verbosity > 0 && !w.syscall_text.empty())
        line(fmt::format("{:>58}{}", "", truncate(w.syscall_text, 100)));
      if (opt.verbosity > 1 && !w.kernel_stack.empty()) {
        for (const auto& fn : w.kernel_stack) line(fmt::format("{:>58}k {}", "", fn));
      }
    }
    for (const auto& [summary, tids] : grouped) {
      line(fmt::format("  {:<8} {:<8} {:<16} {}", fmt::format("+{}", tids.size()), p.pid, "other threads",
                       truncate(summary, 100)));
    }
  }

  if (!d.findings.empty()) {
    line();
    line("FINDINGS");
    for (const auto& f : d.findings) {
      line(fmt::format("[{}] {} {} {} | pids {}", f.id, severity_name(f.severity),
                       confidence_name(f.confidence), finding_kind_name(f.kind), fmt::join(f.pids, ", ")));
      line("  " + f.summary);
      if (!f.evidence.empty()) {
        line("  evidence:");
        for (const auto& e : f.evidence) line("    - " + e);
      }
      if (&f != &d.findings.front() && !f.advice.empty()) {
        line("  fix:");
        for (const auto& a : f.advice) line("    - " + a);
      }
    }
  }

  if (snap.shm.available) {
    line();
    double pct = snap.shm.size_bytes ? 100.0 * snap.shm.used_bytes / snap.shm.size_bytes : 0;
    line(fmt::format("/dev/shm of the target: {:.1f} MiB used of {:.1f} MiB ({:.0f}%), {} segment(s) listed",
                     snap.shm.used_bytes / 1048576.0, snap.shm.size_bytes / 1048576.0, pct,
                     snap.shm.largest.size()));
  }
  if (live) {
    line();
    size_t active = 0;
    for (const auto& h : live->hooks) active += h.active;
    line(fmt::format("LIVE: {:.1f} s traced, {} events, {} dropped, {} of {} hooks active{}{}",
                     live->duration_s, live->events, live->dropped, active, live->hooks.size(),
                     live->dropped ? " (ring buffer overflowed: raise --ringbuf-mb)" : "",
                     live->stacks_lost ? fmt::format(", {} stack walks lost to stack-map collisions (their "
                                                     "records show no stack)",
                                                     live->stacks_lost)
                                       : ""));
    for (const auto& dth : live->deaths) {
      if (dth.signal == 0 && !dth.oom_victim)
        line(fmt::format("  exit: {} ({}) status {}", dth.pid, dth.comm, (dth.exit_code >> 8) & 0xff));
    }
    render_timelines(snap, d, *live, line);
    render_gpu(*live, opt.verbosity, line);
    if (opt.verbosity > 0) {
      for (const auto& h : live->hooks)
        line(fmt::format("  hook {:<8} {:<28} {:<8} {}", h.concern, h.attach, h.active ? "active" : "off",
                         h.reason));
    }
  }
  if (!snap.limitations.empty()) {
    line();
    line("NOT SEEN");
    for (const auto& l : snap.limitations) line("  - " + l);
  }
  return out;
}

nlohmann::json live_json(const LiveObservation* live) {
  using nlohmann::json;
  if (!live) return nullptr;
  json hooks = json::array();
  for (const auto& h : live->hooks)
    hooks.push_back({{"concern", h.concern},
                     {"program", h.program},
                     {"attach", h.attach},
                     {"active", h.active},
                     {"reason", h.reason}});
  json deaths = json::array();
  for (const auto& dth : live->deaths)
    deaths.push_back({{"pid", dth.pid},
                      {"comm", dth.comm},
                      {"exit_status", (dth.exit_code >> 8) & 0xff},
                      {"signal", dth.signal},
                      {"oom_victim", dth.oom_victim}});
  json rss = json::array();
  for (const auto& [pid, r] : live->rss)
    rss.push_back({{"pid", pid},
                   {"first_bytes", r.first_bytes},
                   {"last_bytes", r.last_bytes},
                   {"max_bytes", r.max_bytes},
                   {"samples", r.samples}});
  json wakers = json::array();
  for (const auto& [tid, w] : live->last_waker)
    wakers.push_back({{"tid", tid},
                      {"waker_pid", w.waker_tgid},
                      {"waker_tid", w.waker_tid},
                      {"waker_comm", w.waker_comm}});
  return {{"duration_s", live->duration_s},
          {"events", live->events},
          {"dropped", live->dropped},
          {"undecodable", live->undecodable},
          {"stacks_lost", live->stacks_lost},
          {"hooks", hooks},
          {"exits", deaths},
          {"rss", rss},
          {"last_wakers", wakers},
          {"forked", live->forked},
          {"gpu", gpu_json(*live)}};
}

nlohmann::json render_json(const Snapshot& snap, const Diagnosis& d, const LiveObservation* live) {
  using nlohmann::json;
  json j;
  j["schema"] = kReportSchema;
  j["hangtrace_version"] = snap.hangtrace_version;
  j["hostname"] = snap.hostname;
  j["kernel_release"] = snap.kernel_release;
  j["taken_at_unix"] = snap.taken_at_unix;
  j["sample_window_s"] = snap.sample_window_s;
  j["target_pid"] = snap.target_pid;
  j["verdict"] = {{"status", d.verdict.status}, {"summary", d.verdict.summary}};
  j["progress_stopped"] = nullptr;
  if (const auto& ps = d.progress_stopped) {
    j["progress_stopped"] = {{"monotonic_ns", ps->monotonic_ns ? json(ps->monotonic_ns) : json(nullptr)},
                             {"unix_time", ps->unix_time},
                             {"utc", format_utc(ps->unix_time)},
                             {"ago_s", ps->ago_s},
                             {"basis", ps->basis},
                             {"at_the_latest", ps->at_the_latest},
                             {"tid", ps->tid},
                             {"pid", ps->pid},
                             {"comm", ps->comm},
                             {"thread", ps->thread},
                             {"waits_on", ps->waits_on},
                             {"tids", ps->tids},
                             {"timed_waits_not_counted", ps->timed_waits_not_counted},
                             {"live_note", ps->live_note.empty() ? json(nullptr) : json(ps->live_note)}};
  }
  j["sampled_at_unix"] = snap.sampled_at_unix > 0 ? json(snap.sampled_at_unix) : json(nullptr);
  j["sampled_at_monotonic_ns"] =
      snap.sampled_at_monotonic_ns ? json(snap.sampled_at_monotonic_ns) : json(nullptr);

  json findings = json::array();
  for (const auto& f : d.findings) {
    json chain = json::array();
    for (const auto& s : f.chain) chain.push_back({{"from", s.from}, {"edge", s.edge}, {"to", s.to}});
    findings.push_back({{"id", f.id},
                        {"kind", finding_kind_name(f.kind)},
                        {"severity", severity_name(f.severity)},
                        {"confidence", confidence_name(f.confidence)},
                        {"pids", f.pids},
                        {"tids", f.tids},
                        {"summary", f.summary},
                        {"chain", chain},
                        {"evidence", f.evidence},
                        {"advice", f.advice},
                        {"details", f.details}});
  }
  j["findings"] = findings;

  json processes = json::array();
  for (const auto& p : snap.processes) {
    json threads = json::array();
    for (const auto& t : p.threads) {
      json jt = {{"tid", t.tid}, {"comm", t.comm}, {"state", std::string(1, t.state)}};
      auto it = d.graph.threads.find(t.tid);
      if (it != d.graph.threads.end()) {
        const ThreadWait& w = it->second;
        jt["activity"] = activity_name(w.activity);
        jt["blocked_s"] = w.blocked_s ? json(*w.blocked_s) : json(nullptr);
        jt["syscall"] = w.syscall_text.empty() ? json(nullptr) : json(w.syscall_text);
        jt["wait"] = {{"kind", wait_class_name(w.wait_class)},
                      {"summary", w.summary},
                      {"objects", w.objects},
                      {"timeout_s", w.timeout_s ? json(*w.timeout_s) : json(nullptr)}};
        jt["kernel_stack"] = w.kernel_stack;
        jt["progressed"] = w.progressed;
      }
      json py = json::array();
      for (const auto& f : t.python_stack)
        py.push_back({{"function", f.function}, {"file", f.file}, {"line", f.line}});
      jt["python_stack"] = py;
      jt["python_stack_error"] = t.python_stack_error.empty() ? json(nullptr) : json(t.python_stack_error);
      json native = json::array();
      for (const auto& f : t.native_stack) native.push_back(user_frame_json(f));
      jt["native_stack"] = native;
      // Kernel ; native ; Python interleaved, innermost first: the one stack.
      json merged = json::array();
      if (it != d.graph.threads.end())
        for (const auto& k : it->second.kernel_stack) merged.push_back({{"kind", "kernel"}, {"function", k}});
      for (const auto& f : merged_user_stack(t)) merged.push_back(user_frame_json(f));
      jt["stack"] = merged;
      jt["holds_gil"] = t.holds_gil;
      threads.push_back(jt);
    }
    processes.push_back({{"pid", p.pid},
                         {"ppid", p.ppid},
                         {"comm", p.comm},
                         {"cmdline", p.cmdline},
                         {"exe", p.exe},
                         {"role", role_name(p.role)},
                         {"state", std::string(1, p.state)},
                         {"is_python", p.is_python},
                         {"children", p.children},
                         {"threads", threads}});
    if (p.rank) processes.back()["rank"] = *p.rank;
    if (p.world_size) processes.back()["world_size"] = *p.world_size;
    if (p.local_rank) processes.back()["local_rank"] = *p.local_rank;
  }
  j["processes"] = processes;

  json objects = json::array();
  for (const auto& [id, o] : d.graph.objects) {
    objects.push_back({{"id", id},
                       {"kind", object_kind_name(o.kind)},
                       {"label", o.label},
                       {"waiters", o.waiters},
                       {"releasers", o.releasers},
                       {"holder_pids", o.holder_pids},
                       {"ready", o.ready},
                       {"external", o.external},
                       {"owner_tid", o.owner_tid ? json(*o.owner_tid) : json(nullptr)},
                       {"notes", o.notes}});
  }
  j["objects"] = objects;

  json segs = json::array();
  for (const auto& s : snap.shm.largest)
    segs.push_back({{"name", s.name},
                    {"size_bytes", s.size_bytes},
                    {"allocated_bytes", s.allocated_bytes},
                    {"pids", s.mapped_by}});
  j["shm"] = {{"available", snap.shm.available},
              {"path", snap.shm.mount_path},
              {"size_bytes", snap.shm.size_bytes},
              {"used_bytes", snap.shm.used_bytes},
              {"unlinked_mapped_bytes", snap.shm.unlinked_mapped_bytes},
              {"largest", segs}};
  j["deadlocked_tids"] = d.deadlocked_tids;
  j["probably_deadlocked_tids"] = d.probably_deadlocked_tids;
  j["live"] = live_json(live);
  if (live) j["live"]["timelines"] = timelines_json(snap, d, *live);
  j["limitations"] = snap.limitations;
  return j;
}

}  // namespace hangtrace
