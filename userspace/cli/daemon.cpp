// The daemon's start, its loop and the records it reads. Its concerns:
// daemon_jobs.cpp (which processes are jobs), daemon_watchdog.cpp (progress,
// incidents, bundles), daemon_sampling.cpp (the sampled steady state),
// daemon_metrics.cpp (/metrics).
#include "daemon.h"

#include <signal.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "hangtrace/abi.h"
#include "hangtrace/bundle.h"
#include "hangtrace/text.h"
#include "task_iter.h"

namespace hangtrace::cli {

namespace {

// Records that would flood the recorder without telling a postmortem more
// (CUPTI activity: one per kernel), and ones the steady state never streams
// (short waits: an on-demand profile's, daemon_profile.cpp).
bool worth_recording(uint32_t type) {
  return type != HT_EV_GPU_ACTIVITY && type != HT_EV_FUTEX_WAKE && type != HT_EV_WAKEUP &&
         type != HT_EV_SHORT_WAITS;
}

std::string trim_comm(const char* comm, size_t n) { return std::string(comm, strnlen(comm, n)); }

}  // namespace

uint64_t Daemon::now_ns() const {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

double Daemon::mono_to_unix_offset_s() const {
  timespec real{}, mono{};
  clock_gettime(CLOCK_REALTIME, &real);
  clock_gettime(CLOCK_MONOTONIC, &mono);
  return (static_cast<double>(real.tv_sec) + real.tv_nsec / 1e9) -
         (static_cast<double>(mono.tv_sec) + mono.tv_nsec / 1e9);
}

bool Daemon::runs_file(const daemon::ProcessEntry& p, const procfs::FileId& file) {
  if (exe_seen_.size() > 2 * job_of_.size() + 4096)  // the gone ones, now and then
    std::erase_if(exe_seen_, [&](const auto& kv) { return !proc_.stat(kv.first); });
  // A new image (exec) is a new command line; a reused pid a new start time.
  auto it = exe_seen_.find(p.pid);
  if (it == exe_seen_.end() || it->second.start_ticks != p.start_ticks ||
      it->second.cmdline_digest != p.cmdline_digest) {
    auto exe = proc_.exe_file(p.pid);
    it = exe_seen_.insert_or_assign(p.pid, ExeSeen{p.start_ticks, p.cmdline_digest, std::nullopt}).first;
    if (exe) it->second.exe = *exe;
  }
  return it->second.exe == file;
}

void Daemon::log(int level, const std::string& line) const {
  // Lines carry a job's comm, command line and file names, raw from the
  // target: escaped, a line cannot move the cursor or forge another line.
  if (options_.verbosity >= level)
    std::fprintf(stderr, "hangtrace daemon: %s\n", terminal_escape(line).c_str());
}

Result<std::unique_ptr<Daemon>> Daemon::start(const DaemonOptions& options) {
  std::unique_ptr<Daemon> d(new Daemon(options));
  auto matcher = daemon::JobMatcher::make(options.selectors);
  if (!matcher) return make_error(matcher.error());
  d->matcher_ = std::make_unique<daemon::JobMatcher>(std::move(*matcher));
  d->scanner_ = std::make_unique<daemon::ProcessScanner>(d->proc_.root(), *d->matcher_);
  struct utsname u {};
  if (uname(&u) == 0) {
    d->kernel_release_ = u.release;
    d->hostname_ = u.nodename;
  }

  std::error_code ec;
  std::filesystem::create_directories(options.bundle_dir, ec);
  if (ec) return make_error(fmt::format("failed to create {}: {}", options.bundle_dir, ec.message()));
  if (access(options.bundle_dir.c_str(), W_OK) != 0)
    return make_error(fmt::format("failed to use {}: {}", options.bundle_dir, std::strerror(errno)));

  d->metrics_ = DaemonMetrics::make(d->kernel_release_);
  if (!options.metrics_address.empty()) {
    HttpOptions http;
    http.address = options.metrics_address;
    http.hostname = d->hostname_;
    if (options.serve_bundles) {
      http.bundle_dir = options.bundle_dir;
      http.token_file = options.bundle_token_file;
    }
    auto served = DaemonHttp::start(http, d->metrics_->registry());
    if (!served) return make_error(served.error());
    d->http_ = std::move(*served);
  }

  LiveOptions lo;
  // Steady state: nothing is streamed per wait or per wake. Waits longer
  // than this, deaths, signals, OOM kills, /dev/shm trouble, TCP trouble and
  // RSS steps are: they are what the flight recorder keeps.
  lo.min_block_ns = static_cast<uint64_t>(options.record_waits_after_ms * 1e6);
  lo.stream_wakes = false;
  lo.blocked_histograms = true;
  lo.shm_trouble_only = true;
  // Sampled: nothing runs on the hot paths until a job looks stuck.
  lo.hot_hooks = !options.sampled();
  lo.ringbuf_bytes = static_cast<uint64_t>(options.ringbuf_mb) << 20;
  lo.verbosity = options.verbosity > 2 ? options.verbosity - 2 : 0;
  // GPU libraries (libcuda, libnccl) get uprobes when a job maps them.
  lo.module_rescan = ModuleRescan::UntilCuda;
  // The on-CPU sampler loads, and runs only in an on-demand profile.
  lo.sample_hz = options.profile_sample_hz;
  lo.sample_on_demand = true;
  auto tracer = LiveTracer::start(lo);
  if (!tracer) return make_error(tracer.error());
  d->tracer_ = std::move(*tracer);
  d->nvml_ = NvmlSampler::open();
  if (options.sampled())
    d->sampler_ =
        std::make_unique<WaitSampler>(static_cast<uint64_t>(options.sample_every_s * 1e9), sampled_fd_info);
  // The snapshot of each bundle reuses one verified task iterator.
  keep_task_iterator_loaded(true);
  // So does the scan for jobs: every process's stat fields in one pass.
  if (d->proc_.root() == "/proc") {
    if (std::string why = identity_pass_mismatch(d->proc_); why.empty())
      d->scanner_->set_identity_source(sample_process_identities);
    else
      d->log(1,
             fmt::format("the scan for jobs reads every /proc/PID/stat: the task iterator's pass {}", why));
  }
  return d;
}

// ---- records -----------------------------------------------------------------------

void Daemon::on_record(const void* data, size_t size) {
  if (size < sizeof(ht_event_header)) return;
  ht_event_header h;
  std::memcpy(&h, data, sizeof h);
  const int tgid = static_cast<int>(h.tgid);
  auto owner = job_of_.find(tgid);
  if (h.type == HT_EV_PROC_FORK && size >= sizeof(ht_proc_event)) {
    ht_proc_event e;
    std::memcpy(&e, data, sizeof e);
    // The kernel traces the child already; the daemon learns its job.
    if (owner != job_of_.end()) add_process(jobs_.at(owner->second), static_cast<int>(e.child_tgid), true);
  }
  if (owner == job_of_.end()) return;
  Job& job = jobs_.at(owner->second);
  if (worth_recording(h.type)) job.recorder->add(h.ts_ns, data, size);
  if (profile_) profile_record(data, size);

  auto incident = [&](const std::string& trigger, int pid, const std::string& comm) {
    if (!job.incident_seen.insert({pid, trigger}).second) return;
    // Let the death's other records (signal, exit) arrive first.
    job.incidents.push_back({trigger, pid, comm, h.ts_ns, now_ns() + 300'000'000ull});
  };
  switch (h.type) {
    case HT_EV_OOM_VICTIM:
      metrics_->process_death("oom-kill");
      incident("oom-kill", tgid, trim_comm(h.comm, sizeof h.comm));
      break;
    case HT_EV_SIGNAL:
      if (size >= sizeof(ht_signal_event)) {
        ht_signal_event e;
        std::memcpy(&e, data, sizeof e);
        if (e.sig == SIGBUS) incident("sigbus", tgid, trim_comm(h.comm, sizeof h.comm));
      }
      break;
    case HT_EV_PROC_EXIT:
      if (size >= sizeof(ht_proc_event)) {
        ht_proc_event e;
        std::memcpy(&e, data, sizeof e);
        if (!(e.flags & HT_PROC_WHOLE_PROCESS)) break;  // a thread, not the whole process
        int status = static_cast<int>(e.exit_code);
        bool oom = job.incident_seen.count({tgid, "oom-kill"}) > 0;
        if (auto how = daemon::exit_incident(status); how && !oom) {
          metrics_->process_death((status & 0x7f) ? "signal" : "exit-nonzero");
          incident(*how, tgid, trim_comm(h.comm, sizeof h.comm));
        } else if ((status & 0x7f) && !oom) {
          metrics_->process_death("signal");
        }
        drop_process(tgid);
      }
      break;
    default:
      break;
  }
}

int Daemon::run(const std::atomic<bool>& stop, std::atomic<bool>* profile) {
  if (nvml_->usable()) nvml_->start();
  std::string address = http_ ? http_->bound_address() : "";
  std::string served = address.empty() ? "off" : "on http://" + address + "/metrics";
  if (!address.empty() && options_.serve_bundles) served += ", bundles on http://" + address + "/bundles";
  std::fprintf(
      stderr,
      "hangtrace daemon: ready: bundles in %s, metrics %s, hang after %.0f s, %s steady state, SIGUSR1 to "
      "profile for %.0f s\n",
      options_.bundle_dir.c_str(), served.c_str(), options_.hang_after_s, options_.steady_state.c_str(),
      options_.profile_seconds);
  // Bundles a writer that died left half-written, and the retention limit.
  prune_bundles(options_.bundle_dir, options_.keep_bundles);
  auto sink = [this](const void* data, size_t size) { on_record(data, size); };
  const uint64_t scan_every = static_cast<uint64_t>(options_.scan_every_s * 1e9);
  while (!stop.load()) {
    tracer_->poll(200, sink);
    uint64_t now = now_ns();
    if (now - last_scan_ns_ >= scan_every) {
      scan();
      last_scan_ns_ = now_ns();
    }
    if (sampler_ && now_ns() - last_sample_ns_ >= static_cast<uint64_t>(options_.sample_every_s * 1e9)) {
      last_sample_ns_ = now_ns();
      sample_waits(last_sample_ns_);
    }
    if (profile && profile->exchange(false)) start_profile(now_ns());
    continue_profile(now_ns());
    check_jobs(now_ns());
    if (now - last_metrics_ns_ >= 1'000'000'000ull) update_metrics(now);
  }
  nvml_->stop();
  log(0, fmt::format("stopping; {} job(s) were tracked", jobs_.size()));
  return 0;
}

}  // namespace hangtrace::cli
