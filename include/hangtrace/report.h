// Rendering a Diagnosis: the human report (read top-down by a tired engineer)
// and the versioned JSON report (docs/json-schema.md).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "hangtrace/analysis.h"
#include "hangtrace/model.h"

namespace hangtrace {

inline constexpr const char* kReportSchema = "hangtrace.report/1";

struct ReportOptions {
  int verbosity = 0;  // -v: all threads, not only the interesting ones; -vv: kernel stacks
  bool color = false;
};

std::string render_text(const Snapshot& snapshot, const Diagnosis& diagnosis,
                        const ReportOptions& options = {}, const LiveObservation* live = nullptr);
nlohmann::json render_json(const Snapshot& snapshot, const Diagnosis& diagnosis,
                           const LiveObservation* live = nullptr);
// render_json(...).dump(2) and a newline, built one process at a time: a
// fraction of the memory of the whole tree on a job with 1,000s of threads.
std::string render_json_text(const Snapshot& snapshot, const Diagnosis& diagnosis,
                             const LiveObservation* live = nullptr);
// The "live" block alone (hooks, counters, deaths), null without live tracing.
nlohmann::json live_json(const LiveObservation* live);

}  // namespace hangtrace
