// hangtrace demo: the bundled hung training job (demo_job.h), started,
// waited for until its main thread blocks, and diagnosed as `hangtrace --pid`
// would; stopped afterwards.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "demo_job.h"
#include "diagnose.h"
#include "hangtrace/output_file.h"
#include "hangtrace/procfs.h"
#include "subcommands.h"

namespace hangtrace::cli {

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

}  // namespace hangtrace::cli
