// hangtrace [options] -- COMMAND: the job started held, the tracer attached,
// then released, so it is traced from its first instruction (with
// hangtrace's CUPTI injection library unless it names its own); the report
// when it ends, hangs (--hang-after) or hangtrace is interrupted.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "diagnose.h"
#include "hangtrace/gpu.h"
#include "hangtrace/procfs.h"
#include "live_cupti.h"
#include "live_session.h"
#include "privileges.h"
#include "subcommands.h"

namespace hangtrace::cli {

namespace {

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

}  // namespace

int run_launch(const Options& opt) {
  if (std::string failure = privilege_failure("trace a job", false); !failure.empty()) return fail(failure);
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

}  // namespace hangtrace::cli
