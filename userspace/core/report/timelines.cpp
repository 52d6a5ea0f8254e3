// Per-thread timelines of a live window: for the threads that explain the
// verdict, the waits the window saw, the one still going on, and who last
// woke them.
#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "report_parts.h"

namespace hangtrace::report {

namespace {

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
  const std::string role = job_role_label(snap, owner);
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

}  // namespace

void render_timelines(const Snapshot& snap, const Diagnosis& d, const LiveObservation& live,
                      const LineSink& line) {
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

}  // namespace hangtrace::report
