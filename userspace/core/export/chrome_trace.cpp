// The Chrome Trace Event timeline (Perfetto, chrome://tracing; docs/exports.md
// and, for the GPU tracks, docs/gpu.md): one track per thread with its
// blocked intervals and its wait at the snapshot, wakeups as flows (along the
// stall profile's critical path: to the end of each wait they ended), deaths
// as instant events, the main threads' shares by cause; GPU work on device
// and stream tracks.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "common.h"
#include "hangtrace/abi.h"
#include "hangtrace/exports.h"
#include "hangtrace/gpu.h"
#include "hangtrace/stacks.h"
#include "hangtrace/text.h"

namespace hangtrace {
namespace {

using namespace exports_detail;
using nlohmann::json;

// Trace Event timestamps are microseconds.
double us(uint64_t ns) { return static_cast<double>(ns) / 1000.0; }

// One end of a flow: the slice on (pid, tid) that encloses ts.
struct FlowEnd {
  int pid = 0, tid = 0;
  double ts = 0;
};

// The events of one trace and the tracks they are drawn on.
class Trace {
 public:
  explicit Trace(const Identities& ids) : ids_(ids) {}

  const Identities& ids() const { return ids_; }

  // Names the track (pid, tid) the first time it is used.
  void track(int pid, int tid, const std::string& process_comm, const std::string& thread_comm) {
    if (!process_names_.count(pid)) process_names_[pid] = process_comm;
    if (!threads_.count({pid, tid})) threads_[{pid, tid}] = thread_comm;
  }
  // The track of a thread known only by its tid; returns its pid.
  int track_of(int tid) {
    Who w = ids_.of(tid);
    track(w.pid, tid, w.process_comm, w.thread_comm);
    return w.pid;
  }

  // A complete event ("X").
  void add_slice(int pid, int tid, double ts, double dur, const std::string& name, const std::string& cat,
                 json args) {
    events_.push_back({{"ph", "X"},
                       {"name", name},
                       {"cat", cat},
                       {"pid", pid},
                       {"tid", tid},
                       {"ts", ts},
                       {"dur", dur},
                       {"args", std::move(args)}});
    slices_[{pid, tid}].push_back({ts, ts + dur});
  }
  // Whether a slice already placed on (pid, tid) encloses ts.
  bool enclosed(int pid, int tid, double ts) const {
    auto it = slices_.find({pid, tid});
    if (it == slices_.end()) return false;
    for (const auto& [a, b] : it->second)
      if (a <= ts && ts <= b) return true;
    return false;
  }
  // A flow from the slice at `from` to the one at `to` (binding to the enclosing slice: "bp": "e").
  void add_flow(const char* name, uint64_t id, const FlowEnd& from, const FlowEnd& to) {
    events_.push_back({{"ph", "s"},
                       {"name", name},
                       {"cat", name},
                       {"id", id},
                       {"pid", from.pid},
                       {"tid", from.tid},
                       {"ts", from.ts}});
    events_.push_back({{"ph", "f"},
                       {"bp", "e"},
                       {"name", name},
                       {"cat", name},
                       {"id", id},
                       {"pid", to.pid},
                       {"tid", to.tid},
                       {"ts", to.ts}});
  }
  // A counter ("C") on a process track.
  void add_counter(int pid, const std::string& name, double ts, json values) {
    events_.push_back(
        {{"ph", "C"}, {"name", name}, {"pid", pid}, {"tid", 0}, {"ts", ts}, {"args", std::move(values)}});
  }
  void add(json event) { events_.push_back(std::move(event)); }

  // A slice for one end of a flow to bind to at ts: none when one already
  // encloses it, else 1 µs (cut short before a slice that starts within it).
  void anchor(int pid, int tid, double ts, const std::string& name, json args) {
    if (enclosed(pid, tid, ts)) return;
    double dur = 1.0;
    if (auto it = slices_.find({pid, tid}); it != slices_.end())
      for (const auto& [a, b] : it->second)
        if (a > ts && a < ts + dur) dur = a - ts;
    add_slice(pid, tid, ts, dur, name, "wakeup", std::move(args));
  }

  // Wakeups already drawn (wakee, time, waker), so that none is drawn twice.
  std::set<std::tuple<int, uint64_t, int>> drawn_wakeups;

  // The metadata (names of every track that has events) first, then the events.
  json all_events(const Snapshot& snap) {
    json meta = json::array();
    for (const auto& [pid, name] : process_names_) {
      const ProcessInfo* p = snap.process(pid);
      std::string label = pid == kTraceInterruptPid ? name : fmt::format("{} (pid {})", name, pid);
      if (p && pid == snap.target_pid) label += " [target]";
      meta.push_back(
          {{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"tid", 0}, {"args", {{"name", label}}}});
      meta.push_back({{"ph", "M"},
                      {"name", "process_sort_index"},
                      {"pid", pid},
                      {"tid", 0},
                      {"args", {{"sort_index", pid == snap.target_pid ? 0 : pid}}}});
    }
    for (const auto& [key, name] : threads_)
      meta.push_back({{"ph", "M"},
                      {"name", "thread_name"},
                      {"pid", key.first},
                      {"tid", key.second},
                      {"args", {{"name", fmt::format("{} {}", name, key.second)}}}});
    for (auto& e : events_) meta.push_back(std::move(e));
    return meta;
  }

 private:
  const Identities& ids_;
  json events_ = json::array();
  std::map<int, std::string> process_names_;            // pid -> name
  std::map<std::pair<int, int>, std::string> threads_;  // (pid, tid) -> name
  // Complete events already placed per (pid, tid), for flow binding and nesting.
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> slices_;
};

void add_gpu_device_track(Trace& trace, uint32_t device) {
  trace.track(kTraceGpuPidBase + static_cast<int>(device), 0, fmt::format("GPU {}", device), "device");
}

// GPU work on (device, stream) tracks -- pid kTraceGpuPidBase + device, tid
// stream + 1 -- with a flow from each launch (the CUDA API call on its host
// thread) to the kernel or copy it started, as Kineto draws them (category
// "ac2g", id = CUPTI correlation id); host CUDA/NCCL calls seen by the uprobes
// on their threads; NVML utilization and power as counters on the device.
void add_gpu_tracks(const LiveObservation& live, Trace& trace) {
  const Identities& ids = trace.ids();
  const GpuObservation& g = live.gpu;
  std::map<uint32_t, const GpuActivity*> launches;  // correlation id -> API call
  for (const auto& a : g.activity) {
    if (a.kind != HT_GPU_ACT_DRIVER_API && a.kind != HT_GPU_ACT_RUNTIME_API) continue;
    if (a.end_ns < a.start_ns || !a.tid) continue;
    int pid = a.pid ? a.pid : trace.track_of(a.tid);
    trace.track(pid, a.tid, ids.process_comm(pid), ids.of(a.tid).thread_comm);
    trace.add_slice(pid, a.tid, us(a.start_ns), us(a.end_ns - a.start_ns), a.name,
                    a.kind == HT_GPU_ACT_DRIVER_API ? "cuda_driver" : "cuda_runtime",
                    {{"correlation", a.correlation_id}, {"cbid", a.detail}, {"source", "cupti"}});
    if (a.correlation_id) launches[a.correlation_id] = &a;
  }
  for (const auto& a : g.activity) {
    if (a.kind != HT_GPU_ACT_KERNEL && a.kind != HT_GPU_ACT_MEMCPY && a.kind != HT_GPU_ACT_MEMSET) continue;
    if (a.end_ns < a.start_ns) continue;
    int pid = kTraceGpuPidBase + static_cast<int>(a.device_id);
    int tid = static_cast<int>(a.stream_id) + 1;
    add_gpu_device_track(trace, a.device_id);
    trace.track(pid, tid, fmt::format("GPU {}", a.device_id), fmt::format("stream {}", a.stream_id));
    json args = {{"device", a.device_id},
                 {"stream", a.stream_id},
                 {"context", a.context_id},
                 {"correlation", a.correlation_id},
                 {"source", "cupti"}};
    std::string name = a.name;
    const char* cat = "kernel";
    if (a.kind == HT_GPU_ACT_KERNEL) {
      name = demangle(a.name);
      args["grid"] = {a.grid[0], a.grid[1], a.grid[2]};
      args["block"] = {a.block[0], a.block[1], a.block[2]};
      if (name != a.name) args["mangled"] = a.name;
    } else {
      cat = a.kind == HT_GPU_ACT_MEMCPY ? "gpu_memcpy" : "gpu_memset";
      args["bytes"] = a.bytes;
      if (name.empty()) name = a.kind == HT_GPU_ACT_MEMCPY ? "Memcpy" : "Memset";
    }
    double ts = us(a.start_ns);
    trace.add_slice(pid, tid, ts, us(a.end_ns - a.start_ns), name, cat, std::move(args));
    auto launch = launches.find(a.correlation_id);
    if (a.correlation_id == 0 || launch == launches.end()) continue;
    const GpuActivity& api = *launch->second;
    int api_pid = api.pid ? api.pid : trace.track_of(api.tid);
    trace.add_flow("ac2g", a.correlation_id, {api_pid, api.tid, us(api.start_ns)}, {pid, tid, ts});
  }
  for (const auto& c : g.calls) {
    int pid = c.pid ? c.pid : trace.track_of(c.tid);
    trace.track(pid, c.tid, ids.process_comm(pid), c.comm.empty() ? ids.of(c.tid).thread_comm : c.comm);
    json args = {{"source", "uprobe"}, {"ret", c.ret}};
    if (c.stream) args["stream"] = fmt::format("{:#x}", c.stream);
    if (c.count) args["count"] = c.count;
    if (c.seq) args["seq"] = c.seq;
    if (c.peer >= 0) args["peer"] = c.peer;
    std::string name = c.seq ? fmt::format("{} #{}", gpu_fn_name(c.fn), c.seq) : gpu_fn_name(c.fn);
    trace.add_slice(pid, c.tid, us(c.start_ns), us(c.end_ns - std::min(c.end_ns, c.start_ns)), name,
                    gpu_fn_is_nccl(c.fn) ? "nccl" : "cuda_host_wait", std::move(args));
  }
  for (const auto& t : g.threads) {
    if (!t.in_fn || !t.in_since_ns || t.in_since_ns > live.end_ns) continue;
    trace.track(t.pid, t.tid, ids.process_comm(t.pid), t.comm);
    std::string name = gpu_fn_is_nccl_transfer(t.in_fn)
                           ? fmt::format("{} #{}", gpu_fn_name(t.in_fn), t.collectives)
                           : gpu_fn_name(t.in_fn);
    trace.add_slice(t.pid, t.tid, us(t.in_since_ns), us(live.end_ns - t.in_since_ns), name,
                    gpu_fn_is_nccl(t.in_fn) ? "nccl" : "cuda_host_wait",
                    {{"source", "uprobe"}, {"ongoing", true}});
  }
  for (const auto& s : g.nvml) {
    int pid = kTraceGpuPidBase + static_cast<int>(s.device);
    add_gpu_device_track(trace, s.device);
    if (s.has_utilization)
      trace.add_counter(pid, "GPU utilization %", us(s.ts_ns),
                        {{"gpu", s.gpu_util_pct}, {"memory", s.mem_util_pct}});
    if (s.has_power) trace.add_counter(pid, "GPU power W", us(s.ts_ns), {{"power", s.power_mw / 1000.0}});
  }
}

// The sample time on CLOCK_MONOTONIC (µs) and how it was found: older
// snapshots lack it, and then the snapshot is placed at the end of the live
// window (or so that the longest wait starts at 0).
std::pair<double, std::string> sample_time(const Snapshot& snap, const LiveObservation* live) {
  if (snap.sampled_at_monotonic_ns != 0) return {us(snap.sampled_at_monotonic_ns), "CLOCK_MONOTONIC"};
  if (live && live->end_ns)
    return {us(live->end_ns),
            "CLOCK_MONOTONIC; the snapshot had no clock: current waits end at the live window's end"};
  double longest = 0;
  for (const auto& p : snap.processes)
    for (const auto& t : p.threads)
      if (t.kernel && !t.kernel->on_cpu) longest = std::max(longest, us(t.kernel->off_cpu_ns));
  return {longest, "relative: the snapshot had no clock; it is placed at the end of the longest wait"};
}

// Names of a user stack's frames, innermost first.
json frame_names(const std::vector<UserFrame>& frames) {
  json names = json::array();
  for (const auto& f : frames) names.push_back(user_frame(f).name);
  return names;
}

// The wait each thread was in at the snapshot, ending at the sample time;
// after the thread's last live interval (by tid, in µs) when they would overlap.
void add_current_waits(const Snapshot& snap, const Diagnosis* d, double sample_us,
                       const std::map<int, double>& last_end_us, Trace& trace) {
  for (const auto& p : snap.processes)
    for (const auto& t : p.threads) {
      const ThreadWait* w = nullptr;
      std::optional<double> blocked = current_blocked_s(t, d, &w);
      if (!blocked) continue;
      double start = sample_us - *blocked * 1e6;
      json args = {{"blocked_s", *blocked}, {"ongoing", true}, {"source", "snapshot"}};
      if (auto it = last_end_us.find(t.tid); it != last_end_us.end() && it->second > start) {
        args["clamped_to_live_interval"] = true;
        start = it->second;
      }
      if (start < 0) start = 0;
      std::string name = "blocked";
      if (w) {
        name = wait_name(*w);
        args["activity"] = activity_name(w->activity);
        args["wait_class"] = wait_class_name(w->wait_class);
        if (!w->syscall_text.empty()) args["syscall"] = w->syscall_text;
        if (w->timeout_s) args["timeout_s"] = *w->timeout_s;
        json objects = json::array();
        for (const auto& id : w->objects) {
          auto o = d->graph.objects.find(id);
          objects.push_back(o != d->graph.objects.end() && !o->second.label.empty() ? o->second.label : id);
        }
        if (!objects.empty()) args["objects"] = objects;
        if (!w->kernel_stack.empty()) args["kernel_stack"] = w->kernel_stack;
      }
      json py = frame_names(t.python_stack);
      if (!py.empty()) args["python_stack"] = py;
      json native = frame_names(t.native_stack);
      if (!native.empty()) args["native_stack"] = native;
      // Native and Python interleaved, innermost first.
      if (!native.empty() && !py.empty()) args["stack"] = frame_names(merged_user_stack(t));
      std::string cat = w ? fmt::format("wait,{}", activity_name(w->activity)) : "wait";
      trace.add_slice(p.pid, t.tid, start, std::max(0.0, sample_us - start), name, cat, std::move(args));
    }
}

// The track a wakeup's waker is drawn on: its thread, or the interrupt track
// for a wakeup from interrupt context (no task, or a timer or packet that hit
// whatever task ran).
std::pair<int, int> waker_track(const LiveObservation& live, const TraceEvent& ev, Trace& trace) {
  if (woken_from_interrupt(live, ev)) {
    trace.track(kTraceInterruptPid, 0, "interrupt context", "interrupt");
    return {kTraceInterruptPid, 0};
  }
  const Identities& ids = trace.ids();
  Who w = ids.of(ev.waker_tid);
  trace.track(ev.waker_tgid, ev.waker_tid, ids.process_comm(ev.waker_tgid),
              w.thread_comm != "?" ? w.thread_comm : (ev.waker_comm.empty() ? "?" : ev.waker_comm));
  return {ev.waker_tgid, ev.waker_tid};
}

// Flow ids of the critical path, above those of the other flows (wakeups
// count from 1, GPU launches use 32-bit correlation ids).
constexpr uint64_t kPathFlowIdBase = uint64_t{1} << 32;
constexpr size_t kMaxPathFlows = 4096;

// The threads of the critical path, in path order (the main threads first),
// and after them the relays: threads of a path process that woke a path
// thread (a DataLoader worker's feeder between the worker and main).
std::vector<int> path_threads(const StallProfile& profile, const LiveObservation& live) {
  std::vector<int> tids;
  std::set<int> seen, pids;
  std::vector<const PathStep*> todo;
  for (auto it = profile.paths.rbegin(); it != profile.paths.rend(); ++it) todo.push_back(&*it);
  while (!todo.empty()) {
    const PathStep* s = todo.back();
    todo.pop_back();
    for (int t : s->tids)
      if (seen.insert(t).second) tids.push_back(t);
    pids.insert(s->pids.begin(), s->pids.end());
    for (auto it = s->next.rbegin(); it != s->next.rend(); ++it) todo.push_back(&*it);
  }
  const size_t path_size = tids.size();
  for (size_t i = 0; i < path_size; ++i) {
    auto w = live.recent_wakeups.find(tids[i]);
    if (w == live.recent_wakeups.end()) continue;
    for (const auto& ev : w->second)
      if (pids.count(ev.waker_tgid) && !woken_from_interrupt(live, ev) && seen.insert(ev.waker_tid).second)
        tids.push_back(ev.waker_tid);
  }
  return tids;
}

// The critical path's wakeups: for each blocked interval of a path thread
// that a recorded wakeup fell into (the latest one, which ended it), a flow
// from the waker at the wakeup to the end of the interval.
void add_path_flows(const StallProfile& profile, const LiveObservation& live, Trace& trace) {
  const Identities& ids = trace.ids();
  uint64_t flows = 0;
  for (int tid : path_threads(profile, live)) {
    auto blocked = live.blocked.find(tid);
    auto wakeups = live.recent_wakeups.find(tid);
    if (blocked == live.blocked.end() || wakeups == live.recent_wakeups.end()) continue;
    const int pid = trace.track_of(tid);
    const std::string wakee_name = fmt::format("{}/{}", ids.of(tid).thread_comm, tid);
    for (const auto& b : blocked->second) {
      if (b.end_ns <= b.start_ns) continue;
      const TraceEvent* ended = nullptr;
      for (const auto& ev : wakeups->second)
        if (b.start_ns <= ev.ts_ns && ev.ts_ns <= b.end_ns && ev.waker_tid != tid) ended = &ev;
      if (!ended) continue;
      if (flows == kMaxPathFlows) return;
      auto [waker_pid, waker_tid] = waker_track(live, *ended, trace);
      double ts = us(ended->ts_ns);
      trace.anchor(waker_pid, waker_tid, ts, "wakes " + wakee_name, {{"wakee_tid", tid}, {"wakee_pid", pid}});
      // Just inside the wait's end, so that the flow binds to it.
      double end = std::max(us(b.start_ns), us(b.end_ns) - 0.001);
      trace.add_flow("critical_path", kPathFlowIdBase + flows++, {waker_pid, waker_tid, ts}, {pid, tid, end});
      trace.drawn_wakeups.insert({tid, ended->ts_ns, ended->waker_tid});
    }
  }
}

// Each main thread's split of the window: a counter of the shares (%) over
// the window, and an instant at its end that names them.
void add_cause_shares(const StallProfile& profile, Trace& trace) {
  for (size_t i = 0; i < profile.mains.size(); ++i) {
    const ThreadProfile& m = profile.mains[i];
    if (!m.window_ns) continue;
    json values = json::object();
    std::vector<std::string> words;
    for (const auto& c : m.causes) {
      values[stall_cause_name(c.cause)] = c.share * 100.0;
      words.push_back(fmt::format("{} {:.0f}%", stall_cause_name(c.cause), c.share * 100.0));
    }
    const int pid = m.pid ? m.pid : trace.track_of(m.tid);
    trace.track(pid, m.tid, trace.ids().process_comm(pid), m.comm.empty() ? "?" : m.comm);
    std::string name = fmt::format("wall time by cause % (tid {})", m.tid);
    trace.add_counter(pid, name, us(profile.start_ns), values);
    trace.add_counter(pid, name, us(profile.end_ns), values);
    json args = {{"shares", values}, {"window_s", static_cast<double>(m.window_ns) / 1e9}};
    if (i < profile.paths.size()) {
      json path = json::array();
      for (const auto& s : profile.paths[i].next)
        path.push_back({{"via", stall_cause_name(s.via)}, {"label", s.label}, {"share", s.share_of_parent}});
      args["path"] = path;
    }
    trace.add({{"ph", "i"},
               {"s", "t"},
               {"name", fmt::format("wall time: {}", fmt::join(words, ", "))},
               {"cat", "profile"},
               {"pid", pid},
               {"tid", m.tid},
               {"ts", us(profile.end_ns)},
               {"args", std::move(args)}});
  }
}

// Wakeups: a flow from the waker (a 1 µs "wakes" slice there unless a slice
// already encloses the moment) to the wakee's wait it ended.
void add_wakeups(const LiveObservation& live, Trace& trace) {
  const Identities& ids = trace.ids();
  uint64_t flow_id = 0;
  for (const auto& [wakee, ev] : live.last_waker) {
    int wakee_pid = trace.track_of(wakee);
    auto [waker_pid, waker_tid] = waker_track(live, ev, trace);
    double ts = us(ev.ts_ns);
    std::string wakee_name = fmt::format("{}/{}", ids.of(wakee).thread_comm, wakee);
    std::string waker_name = waker_frame_name(ev);
    ++flow_id;
    if (trace.drawn_wakeups.count({wakee, ev.ts_ns, ev.waker_tid})) continue;  // on the critical path
    trace.anchor(waker_pid, waker_tid, ts, "wakes " + wakee_name,
                 {{"wakee_tid", wakee}, {"wakee_pid", wakee_pid}});
    trace.anchor(wakee_pid, wakee, ts, "woken by " + waker_name,
                 {{"waker_tid", ev.waker_tid}, {"waker_pid", ev.waker_tgid}});
    trace.add_flow("wakeup", flow_id, {waker_pid, waker_tid, ts}, {wakee_pid, wakee, ts});
  }
}

void add_deaths(const LiveObservation& live, Trace& trace) {
  for (const auto& death : live.deaths) {
    std::string comm = death.comm.empty() ? trace.ids().process_comm(death.pid) : death.comm;
    trace.track(death.pid, death.pid, comm, comm);
    std::string what;
    if (death.signal) {
      const char* sig = signal_name(death.signal);
      what = sig ? fmt::format("killed by {}", sig) : fmt::format("killed by signal {}", death.signal);
    } else {
      what = fmt::format("exited with status {}", (death.exit_code >> 8) & 0xff);
    }
    if (death.oom_victim) what += " (OOM killer)";
    json args = {{"pid", death.pid},
                 {"comm", comm},
                 {"exit_code", death.exit_code},
                 {"signal", death.signal},
                 {"oom_victim", death.oom_victim}};
    if (death.fatal_signal && death.fatal_signal->sender_tgid)
      args["sender"] = fmt::format("{}/{}", death.fatal_signal->sender_comm, death.fatal_signal->sender_tgid);
    trace.add({{"ph", "i"},
               {"s", "p"},
               {"name", what},
               {"cat", "death"},
               {"pid", death.pid},
               {"tid", death.pid},
               {"ts", us(death.ts_ns ? death.ts_ns : live.end_ns)},
               {"args", args}});
  }
}

}  // namespace

json render_chrome_trace(const Snapshot& snap, const Diagnosis* d, const LiveObservation* live) {
  Identities ids(snap, live);
  Trace trace(ids);
  for (const auto& p : snap.processes)
    for (const auto& t : p.threads)
      trace.track(p.pid, t.tid, p.comm.empty() ? "?" : p.comm, t.comm.empty() ? "?" : t.comm);
  auto [sample_us, clock_note] = sample_time(snap, live);

  // Live blocked intervals.
  std::map<int, double> last_end_us;  // by tid
  if (live)
    for (const auto& [tid, intervals] : live->blocked) {
      int pid = trace.track_of(tid);
      for (const auto& b : intervals) {
        if (b.end_ns < b.start_ns) continue;
        trace.add_slice(
            pid, tid, us(b.start_ns), us(b.end_ns - b.start_ns), b.what, "blocked",
            {{"what", b.what}, {"start_ns", b.start_ns}, {"end_ns", b.end_ns}, {"source", "live"}});
        last_end_us[tid] = std::max(last_end_us[tid], us(b.end_ns));
      }
    }
  if (live) add_gpu_tracks(*live, trace);
  add_current_waits(snap, d, sample_us, last_end_us, trace);
  if (live && d && !d->profile.empty()) {
    add_path_flows(d->profile, *live, trace);
    add_cause_shares(d->profile, trace);
  }
  if (live) {
    add_wakeups(*live, trace);
    add_deaths(*live, trace);
  }
  trace.add({{"ph", "i"},
             {"s", "g"},
             {"name", "snapshot"},
             {"cat", "hangtrace"},
             {"pid", snap.target_pid},
             {"tid", snap.target_pid},
             {"ts", sample_us}});

  return {{"traceEvents", trace.all_events(snap)},
          {"displayTimeUnit", "ms"},
          {"otherData",
           {{"producer", fmt::format("hangtrace {}", HANGTRACE_VERSION)},
            {"clock", clock_note},
            {"time_unit", "microseconds"},
            {"target_pid", snap.target_pid},
            {"gpu_pid_base", kTraceGpuPidBase},
            {"gpu_convention", "device N: pid gpu_pid_base+N; stream S: tid S+1; tid 0: the device"},
            {"interrupt_pid", kTraceInterruptPid}}}};
}

}  // namespace hangtrace
