// hangtrace --pid PID (the snapshot, and the live window of a CUDA job or of
// --duration), --from-snapshot FILE and --list-hooks; and what the live modes
// share: tracer and collector options, Ctrl-C, user stack names.
#include <signal.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "diagnose.h"
#include "hangtrace/jobs.h"
#include "hangtrace/snapshot_json.h"
#include "live_session.h"
#include "privileges.h"
#include "mapped_modules.h"
#include "native_stacks.h"
#include "subcommands.h"
#include "task_iter.h"

namespace hangtrace::cli {

std::atomic<bool> g_interrupted{false};

namespace {

void on_interrupt(int) { g_interrupted = true; }

}  // namespace

void install_interrupt_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

void symbolize_live_user_frames(std::vector<UserFrame>& frames) {
  process_native_stack_cache().symbolize_file_frames(frames);
}

LiveOptions live_options(const Options& opt) {
  LiveOptions lo;
  lo.min_block_ns = static_cast<uint64_t>(opt.min_block_ms * 1e6);
  lo.ringbuf_bytes = static_cast<uint64_t>(opt.ringbuf_mb) << 20;
  lo.sample_hz = static_cast<uint32_t>(std::max(0, opt.sample_hz));
  // The stall profile counts every wait, not only those streamed one by one.
  lo.short_waits = true;
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

namespace {

constexpr double kCudaJobWindowS = 3.0;

// The pids the user named, each said to be what it is in the job.
void name_members(Snapshot& snap, const Options& opt) {
  snap.given_pids = opt.given_pids;
  snap.root_parent = opt.root_parent;
  for (int pid : snap.given_pids)
    if (pid != snap.target_pid)
      std::fprintf(stderr, "hangtrace: pid %d is %s\n", pid, jobs::member_role(snap, pid).c_str());
}

int run_live_window(const Options& opt);

}  // namespace

int run_live(const Options& opt) {
  if (std::string failure = privilege_failure("read other processes' waits", false); !failure.empty())
    return fail(failure);
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

namespace {

int run_live_window(const Options& opt) {
  // Two captures (before and after the window): verify the task iterator once.
  if (opt.duration_s > 0) keep_task_iterator_loaded(true);
  Result<Snapshot> snap = collect_snapshot(opt.pid, collect_options(opt));
  if (!snap) return fail(snap.error());
  name_members(*snap, opt);
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
  if (after) {
    after->given_pids = snap->given_pids;
    after->root_parent = snap->root_parent;
    return report(*after, opt, &live);
  }
  // The target went away during the window: report on the first snapshot.
  snap->limitations.push_back(fmt::format("the target exited during the live window ({})", after.error()));
  return report(*snap, opt, &live);
}

}  // namespace

bool hook_on_standby(const HookStatus& h) {
  return !h.active && (h.reason.rfind("not needed", 0) == 0 || h.reason.rfind("standby", 0) == 0);
}

int list_hooks(const Options& opt) {
  if (std::string failure = privilege_failure("load the BPF programs", false); !failure.empty())
    return fail(failure);
  LiveOptions lo = live_options(opt);
  auto tracer = LiveTracer::start(lo);
  if (!tracer) return fail(tracer.error());
  int active = 0, standby = 0, off = 0;
  for (const auto& h : (*tracer)->hooks()) {
    bool twin = hook_on_standby(h);
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

}  // namespace hangtrace::cli
