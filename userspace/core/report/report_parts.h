// The sections of the reports (report.h) that more than one file renders,
// internal to hangtrace_core:
//   text_report.cpp  the human report, top-down
//   json_report.cpp  the versioned JSON report and its "live" block
//   timelines.cpp    per-thread timelines of a live window (text and JSON)
//   gpu_section.cpp  the GPU side of a live window (text and JSON)
//   job_section.cpp  the job: launcher, ranks, named pids, container (text and JSON)
//   profile_section.cpp  where a live window's time went: the stall profile (text and JSON)
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <string>

#include "hangtrace/analysis.h"
#include "hangtrace/live.h"

namespace hangtrace::report {

// Receives the text report one line at a time.
using LineSink = std::function<void(const std::string&)>;

void render_timelines(const Snapshot& snap, const Diagnosis& d, const LiveObservation& live,
                      const LineSink& line);
nlohmann::json timelines_json(const Snapshot& snap, const Diagnosis& d, const LiveObservation& live);

// Nothing when the job loaded no CUDA and, below -v, no GPU library was probed.
void render_gpu(const LiveObservation& live, int verbosity, const LineSink& line);
nlohmann::json gpu_json(const LiveObservation& live);

// The stall profile of a live window (profile_section.cpp); nothing when empty.
void render_profile(const StallProfile& p, int verbosity, const LineSink& line);
nlohmann::json profile_json(const StallProfile& p);

// Nothing when the job is one process tree with nothing to say about it.
void render_job(const Snapshot& snap, const LineSink& line);
nlohmann::json job_json(const Snapshot& snap);
// "ns_pids", "container_id" and "container" of one process.
nlohmann::json process_identity_json(const ProcessInfo& p);

}  // namespace hangtrace::report
