// hangtrace: why did this training job stop making progress?
//
//   sudo hangtrace --pid $(pgrep -f train)      snapshot, diagnosis, verdict
//   sudo hangtrace                               the same for every training job here
//   sudo hangtrace demo                          the same on a bundled hung job
//
// Option parsing and dispatch: the default command's modes are in
// diagnose.h, the subcommands in subcommands.h.
#include <signal.h>

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "diagnose.h"
#include "subcommands.h"

using namespace hangtrace;
using namespace hangtrace::cli;

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  // "hangtrace [options] -- COMMAND ARGS": what follows "--" is the job.
  std::vector<std::string> command;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--") {
      for (int j = i + 1; j < argc; ++j) command.push_back(argv[j]);
      argc = i;
      break;
    }
  }
  CLI::App app{
      "hangtrace: why did this training job stop making progress?\n"
      "Snapshots every thread of the job and its workers, resolves what each waits on\n"
      "(locks, pipes, sockets, /dev/shm, children) and names the wait cycle and the fix.\n"
      "Exit status: 0 no hang found, 2 hang or critical finding, 1 error."};
  app.set_version_flag("--version", "hangtrace " HANGTRACE_VERSION);
  Options opt;
  auto* pid_option =
      app.add_option("-p,--pid", opt.pid_args,
                     "PIDs of the job: any of its processes (main, a worker, a rank, the launcher) -- "
                     "'--pid 1 2 3', '-p 1,2,3', '--pid $(pgrep -f train)'; each is diagnosed as the whole "
                     "job it belongs to. Without --pid: every training job on the host")
          ->expected(0, CLI::detail::expected_max_vector_size);
  app.add_flag(
      "--subtree", opt.subtree,
      "diagnose each --pid with its descendants only, not the whole job it belongs to (one rank of a "
      "multi-host job, as each host's hangtrace sees it)");
  app.add_option("--match", opt.match_patterns,
                 "without --pid: the jobs whose command line (its first 1 MiB) matches REGEX (RE2 syntax: "
                 "no backreferences or lookarounds), not every training job; repeatable");
  app.add_option("--cgroup", opt.cgroup_paths,
                 "without --pid: the jobs in the cgroup PATH (as /proc/PID/cgroup shows it, e.g. "
                 "/kubepods/burstable/pod...); repeatable");
  app.add_option("-d,--duration", opt.duration_s,
                 "seconds to watch for progress after the snapshot (0 = snapshot only)")
      ->check(CLI::Range(0.0, 86400.0));
  app.add_option("--stall-after", opt.stall_after_s,
                 "a socket, DNS, file-system or GIL wait this long (s) counts as stalled")
      ->check(CLI::Range(0.0, 1e9));
  // The report and the postmortem outputs, each to a FILE (or DIR).
  const struct {
    const char* name;
    std::string* path;
    const char* help;
  } files[] = {
      {"--json", &opt.json_path, "write the JSON report to FILE ('-' = stdout, no text report)"},
      {"--save-snapshot", &opt.save_snapshot_path, "also write the raw snapshot (JSON) to FILE"},
      {"--from-snapshot", &opt.from_snapshot_path, "analyse a saved snapshot instead of a live pid"},
      {"--folded", &opt.folded_path, "write blocked time as folded stacks (flamegraph.pl input) to FILE"},
      {"--flamegraph", &opt.flamegraph_path, "write an interactive SVG flame graph of blocked time to FILE"},
      {"--speedscope", &opt.speedscope_path,
       "write blocked time as a speedscope profile (JSON) to FILE; live: also wall time by cause"},
      {"--wall-folded", &opt.wall_folded_path,
       "live: write the main threads' wall time by cause, the critical path under each wait, as folded "
       "stacks "
       "to FILE"},
      {"--wall-flamegraph", &opt.wall_flamegraph_path,
       "live: write an SVG flame graph of the main threads' wall time by cause to FILE"},
      {"--trace", &opt.trace_path,
       "write a Chrome Trace Event timeline (Perfetto, chrome://tracing) to FILE"},
      {"--bundle", &opt.bundle_parent,
       "also write a postmortem bundle (report, snapshot, stacks, flame graph, timeline) under DIR"},
  };
  for (const auto& f : files) app.add_option(f.name, *f.path, f.help);
  app.add_flag("--no-bpf", opt.no_bpf, "don't load BPF (no kernel stacks or blocked times, no live tracing)");
  app.add_option("--hang-after", opt.hang_after_s,
                 "with -- COMMAND: report when the job makes no progress (CPU) for this many seconds")
      ->check(CLI::Range(0.0, 1e9));
  app.add_option("--min-block-ms", opt.min_block_ms, "live: stream waits longer than this (ms, default 5)")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--ringbuf-mb", opt.ringbuf_mb, "live: ring buffer size in MiB (default 8)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--sample-hz", opt.sample_hz,
                 "live: on-CPU stack samples of the traced threads per second per CPU (0 = off, default 49)")
      ->check(CLI::Range(0, 999));
  app.add_flag("--list-hooks", opt.list_hooks,
               "list the live-tracing hooks and whether this kernel has them");
  app.add_flag("-v,--verbose", opt.verbosity, "more detail: -v all threads, -vv kernel stacks, -vvv libbpf");
  auto* demo = app.add_subcommand("demo", "run the bundled hung training job and diagnose it");
  std::vector<Subcommand> subcommands = {add_daemon_subcommand(app), add_doctor_subcommand(app),
                                         add_merge_subcommand(app)};
  app.require_subcommand(0, 1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitError;
  }
  opt.command = command;
  opt.duration_given = app.count("--duration") > 0;
  opt.pid_given = pid_option->count() > 0;
  if (demo->parsed()) return run_demo(opt);
  for (const auto& sub : subcommands)
    if (sub.app->parsed()) return sub.run();
  if (opt.list_hooks) return list_hooks(opt);
  if (!opt.command.empty()) return run_launch(opt);
  if (!opt.from_snapshot_path.empty()) return run_offline(opt);
  if (opt.pid_given && (!opt.match_patterns.empty() || !opt.cgroup_paths.empty()))
    return fail("--match and --cgroup choose jobs without --pid: give one or the other");
  return run_jobs(opt);
}
