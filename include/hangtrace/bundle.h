// Postmortem bundles: one directory per incident (a hang, an OOM kill, a
// SIGBUS, an abnormal exit), holding everything a postmortem needs, written
// atomically (a reader sees the whole directory or none of it) and pruned to
// a retention limit. The daemon writes them; `hangtrace --pid P --bundle DIR`
// writes one by hand; `hangtrace merge` reads them back (one per rank).
//
// Layout (docs/fleet.md):
//   meta.json       BundleMeta (schema "hangtrace-bundle/1")
//   report.txt      the text report
//   report.json     the JSON report (docs/json-schema.md)
//   snapshot.json   the raw snapshot (hangtrace --from-snapshot reads it)
//   stacks.folded   folded stacks of blocked time
//   flamegraph.svg  the flame graph of the same
//   trace.json      Chrome/Perfetto timeline
//   wall.folded, wall-flamegraph.svg  a live window's wall time by cause (only with a stall profile)
//   recorder.json   the flight recorder: the job's significant events before the incident
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hangtrace/analysis.h"
#include "hangtrace/live.h"
#include "hangtrace/model.h"
#include "hangtrace/result.h"

namespace hangtrace {

inline constexpr const char* kBundleSchema = "hangtrace-bundle/1";

// The files every bundle has, in the order they are written (meta.json last).
const std::vector<std::string>& bundle_file_names();
// The files a bundle has when it can (written before the others): those of a
// live window's stall profile.
const std::vector<std::string>& optional_bundle_file_names();

// The host's clock when the bundle was written, as the kernel's NTP state
// (adjtimex) has it: whether it is synchronized and its error bounds. Merge
// uses it to say how far times from different hosts can be compared.
struct HostClock {
  double sampled_unix = 0;  // 0: not sampled (a bundle of an older hangtrace)
  bool synchronized = false;
  std::optional<double> max_error_s, est_error_s;  // adjtimex maxerror / esterror
};

struct BundleMeta {
  std::string schema = kBundleSchema;
  std::string trigger;           // "hang", "oom-kill", "sigbus", "abnormal-exit", "on-demand", "manual"
  std::string cause;             // the top finding's kind ("orphaned-lock"), or the trigger's when none
  std::string verdict;           // "hang", "suspect", "ok"
  std::string summary;           // the verdict's one line
  int job_pid = 0;               // the job's root process on its host
  uint64_t job_start_ticks = 0;  // its start time (/proc stat field 22): a reused pid is another job
  std::string note;  // what triggered it, in words ("no progress for 180 s (last: Python frames)")
  std::string job_comm, job_cmdline;
  std::string hostname;
  double created_unix = 0;        // when the bundle was written
  double incident_unix = 0;       // when the trigger happened (the death, the hang's detection)
  double last_progress_unix = 0;  // the job's last sign of progress (0: unknown)
  std::optional<int> rank, world_size, local_rank;
  // The job the rank belongs to, the same on every host (job_identity.h); "" when none.
  std::string job_id, job_id_source;
  std::string hangtrace_version;
  std::vector<int> pids;  // the job's processes at the incident
  HostClock clock;
};

// The meta of a bundle about `snapshot`'s job: its pid, command, host, rank,
// and the diagnosis's verdict, top finding (cause) and progress stop.
BundleMeta bundle_meta_for(const Snapshot& snapshot, const Diagnosis& diagnosis, const std::string& trigger);

nlohmann::json bundle_meta_to_json(const BundleMeta& m);
Result<BundleMeta> bundle_meta_from_json(const nlohmann::json& j);

// The files of one bundle, by name, rendered from the diagnosis (pure: no I/O).
struct BundleContent {
  BundleMeta meta;
  std::map<std::string, std::string> files;
};

BundleContent render_bundle(const Snapshot& snapshot, const Diagnosis& diagnosis, const LiveObservation* live,
                            BundleMeta meta, const nlohmann::json& recorder);

// A directory name for the bundle: "<UTC time>-<host>-<pid>-<trigger>", unique
// within `parent` (a counter is added when needed).
std::string bundle_dir_name(const BundleMeta& meta);

// Writes `content` under parent/name atomically: into a hidden temporary
// directory beside it (each file fsync'ed), then renamed into place and the
// parent fsync'ed. On failure nothing is left behind. Returns the final path.
Result<std::string> write_bundle(const std::string& parent, const std::string& name,
                                 const BundleContent& content);

// A finished bundle of a directory of bundles.
struct BundleEntry {
  std::string name;  // its directory's name: what /bundles/NAME serves
  std::string path;
  BundleMeta meta;
};

// The finished bundles in `parent`, newest first (by created time in their
// meta.json, then name): real directories this user made, with a plain name
// (plain_bundle_name) and a meta.json that reads; never a link, a directory
// another user planted, or a writer's temporary. With `removed_abandoned`,
// the temporaries of writers that died over a minute ago are removed and
// counted there.
Result<std::vector<BundleEntry>> list_bundles(const std::string& parent, size_t* removed_abandoned = nullptr);

// [A-Za-z0-9._-], not starting with a dot: what the daemon names bundles,
// and all a name from an HTTP request may be.
bool plain_bundle_name(std::string_view name);

// Keeps the newest `keep` bundles in `parent` (by created time in their
// meta.json, else the name), removes the rest and any temporary directory
// left by a writer that died. Returns how many were removed.
Result<size_t> prune_bundles(const std::string& parent, size_t keep);

// The offset of a bundle's host clock from the merging host's, measured when
// it was fetched from its daemon (the daemon's clock in the index answer
// against the request's round trip): host clock - local clock.
struct ClockOffset {
  double offset_s = 0;
  double uncertainty_s = 0;  // half the round trip
};

struct LoadedBundle {
  std::string path;  // a directory, an archive, or a URL
  BundleMeta meta;
  Snapshot snapshot;
  nlohmann::json report;                    // report.json
  nlohmann::json recorder;                  // recorder.json
  std::optional<ClockOffset> clock_offset;  // set by whoever fetched it
};

// Reads a bundle directory back; "failed to read bundle DIR: why" on a
// missing or corrupt file.
Result<LoadedBundle> read_bundle(const std::string& dir);
// The same from the bundle's files in memory (an archive, a download), by
// name; `origin` names it in errors and in LoadedBundle::path.
Result<LoadedBundle> read_bundle_files(const std::string& origin,
                                       const std::map<std::string, std::string>& files);

}  // namespace hangtrace
