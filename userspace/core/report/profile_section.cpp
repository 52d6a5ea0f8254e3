// The stall profile of a live window (include/hangtrace/profile.h) in the
// reports: where each main thread's time went, and the critical path behind
// its waits, as text ("WHERE THE TIME WENT") and as the JSON "profile" block.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "report_parts.h"

namespace hangtrace::report {

namespace {

double seconds(uint64_t ns) { return static_cast<double>(ns) / 1e9; }

nlohmann::json causes_json(const std::vector<CauseShare>& causes) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& c : causes) {
    nlohmann::json objects = nlohmann::json::array(), wakers = nlohmann::json::array();
    for (const auto& o : c.objects)
      objects.push_back({{"what", o.what},
                         {"seconds", seconds(o.ns)},
                         {"calls", o.calls},
                         {"median_ms", static_cast<double>(o.median_ns) / 1e6},
                         {"p90_ms", static_cast<double>(o.p90_ns) / 1e6},
                         {"mount_point", o.mount_point},
                         {"fstype", o.fstype},
                         {"source", o.source},
                         {"files", o.files}});
    for (const auto& w : c.wakers)
      wakers.push_back(
          {{"pid", w.pid}, {"tid", w.tid}, {"comm", w.comm}, {"role", w.role}, {"seconds", seconds(w.ns)}});
    out.push_back({{"cause", stall_cause_name(c.cause)},
                   {"seconds", seconds(c.ns)},
                   {"share", c.share},
                   {"objects", std::move(objects)},
                   {"wakers", std::move(wakers)}});
  }
  return out;
}

nlohmann::json frames_json(const std::vector<FrameShare>& frames) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& f : frames)
    out.push_back({{"stack", f.stack}, {"samples", f.samples}, {"share", f.share}});
  return out;
}

nlohmann::json step_json(const PathStep& s) {
  nlohmann::json next = nlohmann::json::array();
  for (const auto& n : s.next) next.push_back(step_json(n));
  return {{"depth", s.depth},
          {"label", s.label},
          {"pids", s.pids},
          {"tids", s.tids},
          {"via", s.depth ? nlohmann::json(stall_cause_name(s.via)) : nlohmann::json(nullptr)},
          {"ended_s", seconds(s.ended_ns)},
          {"share_of_parent", s.share_of_parent},
          {"window_s", seconds(s.window_ns)},
          {"causes", causes_json(s.causes)},
          {"on_cpu_frames", frames_json(s.on_cpu_frames)},
          {"next", std::move(next)}};
}

std::string shares_line(const std::vector<CauseShare>& causes) {
  std::vector<std::string> parts;
  for (const auto& c : causes)
    if (c.share >= 0.01)
      parts.push_back(fmt::format("{} {:.0f}%", stall_cause_name(c.cause), c.share * 100.0));
  return fmt::format("{}", fmt::join(parts, ", "));
}

void render_step(const PathStep& s, int verbosity, const LineSink& line) {
  std::string indent(2 + 2 * static_cast<size_t>(s.depth), ' ');
  if (s.depth == 0)
    line(fmt::format("{}{} ({:.1f} s): {}", indent, s.label, seconds(s.window_ns), shares_line(s.causes)));
  else
    line(fmt::format("{}<- {} ended {:.0f}% of that ({}): {}", indent, s.label, s.share_of_parent * 100.0,
                     stall_cause_name(s.via), shares_line(s.causes)));
  size_t shown = 0;
  for (const auto& c : s.causes) {
    if (c.cause == StallCause::OnCpu || c.cause == StallCause::Runnable || c.cause == StallCause::Other)
      continue;
    if (c.share < 0.05 || (shown >= 2 && verbosity < 1)) break;
    for (size_t i = 0; i < c.objects.size() && i < (verbosity > 0 ? c.objects.size() : 1); ++i) {
      const auto& o = c.objects[i];
      line(fmt::format(
          "{}    {} {:.2f} s: {}{}", indent, stall_cause_name(c.cause), seconds(o.ns), o.what,
          o.calls ? fmt::format(" ({} calls, median ~{:.1f} ms, p90 ~{:.1f} ms)", o.calls,
                                static_cast<double>(o.median_ns) / 1e6, static_cast<double>(o.p90_ns) / 1e6)
                  : ""));
    }
    ++shown;
  }
  for (size_t i = 0; i < s.on_cpu_frames.size() && i < (verbosity > 0 ? 3u : 1u); ++i)
    line(fmt::format("{}    on CPU {:.0f}% of samples: {}", indent, s.on_cpu_frames[i].share * 100.0,
                     s.on_cpu_frames[i].stack));
  for (const auto& n : s.next) render_step(n, verbosity, line);
}

}  // namespace

nlohmann::json profile_json(const StallProfile& p) {
  nlohmann::json threads = nlohmann::json::array(), paths = nlohmann::json::array(),
                 locks = nlohmann::json::array();
  for (const auto& t : p.mains)
    threads.push_back({{"pid", t.pid},
                       {"tid", t.tid},
                       {"comm", t.comm},
                       {"role", t.role},
                       {"window_s", seconds(t.window_ns)},
                       {"causes", causes_json(t.causes)},
                       {"cpu_samples", t.cpu_samples},
                       {"on_cpu_frames", frames_json(t.on_cpu_frames)}});
  for (const auto& s : p.paths) paths.push_back(step_json(s));
  for (const auto& q : p.locks) {
    nlohmann::json waiters = nlohmann::json::array(), holders = nlohmann::json::array();
    for (const auto& [tid, ns] : q.waiters) waiters.push_back({{"tid", tid}, {"seconds", seconds(ns)}});
    for (const auto& [tid, ns] : q.holders) holders.push_back({{"tid", tid}, {"seconds", seconds(ns)}});
    locks.push_back({{"pid", q.pid},
                     {"lock", q.what},
                     {"address", fmt::format("{:#x}", q.address)},
                     {"waits", q.waits},
                     {"waiters", std::move(waiters)},
                     {"holders", std::move(holders)}});
  }
  return {{"start_ns", p.start_ns},
          {"end_ns", p.end_ns},
          {"window_s", seconds(p.window_ns)},
          {"threads", std::move(threads)},
          {"critical_path", std::move(paths)},
          {"locks", std::move(locks)}};
}

void render_profile(const StallProfile& p, int verbosity, const LineSink& line) {
  if (p.empty()) return;
  line("");
  line(fmt::format("WHERE THE TIME WENT ({:.1f} s window; each step: who ended the waits above it)",
                   seconds(p.window_ns)));
  for (const auto& s : p.paths) render_step(s, verbosity, line);
}

}  // namespace hangtrace::report
