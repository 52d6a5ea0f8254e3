// When the job stopped making progress (analysis.h's ProgressStop), and what
// a live window saw of the stuck threads: who last woke them, and since when
// nothing has.
#include <fmt/format.h>

#include <algorithm>

#include "rules.h"

namespace hangtrace::rules {

namespace {

// Findings about stuck waits, whose threads' wakeups are evidence. A killed
// process and a growing one are about processes, not waits.
bool about_waits(const Finding& f) {
  return f.kind != FindingKind::ProcessKilled && f.kind != FindingKind::MemoryGrowth;
}

// Whether the live window could have seen a thread being woken: without the
// sched concern, "not woken" says nothing.
bool wakeups_traced(const LiveObservation& live) {
  if (live.hooks.empty()) return true;  // hook list unknown (a saved observation): trust the events
  return std::any_of(live.hooks.begin(), live.hooks.end(),
                     [](const LiveHook& h) { return h.concern == "sched" && h.active; });
}

// The last moment the live window saw `tid` run: a wakeup, or the end of a
// wait it came back from. CLOCK_MONOTONIC ns, 0 when none was seen.
uint64_t last_seen_running_ns(const LiveObservation& live, int tid) {
  uint64_t last = 0;
  if (auto it = live.last_waker.find(tid); it != live.last_waker.end()) last = it->second.ts_ns;
  if (auto it = live.blocked.find(tid); it != live.blocked.end() && !it->second.empty())
    last = std::max(last, it->second.back().end_ns);
  return last;
}

// One time axis, in seconds relative to the instant the blocked times were
// read (negative = earlier). Older snapshots have no clock pair: live events
// are then placed against the end of the window, which the report's
// snapshot follows within a second.
struct TimeAxis {
  double ref_unix = 0;
  uint64_t ref_mono = 0;  // 0: live events cannot be placed

  TimeAxis(const Snapshot& snap, const LiveObservation* live) {
    ref_unix = snap.sampled_at_unix > 0 ? snap.sampled_at_unix : snap.taken_at_unix;
    ref_mono = snap.sampled_at_monotonic_ns;
    if (!ref_mono && live) ref_mono = live->end_ns;
  }
  double relative(uint64_t mono_ns) const {
    return (static_cast<double>(mono_ns) - static_cast<double>(ref_mono)) / 1e9;
  }
};

std::string vs_snapshot(double rel) {
  return rel <= 0 ? fmt::format("{:.1f} s before the snapshot", -rel)
                  : fmt::format("{:.1f} s after the snapshot", rel);
}

// When a stuck thread's current wait began, and from what.
struct WaitStart {
  int tid = 0;
  double start = 0;  // on the TimeAxis
  bool timed = false, from_snapshot = false, from_live = false;
  bool start_from_live = false;  // a wakeup seen live set `start`
  std::string live_note;
};

// What the live window says of `ws`: a wakeup after its blocked time moves
// its start later (it ran then); no wakeup at all confirms it.
void apply_live_window(const LiveObservation& live, const TimeAxis& axis, WaitStart& ws) {
  const double window_start = axis.relative(live.start_ns);
  if (uint64_t ran = last_seen_running_ns(live, ws.tid)) {
    double ran_at = axis.relative(ran);
    const TraceEvent* waker = nullptr;
    if (auto it = live.last_waker.find(ws.tid); it != live.last_waker.end()) waker = &it->second;
    std::string by = waker && waker->ts_ns == ran
                         ? (waker->waker_tgid ? fmt::format(" by {} ({}, tid {})", waker->waker_tgid,
                                                            waker->waker_comm, waker->waker_tid)
                                              : std::string(" from interrupt context"))
                         : std::string();
    // It ran after that moment, so its current wait cannot have begun
    // earlier; 50 ms absorbs the scheduler clock vs CLOCK_MONOTONIC.
    if (!ws.from_snapshot || ran_at > ws.start + 0.05) {
      ws.start = ran_at;
      ws.start_from_live = true;
      ws.live_note = ws.from_snapshot ? fmt::format(
                                            "live: last woken{} {}, later than its blocked time "
                                            "says: its wait began then",
                                            by, vs_snapshot(ran_at))
                                      : fmt::format(
                                            "live: last woken{} {} (no blocked time: its wait "
                                            "began then or later)",
                                            by, vs_snapshot(ran_at));
    } else {
      ws.live_note = fmt::format("live: last woken{} {}, then blocked", by, vs_snapshot(ran_at));
    }
    ws.from_live = true;
  } else if (ws.from_snapshot && wakeups_traced(live)) {
    ws.live_note = ws.start <= window_start + 0.05
                       ? fmt::format("live: not woken during the {:.1f} s window (blocked since before it)",
                                     live.duration_s)
                       : fmt::format("live: not woken during the {:.1f} s window", live.duration_s);
    ws.from_live = true;
  }
}

// The wait starts of the stuck threads that are in a wait and whose start is
// known (a blocked time, or a wakeup seen live).
std::vector<WaitStart> wait_starts(const RuleContext& ctx, const TimeAxis& axis,
                                   const std::vector<int>& stuck) {
  std::vector<WaitStart> starts;
  for (int tid : stuck) {
    const ThreadWait* w = ctx.wait_of(tid);
    if (!w || (w->activity != Activity::Blocked && w->activity != Activity::TimedWait)) continue;
    WaitStart ws;
    ws.tid = tid;
    // A GIL waiter re-enters its 5 ms wait until the holder lets go: its
    // clock restarts like a retry loop's.
    ws.timed = w->activity == Activity::TimedWait ||
               (!w->objects.empty() && ctx.object(w->objects.front()).kind == ObjectKind::Gil);
    if (w->blocked_s) {
      ws.start = -*w->blocked_s;
      ws.from_snapshot = true;
    }
    if (ctx.live && axis.ref_mono) apply_live_window(*ctx.live, axis, ws);
    if (ws.from_snapshot || ws.start_from_live) starts.push_back(std::move(ws));
  }
  return starts;
}

}  // namespace

void add_live_evidence(const RuleContext& ctx, std::vector<Finding>& findings) {
  const LiveObservation& live = *ctx.live;
  auto f = std::find_if(findings.begin(), findings.end(), about_waits);
  if (f == findings.end()) return;  // the verdict's finding is enough: only the first about waits
  std::vector<int> tids = f->tids;
  if (std::find(tids.begin(), tids.end(), ctx.snap.target_pid) == tids.end() && !f->chain.empty())
    tids.insert(tids.begin(), ctx.snap.target_pid);
  size_t shown = 0;
  for (int tid : tids) {
    if (shown++ >= 4) break;
    auto it = live.last_waker.find(tid);
    if (it != live.last_waker.end()) {
      double ago = live.end_ns > it->second.ts_ns ? (live.end_ns - it->second.ts_ns) / 1e9 : 0;
      f->evidence.push_back(
          fmt::format("live: {} was last woken by {} ({}, tid {}) {:.1f} s before the end of "
                      "the {:.1f} s window",
                      ctx.thread_label(tid), it->second.waker_tgid, it->second.waker_comm,
                      it->second.waker_tid, ago, live.duration_s));
    } else {
      f->evidence.push_back(fmt::format("live: nothing woke {} during the {:.1f} s window",
                                        ctx.thread_label(tid), live.duration_s));
    }
  }
}

std::optional<ProgressStop> progress_stopped(const RuleContext& ctx, const Finding& top) {
  std::vector<int> stuck = top.chain_tids;
  for (int t : top.tids) add_unique(stuck, t);
  const TimeAxis axis(ctx.snap, ctx.live);
  const std::vector<WaitStart> starts = wait_starts(ctx, axis, stuck);
  if (starts.empty()) return std::nullopt;

  // A timed wait that returns and waits again (DataLoader polls its queue
  // every 5 s) restarts its clock without any progress: untimed waits say
  // when the job stopped; timed ones only bound it.
  bool any_untimed = std::any_of(starts.begin(), starts.end(), [](const WaitStart& s) { return !s.timed; });
  const WaitStart* last = nullptr;
  int timed_skipped = 0;
  for (const auto& s : starts) {
    if (any_untimed && s.timed) {
      ++timed_skipped;
      continue;
    }
    if (!last || s.start > last->start) last = &s;
  }

  // "Ago" counts back from the last thing observed: the snapshot, or the end
  // of a live window that came after it.
  const double observed_until =
      ctx.live && axis.ref_mono ? std::max(0.0, axis.relative(ctx.live->end_ns)) : 0.0;
  ProgressStop ps;
  ps.ago_s = std::max(0.0, observed_until - last->start);
  ps.unix_time = axis.ref_unix + last->start;
  if (axis.ref_mono)
    ps.monotonic_ns =
        static_cast<uint64_t>(std::max(0.0, static_cast<double>(axis.ref_mono) + last->start * 1e9));
  ps.basis = !last->from_snapshot ? "live" : last->from_live ? "snapshot+live" : "snapshot";
  ps.at_the_latest = !any_untimed;
  ps.tid = last->tid;
  ps.pid = ctx.pid_of(last->tid);
  ps.thread = ctx.thread_label(last->tid);
  if (const ProcessInfo* p = ctx.snap.process(ps.pid))
    for (const auto& t : p->threads)
      if (t.tid == last->tid) ps.comm = t.comm;
  ps.waits_on = ctx.wait_of(last->tid)->summary;
  for (const auto& s : starts) ps.tids.push_back(s.tid);
  ps.timed_waits_not_counted = timed_skipped;
  ps.live_note = last->live_note;
  return ps;
}

}  // namespace hangtrace::rules
