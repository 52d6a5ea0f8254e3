// hangtrace: why did this training job stop making progress?
//
//   sudo hangtrace --pid $(pgrep -f train)      snapshot, diagnosis, verdict
//   sudo hangtrace demo                          the same on a bundled hung job
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>
#include <string>

#include "collector.h"
#include "demo_job.h"
#include "hangtrace/analysis.h"
#include "hangtrace/bundle.h"
#include "hangtrace/exports.h"
#include "hangtrace/output_file.h"
#include "hangtrace/report.h"
#include "hangtrace/snapshot_json.h"
#include "hangtrace/gpu.h"
#include "live_cupti.h"
#include "live_session.h"
#include "mapped_modules.h"
#include "native_stacks.h"
#include "process_meta.h"
#include "subcommands.h"
#include "task_iter.h"

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

}  // namespace hangtrace::cli

namespace {

using namespace hangtrace;
using hangtrace::cli::fail;
using hangtrace::cli::write_output;

constexpr int kExitOk = 0;
constexpr int kExitError = 1;
constexpr int kExitHang = 2;

std::atomic<bool> g_interrupted{false};

void on_interrupt(int) { g_interrupted = true; }

// SIGINT/SIGTERM end a live window early; the report is still written.
void install_interrupt_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

// User stacks of live records: named from the module files with the same
// build-id symbol cache the snapshot's native stacks use.
void symbolize_live_user_frames(std::vector<UserFrame>& frames) {
  process_native_stack_cache().symbolize_file_frames(frames);
}

struct Options {
  int pid = 0;
  std::vector<std::string> command;  // launch mode: everything after "--"
  double hang_after_s = 0;
  double min_block_ms = 5;
  int ringbuf_mb = 8;
  bool list_hooks = false;
  double duration_s = 0;
  bool duration_given = false;
  double stall_after_s = 10;
  std::string json_path;
  std::string save_snapshot_path;
  std::string from_snapshot_path;
  std::string folded_path, flamegraph_path, speedscope_path, trace_path;  // postmortem exports
  std::string bundle_parent;  // --bundle DIR: also write a postmortem bundle under DIR
  int verbosity = 0;
  bool no_bpf = false;
};

// The postmortem exports (docs/exports.md), each written whole or not at all.
bool write_exports(const Snapshot& snap, const Diagnosis& d, const Options& opt, const LiveObservation* live,
                   std::string* error) {
  if (opt.folded_path.empty() && opt.flamegraph_path.empty() && opt.speedscope_path.empty() &&
      opt.trace_path.empty())
    return true;
  FoldedProfile folded = build_folded(snap, &d, live);
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
  // A comm is raw bytes: invalid UTF-8 is replaced, not thrown on.
  auto dump = [](const nlohmann::json& j) {
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  };
  if (!opt.speedscope_path.empty() &&
      !write_output(opt.speedscope_path, dump(render_speedscope(folded, name)), error))
    return false;
  if (!opt.trace_path.empty() &&
      !write_output(opt.trace_path, dump(render_chrome_trace(snap, &d, live)), error))
    return false;
  return true;
}

int report(const Snapshot& snap, const Options& opt, const LiveObservation* live = nullptr) {
  AnalysisOptions analysis;
  analysis.stall_after_s = opt.stall_after_s;
  Diagnosis d = diagnose(snap, analysis, live);
  std::string error;
  if (!opt.save_snapshot_path.empty() &&
      !write_output(opt.save_snapshot_path, snapshot_to_json(snap).dump(1) + "\n", &error))
    return fail(error);
  bool json_to_stdout = opt.json_path == "-";
  if (!opt.json_path.empty() &&
      !write_output(opt.json_path, render_json(snap, d, live).dump(2) + "\n", &error))
    return fail(error);
  if (!write_exports(snap, d, opt, live, &error)) return fail(error);
  if (!opt.bundle_parent.empty()) {
    BundleMeta meta = bundle_meta_for(snap, d, "manual");
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

LiveOptions live_options(const Options& opt) {
  LiveOptions lo;
  lo.min_block_ns = static_cast<uint64_t>(opt.min_block_ms * 1e6);
  lo.ringbuf_bytes = static_cast<uint64_t>(opt.ringbuf_mb) << 20;
  lo.verbosity = opt.verbosity > 2 ? opt.verbosity - 2 : 0;
  return lo;
}

CollectOptions collect_options(const Options& opt) {
  CollectOptions co;
  co.use_bpf = !opt.no_bpf;
  co.verbosity = opt.verbosity;
  co.min_progress_window_s = 0.2;
  return co;
}

constexpr double kCudaJobWindowS = 3.0;

int run_live_window(const Options& opt);

int run_live(const Options& opt) {
  if (geteuid() != 0)
    return fail(
        "needs root (CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE) to read other processes' waits: run it with sudo");
  if (opt.verbosity > 2) set_bpf_verbosity(opt.verbosity - 2);
  Options o = opt;
  // Whether the GPU is starved or busy, and what a synchronize waits for, is
  // only seen while tracing (uprobes, CUPTI, NVML): a CUDA job gets a short
  // window unless one was asked for (--duration 0: none).
  if (!o.duration_given && !o.no_bpf && maps_libcuda(o.pid)) {
    o.duration_s = kCudaJobWindowS;
    std::fprintf(stderr,
                 "hangtrace: pid %d uses CUDA: watching the GPU side for %.0f s (--duration changes it)\n",
                 o.pid, o.duration_s);
  }
  return run_live_window(o);
}

int run_live_window(const Options& opt) {
  // Two captures (before and after the window): verify the task iterator once.
  if (opt.duration_s > 0) keep_task_iterator_loaded(true);
  Result<Snapshot> snap = collect_snapshot(opt.pid, collect_options(opt));
  if (!snap) return fail(snap.error());
  if (opt.duration_s <= 0 || opt.no_bpf) return report(*snap, opt);

  // Snapshot first (waits already in flight), then watch what happens next.
  std::vector<int> tree;
  for (const auto& p : snap->processes)
    if (p.role != ProcessRole::Peer && p.state != 'Z') tree.push_back(p.pid);
  auto session = LiveSession::start(tree, live_options(opt));
  if (!session) return fail(session.error());
  install_interrupt_handlers();
  std::fprintf(stderr, "hangtrace: tracing %zu process(es) for %.0f s (Ctrl-C ends early)...\n", tree.size(),
               opt.duration_s);
  const uint64_t end = (*session)->now_ns() + static_cast<uint64_t>(opt.duration_s * 1e9);
  (*session)->run_until([&] { return (*session)->now_ns() >= end || kill(opt.pid, 0) != 0; }, g_interrupted);
  LiveObservation live = (*session)->finish(symbolize_live_user_frames);
  Result<Snapshot> after = collect_snapshot(opt.pid, collect_options(opt));
  if (after) return report(*after, opt, &live);
  // The target went away during the window: report on the first snapshot.
  snap->limitations.push_back(fmt::format("the target exited during the live window ({})", after.error()));
  return report(*snap, opt, &live);
}

// Total CPU time (ns) of the traced processes still alive; the job makes
// progress while this grows.
uint64_t tree_cpu_ns(const std::set<int>& pids) {
  uint64_t total = 0;
  const double ns_per_tick = 1e9 / static_cast<double>(sysconf(_SC_CLK_TCK));
  const procfs::ProcFs proc;
  for (int pid : pids)
    if (auto st = proc.stat(pid))
      total += static_cast<uint64_t>((st->utime_ticks + st->stime_ticks) * ns_per_tick);
  return total;
}

int run_launch(const Options& opt) {
  if (geteuid() != 0)
    return fail("needs root (CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE) to trace a job: run it with sudo");
  int go[2];
  if (pipe2(go, O_CLOEXEC) != 0)
    return fail(fmt::format("failed to create a pipe: {}", std::strerror(errno)));
  // CUPTI activity (kernels, copies, synchronization) comes from hangtrace's
  // injection library, which the CUDA driver loads at cuInit when this names
  // it. A job that already names one (another profiler) keeps its own.
  std::optional<std::string> injection;
  if (const char* own = std::getenv("CUDA_INJECTION64_PATH"); own && *own) {
    if (opt.verbosity > 0)
      std::fprintf(stderr, "hangtrace: CUDA_INJECTION64_PATH is set (%s): no CUPTI activity from hangtrace\n",
                   own);
  } else {
    injection = find_cupti_injection_library();
  }
  pid_t job = fork();
  if (job < 0) return fail(fmt::format("failed to fork: {}", std::strerror(errno)));
  if (job == 0) {
    // Held until the tracer is attached, so the job is traced from its first
    // instruction and every worker it forks is followed.
    close(go[1]);
    char c;
    if (read(go[0], &c, 1) != 1) _exit(127);
    if (injection) setenv("CUDA_INJECTION64_PATH", injection->c_str(), 1);
    std::vector<char*> args;
    for (const auto& a : opt.command) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::fprintf(stderr, "hangtrace: failed to run %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  close(go[0]);
  auto session = LiveSession::start({job}, live_options(opt));
  if (!session) {
    kill(job, SIGKILL);
    waitpid(job, nullptr, 0);
    return fail(session.error());
  }
  install_interrupt_handlers();
  // The job should see Ctrl-C as usual; hangtrace reports when it ends.
  if (write(go[1], "g", 1) != 1) return fail("failed to start the job");
  close(go[1]);

  int status = 0;
  bool exited = false, hung = false;
  uint64_t last_progress_ns = (*session)->now_ns(), last_cpu = 0, last_check = 0;
  (*session)->run_until(
      [&] {
        pid_t r = waitpid(job, &status, WNOHANG);
        if (r == job) return exited = true;
        if (opt.hang_after_s <= 0) return false;
        uint64_t now = (*session)->now_ns();
        if (now - last_check < 500'000'000ull) return false;
        last_check = now;
        uint64_t cpu = tree_cpu_ns((*session)->traced());
        // Under 1% of a core since the last check is no progress.
        if (cpu > last_cpu + (now - last_progress_ns) / 100 || last_cpu == 0) {
          if (cpu > last_cpu) last_progress_ns = now;
          last_cpu = cpu;
        }
        uint64_t limit = static_cast<uint64_t>(opt.hang_after_s * 1e9);
        // A host thread spinning in a CUDA synchronize or an NCCL call burns
        // CPU without progress: a call that old counts as a hang too.
        for (const auto& t : (*session)->gpu_threads())
          if ((gpu_fn_is_host_wait(t.in_fn) || gpu_fn_is_nccl_transfer(t.in_fn)) && t.in_since_ns &&
              now - t.in_since_ns >= limit)
            return hung = true;
        return hung = now - last_progress_ns >= limit;
      },
      g_interrupted);
  LiveObservation live = (*session)->finish(symbolize_live_user_frames);
  if (exited && WIFSIGNALED(status)) {
    // waitpid saw the job die; make sure the observation has it even if the
    // exit hook is unavailable on this kernel.
    bool seen = false;
    for (const auto& d : live.deaths) seen |= d.pid == job;
    if (!seen) {
      ProcessDeath d;
      d.pid = job;
      d.signal = WTERMSIG(status);
      d.exit_code = WTERMSIG(status);
      if (auto it = live.meta.find(job); it != live.meta.end()) d.comm = it->second.comm;
      live.deaths.push_back(d);
    }
  }
  if (exited) {
    std::string how = WIFSIGNALED(status) ? fmt::format("killed by {}", strsignal(WTERMSIG(status)))
                                          : fmt::format("exit status {}", WEXITSTATUS(status));
    Snapshot s =
        exited_job_snapshot(job, live, "the job exited (" + how + ") before a snapshot could be taken");
    std::fprintf(stderr, "hangtrace: the job (pid %d) ended: %s\n", job, how.c_str());
    return report(s, opt, &live);
  }
  Result<Snapshot> snap = collect_snapshot(job, collect_options(opt));
  if (!snap) return fail(snap.error());
  if (hung)
    std::fprintf(stderr, "hangtrace: no progress for %.0f s; the job (pid %d) is left running\n",
                 opt.hang_after_s, job);
  else
    std::fprintf(stderr, "hangtrace: interrupted; the job (pid %d) is left running\n", job);
  return report(*snap, opt, &live);
}

int list_hooks(const Options& opt) {
  if (geteuid() != 0) return fail("needs root to load BPF programs: run it with sudo");
  LiveOptions lo = live_options(opt);
  auto tracer = LiveTracer::start(lo);
  if (!tracer) return fail(tracer.error());
  int active = 0, standby = 0, off = 0;
  for (const auto& h : (*tracer)->hooks()) {
    // The loser of a twin pair (tp_btf vs raw_tp) is on standby, not missing; so is a
    // concern waiting for a library to probe (gpu).
    bool twin = !h.active && (h.reason.rfind("not needed", 0) == 0 || h.reason.rfind("standby", 0) == 0);
    const char* state = h.active ? "active" : twin ? "standby" : "off";
    (h.active ? active : twin ? standby : off)++;
    std::printf("%-9s %-8s %-34s %s\n", h.concern.c_str(), state, h.attach.c_str(), h.reason.c_str());
  }
  struct utsname u {};
  uname(&u);
  std::printf("%d hooks active, %d twins on standby, %d unavailable on kernel %s\n", active, standby, off,
              u.release);
  return kExitOk;
}

int run_offline(const Options& opt) {
  std::ifstream in(opt.from_snapshot_path);
  if (!in) return fail(fmt::format("failed to read {}: {}", opt.from_snapshot_path, std::strerror(errno)));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Result<Snapshot> snap = snapshot_from_json_text(text);
  if (!snap) return fail(fmt::format("failed to read {}: {}", opt.from_snapshot_path, snap.error()));
  return report(*snap, opt);
}

// ---- demo: the bundled hung job --------------------------------------------------
int run_demo(Options opt) {
  if (geteuid() != 0) return fail("the demo needs root like hangtrace itself: run it with sudo");
  char dir_template[] = "/tmp/hangtrace-demo.XXXXXX";
  if (!mkdtemp(dir_template))
    return fail(fmt::format("failed to create a temp dir: {}", std::strerror(errno)));
  std::string dir = dir_template;
  std::string script = dir + "/train.py";
  if (auto w = write_new_file(script, embedded::kDemoJob); !w) {
    rmdir(dir.c_str());
    return fail(w.error());
  }
  int out_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return fail("failed to create a pipe");
  pid_t job = fork();
  if (job == 0) {
    setsid();
    dup2(out_pipe[1], STDOUT_FILENO);
    const char* python = access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
    execlp(python, python, script.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out_pipe[1]);
  auto cleanup = [&] {
    kill(-job, SIGKILL);
    int st;
    waitpid(job, &st, 0);
    close(out_pipe[0]);
    unlink(script.c_str());
    rmdir(dir.c_str());
  };
  std::fprintf(stderr,
               "hangtrace demo: started the bundled hung training job (pid %d), waiting for it to hang...\n",
               job);
  std::string buffer, ready_line;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(180);
  while (ready_line.empty()) {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{out_pipe[0], POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[1024];
    ssize_t n = read(out_pipe[0], buf, sizeof buf);
    if (n <= 0) break;
    buffer.append(buf, static_cast<size_t>(n));
    size_t pos = buffer.find("READY");
    if (pos != std::string::npos && buffer.find('\n', pos) != std::string::npos)
      ready_line = buffer.substr(pos, buffer.find('\n', pos) - pos);
  }
  if (ready_line.empty()) {
    cleanup();
    return fail("the demo job did not reach its hang (is PyTorch installed for /usr/bin/python3?)");
  }
  // The job says READY just before its main thread blocks; wait until the
  // kernel shows it inside the wait.
  const procfs::ProcFs proc;
  for (int i = 0; i < 200; ++i) {
    auto sc = proc.thread_syscall(job, job);
    if (sc && sc->mode == SyscallState::Mode::InSyscall) break;
    usleep(10000);
  }
  std::fprintf(stderr, "hangtrace demo: %s\nhangtrace demo: $ sudo hangtrace --pid %d\n\n",
               ready_line.c_str(), job);
  opt.pid = job;
  int rc = run_live(opt);
  std::fflush(stdout);
  cleanup();
  if (rc == kExitHang) {
    std::fprintf(stderr, "\nhangtrace demo: diagnosed the hang; the job was stopped.\n");
    return kExitOk;
  }
  return rc == kExitOk ? fail("the demo job was not diagnosed as hung") : rc;
}

}  // namespace

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
  Options opt;
  app.add_option("-p,--pid", opt.pid, "PID of the training job (its workers are found automatically)");
  app.add_option("-d,--duration", opt.duration_s,
                 "seconds to watch for progress after the snapshot (0 = snapshot only)")
      ->check(CLI::Range(0.0, 86400.0));
  app.add_option("--stall-after", opt.stall_after_s, "a socket wait this long (s) counts as stalled")
      ->check(CLI::Range(0.0, 1e9));
  app.add_option("--json", opt.json_path, "write the JSON report to FILE ('-' = stdout, no text report)");
  app.add_option("--save-snapshot", opt.save_snapshot_path, "also write the raw snapshot (JSON) to FILE");
  app.add_option("--from-snapshot", opt.from_snapshot_path, "analyse a saved snapshot instead of a live pid");
  app.add_option("--folded", opt.folded_path,
                 "write blocked time as folded stacks (flamegraph.pl input) to FILE");
  app.add_option("--flamegraph", opt.flamegraph_path,
                 "write an interactive SVG flame graph of blocked time to FILE");
  app.add_option("--speedscope", opt.speedscope_path,
                 "write blocked time as a speedscope profile (JSON) to FILE");
  app.add_option("--trace", opt.trace_path,
                 "write a Chrome Trace Event timeline (Perfetto, chrome://tracing) to FILE");
  app.add_option(
      "--bundle", opt.bundle_parent,
      "also write a postmortem bundle (report, snapshot, stacks, flame graph, timeline) under DIR");
  app.add_flag("--no-bpf", opt.no_bpf, "don't load BPF (no kernel stacks or blocked times, no live tracing)");
  app.add_option("--hang-after", opt.hang_after_s,
                 "with -- COMMAND: report when the job makes no progress (CPU) for this many seconds")
      ->check(CLI::Range(0.0, 1e9));
  app.add_option("--min-block-ms", opt.min_block_ms, "live: stream waits longer than this (ms, default 5)")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--ringbuf-mb", opt.ringbuf_mb, "live: ring buffer size in MiB (default 8)")
      ->check(CLI::Range(1, 1024));
  app.add_flag("--list-hooks", opt.list_hooks,
               "list the live-tracing hooks and whether this kernel has them");
  app.add_flag("-v,--verbose", opt.verbosity, "more detail: -v all threads, -vv kernel stacks, -vvv libbpf");
  auto* demo = app.add_subcommand("demo", "run the bundled hung training job and diagnose it");
  std::vector<hangtrace::cli::Subcommand> subcommands = {hangtrace::cli::add_daemon_subcommand(app),
                                                         hangtrace::cli::add_doctor_subcommand(app),
                                                         hangtrace::cli::add_merge_subcommand(app)};
  app.require_subcommand(0, 1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitError;
  }
  opt.command = command;
  opt.duration_given = app.count("--duration") > 0;
  if (demo->parsed()) return run_demo(opt);
  for (const auto& sub : subcommands)
    if (sub.app->parsed()) return sub.run();
  if (opt.list_hooks) return list_hooks(opt);
  if (!opt.command.empty()) return run_launch(opt);
  if (!opt.from_snapshot_path.empty()) return run_offline(opt);
  if (opt.pid <= 0)
    return fail("no target: pass --pid PID, or -- COMMAND to launch one (or 'hangtrace demo'); see --help");
  return run_live(opt);
}
