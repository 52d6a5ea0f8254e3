// Clocks and stacks of a job's ranks from several hosts (merge_compare.h).
#include "merge_compare.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "hangtrace/text.h"

namespace hangtrace::merge_detail {

namespace {

constexpr size_t kStackFrames = 16;

std::string base_name(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string seconds_text(double s) {
  return std::fabs(s) < 1 ? fmt::format("{:.1f} ms", s * 1e3) : fmt::format("{:.3f} s", s);
}

// How far apart two ranks' clocks may be: 0 on one host (one clock), the sum
// of their uncertainties otherwise, unset when either is unknown.
std::optional<double> clock_gap(const MergedRank& a, const MergedRank& b) {
  if (!a.host.empty() && a.host == b.host && a.clock_offset_s == b.clock_offset_s) return 0.0;
  if (!a.clock_uncertainty_s || !b.clock_uncertainty_s) return std::nullopt;
  return *a.clock_uncertainty_s + *b.clock_uncertainty_s;
}

}  // namespace

std::vector<std::string> thread_stack(const ProcessInfo& p, int tid) {
  std::vector<std::string> out;
  const ThreadInfo* t = p.thread(tid);
  if (!t) return out;
  for (const auto& f : t->python_stack) {
    if (out.size() == kStackFrames) break;
    out.push_back(fmt::format("{} ({}:{})", f.function, base_name(f.file), f.line));
  }
  if (!out.empty()) return out;
  for (const auto& f : t->native_stack) {
    if (out.size() == kStackFrames) break;
    out.push_back(f.function.empty() ? fmt::format("{}+{:#x}", base_name(f.file), f.module_offset)
                                     : f.function);
  }
  return out;
}

void place_on_local_clock(MergedRank& r, const LoadedBundle& b) {
  const HostClock& c = b.meta.clock;
  if (b.clock_offset) {
    r.clock_offset_s = b.clock_offset->offset_s;
    r.clock_uncertainty_s = b.clock_offset->uncertainty_s;
    r.clock_basis = fmt::format(
        "fetched from its daemon: its clock {} {} ± {}", seconds_text(std::fabs(r.clock_offset_s)),
        r.clock_offset_s >= 0 ? "ahead" : "behind", seconds_text(b.clock_offset->uncertainty_s));
  } else if (c.sampled_unix > 0 && c.synchronized && c.max_error_s) {
    r.clock_uncertainty_s = *c.max_error_s;
    r.clock_basis = fmt::format("NTP-synchronized, max error {}", seconds_text(*c.max_error_s));
  } else if (c.sampled_unix > 0) {
    r.clock_basis = "not synchronized (adjtimex), no offset measured";
  } else {
    r.clock_basis = "no clock sample in the bundle, no offset measured";
  }
  auto shift = [&](double& t) {
    if (t > 0) t -= r.clock_offset_s;
  };
  shift(r.sampled_at_unix);
  shift(r.collective_since_unix);
  shift(r.stall_unix);
}

std::optional<FirstStall> first_stall(const std::vector<MergedRank>& ranks) {
  std::vector<int> order;
  for (size_t i = 0; i < ranks.size(); ++i)
    if (ranks[i].stall_unix > 0) order.push_back(static_cast<int>(i));
  if (order.empty()) return std::nullopt;
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return ranks[a].stall_unix < ranks[b].stall_unix; });
  FirstStall f;
  f.index = order.front();
  const MergedRank& first = ranks[f.index];
  f.unix_time = first.stall_unix;
  f.basis = first.stall_basis;
  if (order.size() > 1) {
    const MergedRank& next = ranks[order[1]];
    const double lead = next.stall_unix - first.stall_unix;
    const std::optional<double> gap = clock_gap(first, next);
    if (gap && *gap == 0) {
      f.order = fmt::format("{} before {}, on one host's clock", seconds_text(lead), rank_name(next));
    } else if (gap && lead > *gap) {
      f.order = fmt::format("{} before {}, more than their clocks may differ (± {})", seconds_text(lead),
                            rank_name(next), seconds_text(*gap));
    } else {
      f.certain = false;
      f.order = gap ? fmt::format(
                          "only {} before {}, within what their clocks may differ (± {}): the order is "
                          "not certain",
                          seconds_text(lead), rank_name(next), seconds_text(*gap))
                    : fmt::format(
                          "{} before {}, but how far their clocks differ is unknown ({}; {}): the order "
                          "is not certain",
                          seconds_text(lead), rank_name(next),
                          first.clock_uncertainty_s ? next.clock_basis : first.clock_basis,
                          "fetch the bundles from their daemons to measure it");
    }
  }
  for (int i : order) {
    const MergedRank& r = ranks[i];
    std::string after = i == f.index ? "" : fmt::format(", {:.3f} s later", r.stall_unix - f.unix_time);
    std::string clock =
        r.clock_offset_s != 0 ? fmt::format(" (its clock corrected by {:+.3f} s)", -r.clock_offset_s) : "";
    f.evidence.push_back(fmt::format("{} stalled at {}{}{} ({}; {})", rank_name(r), clock_utc(r.stall_unix),
                                     clock, after, r.stall_basis, r.in_collective ? "in " + r.op : r.doing));
  }
  return f;
}

std::vector<StackGroup> group_by_stack(const std::vector<MergedRank>& ranks) {
  std::map<std::vector<std::string>, StackGroup> by_stack;
  for (size_t i = 0; i < ranks.size(); ++i) {
    std::vector<std::string> key = ranks[i].stack;
    if (key.empty()) key = {"(no stack) " + ranks[i].doing};
    StackGroup& g = by_stack[key];
    g.stack = key;
    g.members.push_back(static_cast<int>(i));
  }
  std::vector<StackGroup> out;
  for (auto& [key, g] : by_stack) out.push_back(std::move(g));
  std::stable_sort(out.begin(), out.end(), [](const StackGroup& a, const StackGroup& b) {
    if (a.members.size() != b.members.size()) return a.members.size() > b.members.size();
    return a.members.front() < b.members.front();
  });
  if (out.size() > 1 && out[0].members.size() > out[1].members.size())
    for (size_t i = 1; i < out.size(); ++i) out[i].outlier = true;
  return out;
}

std::string member_ranks(const std::vector<MergedRank>& ranks, const std::vector<int>& members) {
  std::vector<int> numbered;
  size_t unranked = 0;
  for (int i : members)
    if (ranks[i].rank)
      numbered.push_back(*ranks[i].rank);
    else
      ++unranked;
  std::string out =
      numbered.empty() ? ""
                       : fmt::format("{} {}", numbered.size() == 1 ? "rank" : "ranks", number_runs(numbered));
  if (unranked)
    out += fmt::format("{}{} unranked process{}", out.empty() ? "" : " and ", unranked,
                       unranked == 1 ? "" : "es");
  return out;
}

}  // namespace hangtrace::merge_detail
