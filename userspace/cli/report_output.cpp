// What the CLI writes: the report, the postmortem exports and bundle of the
// default command, and the output files of every command (write_output).
#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "diagnose.h"
#include "hangtrace/analysis.h"
#include "hangtrace/bundle.h"
#include "hangtrace/exports.h"
#include "hangtrace/output_file.h"
#include "hangtrace/report.h"
#include "hangtrace/snapshot_json.h"
#include "subcommands.h"
#include "host_clock.h"

namespace hangtrace::cli {

int fail(const std::string& message) {
  std::fprintf(stderr, "hangtrace: %s\n", message.c_str());
  return 1;
}

// Writes `content` to `path` (hangtrace/output_file.h: atomic for regular
// files, in place for devices and FIFOs, no link another user planted
// followed). "-" means stdout.
bool write_output(const std::string& path, const std::string& content, std::string* error) {
  if (path == "-") {
    std::fwrite(content.data(), 1, content.size(), stdout);
    std::fflush(stdout);
    return true;
  }
  if (auto r = write_file_atomically(path, content); !r) {
    *error = r.error();
    return false;
  }
  return true;
}

bool write_json_and_text(const std::string& json_path, const std::function<std::string()>& json,
                         const std::function<std::string()>& text, std::string* error) {
  if (!json_path.empty() && !write_output(json_path, json(), error)) return false;
  if (json_path != "-") {
    std::string t = text();
    std::fwrite(t.data(), 1, t.size(), stdout);
    std::fflush(stdout);
  }
  return true;
}

namespace {

// The postmortem exports (docs/exports.md), each written whole or not at all.
bool write_exports(const Snapshot& snap, const Diagnosis& d, const Options& opt, const LiveObservation* live,
                   std::string* error) {
  if (opt.folded_path.empty() && opt.flamegraph_path.empty() && opt.speedscope_path.empty() &&
      opt.trace_path.empty() && opt.wall_folded_path.empty() && opt.wall_flamegraph_path.empty())
    return true;
  FoldedProfile folded = build_folded(snap, &d, live);
  FoldedProfile wall = build_wall_folded(d.profile);
  std::string name = fmt::format("hangtrace: pid {}", snap.target_pid);
  if (const ProcessInfo* p = snap.process(snap.target_pid); p && !p->comm.empty())
    name = fmt::format("hangtrace: {} (pid {})", p->comm, snap.target_pid);
  if (!opt.folded_path.empty() && !write_output(opt.folded_path, render_folded(folded), error)) return false;
  if (!opt.flamegraph_path.empty()) {
    FlameGraphOptions fo;
    fo.title = name + ": blocked time";
    fo.subtitle = d.verdict.summary;
    if (!write_output(opt.flamegraph_path, render_flamegraph_svg(folded, fo), error)) return false;
  }
  if ((!opt.wall_folded_path.empty() || !opt.wall_flamegraph_path.empty()) && d.profile.empty())
    std::fprintf(stderr,
                 "hangtrace: no stall profile (it needs a live window: --duration S or -- COMMAND): "
                 "the wall-time exports are empty\n");
  if (!opt.wall_folded_path.empty() && !write_output(opt.wall_folded_path, render_folded(wall), error))
    return false;
  if (!opt.wall_flamegraph_path.empty()) {
    std::string svg = render_flamegraph_svg(wall, wall_flamegraph_options(name, d.verdict.summary));
    if (!write_output(opt.wall_flamegraph_path, svg, error)) return false;
  }
  // A comm is raw bytes: invalid UTF-8 is replaced, not thrown on.
  auto dump = [](const nlohmann::json& j) {
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  };
  if (!opt.speedscope_path.empty() &&
      !write_output(opt.speedscope_path,
                    dump(render_speedscope(folded, name, d.profile.empty() ? nullptr : &wall)), error))
    return false;
  if (!opt.trace_path.empty() &&
      !write_output(opt.trace_path, dump(render_chrome_trace(snap, &d, live)), error))
    return false;
  return true;
}

}  // namespace

int report(const Snapshot& snap, const Options& opt, const LiveObservation* live) {
  AnalysisOptions analysis;
  analysis.stall_after_s = opt.stall_after_s;
  Diagnosis d = diagnose(snap, analysis, live);
  std::string error;
  if (!opt.save_snapshot_path.empty() &&
      !write_output(
          opt.save_snapshot_path,
          snapshot_to_json(snap).dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n",
          &error))
    return fail(error);
  bool json_to_stdout = opt.json_path == "-";
  if (!opt.json_path.empty() && opt.json_reports)
    opt.json_reports->push_back(render_json_text(snap, d, live));
  else if (!opt.json_path.empty() && !write_output(opt.json_path, render_json_text(snap, d, live), &error))
    return fail(error);
  if (!write_exports(snap, d, opt, live, &error)) return fail(error);
  if (!opt.bundle_parent.empty()) {
    BundleMeta meta = bundle_meta_for(snap, d, "manual");
    meta.clock = sample_host_clock();
    nlohmann::json recorder = {{"events", nlohmann::json::array()},
                               {"note", "written by hand (hangtrace --bundle): no flight recorder"}};
    auto path =
        write_bundle(opt.bundle_parent, bundle_dir_name(meta), render_bundle(snap, d, live, meta, recorder));
    if (!path) return fail(path.error());
    std::fprintf(stderr, "hangtrace: bundle written: %s\n", path->c_str());
  }
  if (!json_to_stdout) {
    ReportOptions ro;
    ro.verbosity = opt.verbosity;
    std::fputs(render_text(snap, d, ro, live).c_str(), stdout);
  }
  return exit_status_for(d) == 2 ? kExitHang : kExitOk;
}

}  // namespace hangtrace::cli
