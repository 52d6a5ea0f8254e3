// hangtrace daemon: the always-on fleet mode's command line (daemon.h).
#include <fmt/format.h>
#include <linux/capability.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>

#include "daemon.h"
#include "privileges.h"
#include "hangtrace/kallsyms.h"
#include "subcommands.h"
#include "task_iter.h"

namespace hangtrace::cli {

namespace {

std::atomic<bool> g_stop{false};

std::atomic<bool> g_profile{false};

void on_stop(int) { g_stop = true; }
void on_profile(int) { g_profile = true; }

int run_daemon(const DaemonOptions& o) {
  // What it cannot do its job without (docs/deploy.md has what breaks without each).
  if (std::string failure = privilege_failure("start the daemon", true); !failure.empty())
    return fail(failure);
  // Degraded, not fatal: the kernel decides whether kallsyms needs CAP_SYSLOG.
  if (auto symbols = KernelSymbols::load(); !symbols)
    std::fprintf(stderr, "hangtrace daemon: warning: kernel stacks will not be symbolized: %s\n",
                 symbols.error().c_str());
  if (o.selectors.empty())
    return fail("no selector: pass --match REGEX, --cgroup PATH or --gpu (see --help)");
  if (o.verbosity > 2) set_bpf_verbosity(o.verbosity - 2);
  auto d = Daemon::start(o);
  if (!d) return fail(d.error());
  struct sigaction sa {};
  sa.sa_handler = on_stop;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sa.sa_handler = on_profile;
  sigaction(SIGUSR1, &sa, nullptr);
  return (*d)->run(g_stop, &g_profile);
}

}  // namespace

Subcommand add_daemon_subcommand(CLI::App& parent) {
  auto o = std::make_shared<DaemonOptions>();
  Subcommand s;
  CLI::App* app = parent.add_subcommand(
      "daemon",
      "always-on fleet mode: track every matching job, write a postmortem bundle when one hangs or a process "
      "of it is OOM-killed, dies of SIGBUS or exits abnormally; Prometheus metrics on /metrics");
  app->add_option("--match", o->selectors.cmdline_patterns,
                  "track processes whose command line (its first 1 MiB) matches this regex (RE2 syntax; "
                  "repeatable), e.g. 'train\\.py'");
  app->add_option("--cgroup", o->selectors.cgroup_prefixes,
                  "track processes in a cgroup whose path starts with this (repeatable), e.g. /kubepods");
  app->add_flag("--gpu", o->selectors.gpu, "track processes holding an NVIDIA GPU open (/dev/nvidiaN)");
  app->add_option("--hang-after", o->hang_after_s,
                  "a job is hung after this many seconds without progress (wakeups from its workers, its "
                  "main thread woken from a wait without a timeout, GPU launches, or its main thread's "
                  "Python frames changing); default 180")
      ->check(CLI::Range(1.0, 1e7));
  app->add_option("--check-every", o->check_every_s,
                  "seconds between progress samples (default: hang-after/12)")
      ->check(CLI::Range(0.0, 3600.0));
  app->add_option("--steady-state", o->steady_state,
                  "sampled (default): no hook on any syscall, context switch or wakeup; the threads of "
                  "tracked jobs are sampled (--sample-every) and the exact hooks attached only while a job "
                  "makes no progress for --suspect-after. exact: the exact hooks always (in-kernel "
                  "histograms of every wait, who-woke-whom counts; costs every syscall of the machine)")
      ->check(CLI::IsMember({"sampled", "exact"}));
  app->add_option("--sample-every", o->sample_every_s,
                  "seconds between passes over the tracked threads in the sampled steady state (default 1)")
      ->check(CLI::Range(0.05, 60.0));
  app->add_option("--suspect-after", o->suspect_after_s,
                  "the sampled steady state attaches the exact hooks when a job made no progress for this "
                  "long (default: hang-after/4, at least two progress samples)")
      ->check(CLI::Range(0.0, 1e7));
  app->add_option("--profile-seconds", o->profile_seconds,
                  "on SIGUSR1, profile every tracked job this long (every wait counted, the exact hooks "
                  "attached), then write a bundle per job with its stall profile; default 5")
      ->check(CLI::Range(1.0, 600.0));
  app->add_option("--profile-sample-hz", o->profile_sample_hz,
                  "on-CPU samples per second (Python frames, read from outside the process) in that "
                  "profile; 0: none. Default 49")
      ->check(CLI::Range(0, 1000));
  app->add_option("--bundle-dir", o->bundle_dir,
                  "where postmortem bundles go (default /var/lib/hangtrace/bundles)");
  app->add_option("--keep", o->keep_bundles, "keep the newest N bundles (default 50)")
      ->check(CLI::Range(1, 100000));
  app->add_option("--metrics", o->metrics_address,
                  "serve Prometheus metrics on HOST:PORT (default 127.0.0.1:9464; '' = off)");
  app->add_flag("--serve-bundles", o->serve_bundles,
                "also serve the bundles read-only there: /bundles (an index, JSON), /bundles/NAME (one "
                "bundle, a tar archive); beyond loopback only with --bundle-token-file");
  app->add_option("--bundle-token-file", o->bundle_token_file,
                  "a file (mode 0600) whose first line is the token /bundles requests must carry "
                  "(Authorization: Bearer TOKEN)");
  app->add_option("--recorder-minutes", o->recorder_minutes,
                  "minutes of each job's significant events kept in memory (default 10)")
      ->check(CLI::Range(0.1, 1440.0));
  app->add_option("--record-waits-after-ms", o->record_waits_after_ms,
                  "waits at least this long (ms) go to the flight recorder (default 1000)")
      ->check(CLI::Range(1.0, 1e9));
  app->add_option("--scan-every", o->scan_every_s, "seconds between scans for new jobs (default 2)")
      ->check(CLI::Range(0.1, 3600.0));
  app->add_option("--ringbuf-mb", o->ringbuf_mb, "ring buffer size in MiB (default 4)")
      ->check(CLI::Range(1, 1024));
  app->add_option("--stall-after", o->stall_after_s, "a socket wait this long (s) counts as stalled")
      ->check(CLI::Range(0.0, 1e9));
  app->add_flag("-v,--verbose", o->verbosity,
                "more detail on stderr (-v jobs' processes, -vv progress, -vvv libbpf)");
  s.app = app;
  s.run = [o] { return run_daemon(*o); };
  return s;
}

}  // namespace hangtrace::cli
