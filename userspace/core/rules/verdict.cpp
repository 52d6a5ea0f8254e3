// The findings in report order, and the verdict the first one gives.
#include <fmt/format.h>

#include <algorithm>

#include "rules.h"

namespace hangtrace::rules {

void order_findings(std::vector<Finding>& findings) {
  std::stable_sort(findings.begin(), findings.end(), [](const Finding& a, const Finding& b) {
    if (a.severity != b.severity) return a.severity > b.severity;
    if (a.confidence != b.confidence) return a.confidence > b.confidence;
    return a.priority < b.priority;
  });
  number_findings(findings);
}

void number_findings(std::vector<Finding>& findings) {
  for (size_t i = 0; i < findings.size(); ++i) findings[i].id = fmt::format("F{}", i + 1);
}

Verdict verdict_for(const Snapshot& snap, const WaitGraph& graph, const std::vector<Finding>& findings,
                    const std::string& progress) {
  Verdict v;
  if (findings.empty()) {
    size_t blocked = 0, timed = 0;
    for (const auto& [tid, w] : graph.threads) {
      if (w.activity == Activity::Blocked) ++blocked;
      if (w.activity == Activity::TimedWait) ++timed;
    }
    v.status = "ok";
    v.summary = fmt::format(
        "no hang found: {} threads in {} processes, {} blocked without timeout, {} in timed waits, none "
        "stuck in a wait that can never end",
        graph.threads.size(), snap.processes.size(), blocked, timed);
    if (!progress.empty()) v.summary += "; " + progress;
    return v;
  }
  const Finding& top = findings.front();
  if (top.severity != Severity::Critical && is_slow_job_kind(top.kind)) {
    v.status = "slow";
    const double share = top.details.contains("share") && top.details["share"].is_number()
                             ? top.details["share"].get<double>()
                             : 0.0;
    v.summary =
        fmt::format("slow: {} ({:.0f}%): {}", finding_kind_name(top.kind), share * 100.0, top.summary);
  } else if (top.severity != Severity::Critical) {
    v.status = "suspect";
    v.summary = fmt::format("no hang proven, but: {}", top.summary);
  } else if (top.kind == FindingKind::ProcessKilled) {
    v.status = "killed";
    v.summary = fmt::format("KILLED ({}): {}", confidence_name(top.confidence), top.summary);
  } else {
    v.status = "hang";
    v.summary = fmt::format("HANG ({}, {}): {}", finding_kind_name(top.kind), confidence_name(top.confidence),
                            top.summary);
  }
  return v;
}

}  // namespace hangtrace::rules
