// hangtrace: why did this training job stop making progress?
//
//   sudo hangtrace --pid $(pgrep -f train)      snapshot, diagnosis, verdict
//   sudo hangtrace demo                          the same on a bundled hung job
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

#include "collector.h"
#include "demo_job.h"
#include "hangtrace/analysis.h"
#include "hangtrace/report.h"
#include "hangtrace/snapshot_json.h"
#include "task_iter.h"

namespace {

using namespace hangtrace;

constexpr int kExitOk = 0;
constexpr int kExitError = 1;
constexpr int kExitHang = 2;

int fail(const std::string& message) {
  std::fprintf(stderr, "hangtrace: %s\n", message.c_str());
  return kExitError;
}

// Writes `content` to `path` atomically: a reader sees the old file or the
// whole new one, never half of it. "-" means stdout.
bool write_output(const std::string& path, const std::string& content, std::string* error) {
  if (path == "-") {
    std::fwrite(content.data(), 1, content.size(), stdout);
    std::fflush(stdout);
    return true;
  }
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    *error = fmt::format("failed to write {}: {}", path, std::strerror(errno));
    return false;
  }
  size_t off = 0;
  while (off < content.size()) {
    ssize_t n = write(fd, content.data() + off, content.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      *error = fmt::format("failed to write {}: {}", path, std::strerror(errno));
      close(fd);
      unlink(tmp.c_str());
      return false;
    }
    off += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0 && errno != EINVAL) {
    *error = fmt::format("failed to write {}: {}", path, std::strerror(errno));
    close(fd);
    unlink(tmp.c_str());
    return false;
  }
  close(fd);
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    *error = fmt::format("failed to write {}: {}", path, std::strerror(errno));
    unlink(tmp.c_str());
    return false;
  }
  return true;
}

struct Options {
  int pid = 0;
  double duration_s = 0;
  double stall_after_s = 10;
  std::string json_path;
  std::string save_snapshot_path;
  std::string from_snapshot_path;
  int verbosity = 0;
  bool no_bpf = false;
};

int report(const Snapshot& snap, const Options& opt) {
  AnalysisOptions analysis;
  analysis.stall_after_s = opt.stall_after_s;
  Diagnosis d = diagnose(snap, analysis);
  std::string error;
  if (!opt.save_snapshot_path.empty() &&
      !write_output(opt.save_snapshot_path, snapshot_to_json(snap).dump(1) + "\n", &error))
    return fail(error);
  bool json_to_stdout = opt.json_path == "-";
  if (!opt.json_path.empty() && !write_output(opt.json_path, render_json(snap, d).dump(2) + "\n", &error))
    return fail(error);
  if (!json_to_stdout) {
    ReportOptions ro;
    ro.verbosity = opt.verbosity;
    std::fputs(render_text(snap, d, ro).c_str(), stdout);
  }
  return exit_status_for(d) == 2 ? kExitHang : kExitOk;
}

int run_live(const Options& opt) {
  if (geteuid() != 0)
    return fail(
        "needs root (CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE) to read other processes' waits: run it with sudo");
  CollectOptions co;
  co.use_bpf = !opt.no_bpf;
  co.verbosity = opt.verbosity;
  co.min_progress_window_s = opt.duration_s > 0 ? opt.duration_s : 0.2;
  if (opt.verbosity > 2) set_bpf_verbosity(opt.verbosity);
  Result<Snapshot> snap = collect_snapshot(opt.pid, co);
  if (!snap) return fail(snap.error());
  return report(*snap, opt);
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
  {
    std::ofstream out(script);
    out << embedded::kDemoJob;
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
  for (int i = 0; i < 200; ++i) {
    std::ifstream sc(fmt::format("/proc/{}/syscall", job));
    std::string first;
    sc >> first;
    if (first != "running" && first != "-1" && !first.empty()) break;
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
  app.add_flag("--no-bpf", opt.no_bpf, "don't load BPF (no kernel stacks or blocked times)");
  app.add_flag("-v,--verbose", opt.verbosity, "more detail: -v all threads, -vv kernel stacks, -vvv libbpf");
  auto* demo = app.add_subcommand("demo", "run the bundled hung training job and diagnose it");
  app.require_subcommand(0, 1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitError;
  }
  if (demo->parsed()) return run_demo(opt);
  if (!opt.from_snapshot_path.empty()) return run_offline(opt);
  if (opt.pid <= 0) return fail("no target: pass --pid PID (or 'hangtrace demo'); see --help");
  return run_live(opt);
}
