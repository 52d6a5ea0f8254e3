// The default command: diagnose a job -- a snapshot of a running one (--pid,
// with a live window for a CUDA job or with --duration), one launched and
// traced from its start (-- COMMAND), a saved snapshot (--from-snapshot), the
// bundled demo job -- and the report, exports and bundle written for it.
// main.cpp parses the options into Options and dispatches; the modes live in
// diagnose_cmd.cpp, launch_cmd.cpp and demo_cmd.cpp, the outputs in
// report_output.cpp.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "collector.h"
#include "hangtrace/live.h"
#include "hangtrace/model.h"
#include "live_tracer.h"

namespace hangtrace::cli {

constexpr int kExitOk = 0;
constexpr int kExitError = 1;
constexpr int kExitHang = 2;

struct Options {
  // What the user named: --pid values as given (any spelling: "1 2", "1,2",
  // repeated), and the selectors of a host-wide search (--match, --cgroup).
  std::vector<std::string> pid_args;
  bool pid_given = false;
  bool subtree = false;  // --subtree: each pid is a root, no walk up to its job's
  std::vector<std::string> match_patterns, cgroup_paths;
  // The job being diagnosed: its root, and the named pids that belong to it.
  int pid = 0;
  std::vector<int> given_pids;
  std::string root_parent;
  // Several jobs: each report's JSON text lands here, written as one array.
  std::vector<std::string>* json_reports = nullptr;
  std::vector<std::string> command;  // launch mode: everything after "--"
  double hang_after_s = 0;
  double min_block_ms = 5;
  int ringbuf_mb = 8;
  int sample_hz = 49;  // --sample-hz: on-CPU samples per second per CPU in live windows (0: off)
  bool list_hooks = false;
  double duration_s = 0;
  bool duration_given = false;
  double stall_after_s = 10;
  std::string json_path;
  std::string save_snapshot_path;
  std::string from_snapshot_path;
  std::string folded_path, flamegraph_path, speedscope_path, trace_path;  // postmortem exports
  std::string wall_folded_path, wall_flamegraph_path;  // wall time by cause (live windows)
  std::string bundle_parent;  // --bundle DIR: also write a postmortem bundle under DIR
  int verbosity = 0;
  bool no_bpf = false;
};

// The report (text, or JSON with --json) and the outputs Options asks for:
// --save-snapshot, the exports, --bundle. Its exit status: kExitHang when the
// diagnosis found a hang or a critical finding.
int report(const Snapshot& snap, const Options& opt, const LiveObservation* live = nullptr);

// hangtrace [--pid PID...] [--match RE] [--cgroup PATH]: the named pids, or
// every training job on the host, grouped into jobs, each diagnosed
// (run_live); the exit status of the worst (jobs_cmd.cpp).
int run_jobs(const Options& opt);
// One job, opt.pid its root: the snapshot, and a live window when --duration asks
// for one or the job uses CUDA (diagnose_cmd.cpp).
int run_live(const Options& opt);
// hangtrace --from-snapshot FILE (diagnose_cmd.cpp).
int run_offline(const Options& opt);
// hangtrace --list-hooks (diagnose_cmd.cpp).
int list_hooks(const Options& opt);
// hangtrace [options] -- COMMAND: traced from its first instruction (launch_cmd.cpp).
int run_launch(const Options& opt);
// hangtrace demo: the bundled hung training job (demo_cmd.cpp).
int run_demo(Options opt);

// ---- what the live modes share (diagnose_cmd.cpp) ----
LiveOptions live_options(const Options& opt);
CollectOptions collect_options(const Options& opt);
// Set by SIGINT/SIGTERM once install_interrupt_handlers() ran: a live window
// ends early, and the report is still written.
extern std::atomic<bool> g_interrupted;
void install_interrupt_handlers();
// User stacks of live records: named from the module files with the same
// build-id symbol cache the snapshot's native stacks use.
void symbolize_live_user_frames(std::vector<UserFrame>& frames);

}  // namespace hangtrace::cli
