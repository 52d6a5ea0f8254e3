// hangtrace doctor [--pid PID]: the pre-flight checklist (docs/doctor.md). The
// checks are pure (userspace/core/doctor/); this file adds what needs root
// and libbpf -- which live hooks load, the libbpf version -- as plain data.
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "hangtrace/doctor.h"
#include "live_tracer.h"
#include "subcommands.h"

extern char** environ;

namespace hangtrace::cli {
namespace {

struct DoctorOptions {
  int pid = 0;
  std::string json_path;
  int prefetch_factor = 0;
  uint64_t batch_bytes = 0;
  std::string proc_root = "/proc", sys_root = "/sys", dev_shm;
  bool no_hooks = false;
};

doctor::HookProbe probe_hooks(bool skip) {
  doctor::HookProbe h;
  if (skip) {
    h.not_attempted_why = "--no-hooks: the live tracer was not started";
    return h;
  }
  if (geteuid() != 0) {
    h.not_attempted_why = "not root: loading the BPF programs needs root (run hangtrace doctor with sudo)";
    return h;
  }
  h.attempted = true;
  LiveOptions lo;
  auto tracer = LiveTracer::start(lo);
  if (!tracer) {
    h.error = tracer.error();
    return h;
  }
  for (const auto& s : (*tracer)->hooks()) {
    if (s.active) {
      h.active++;
    } else if (hook_on_standby(s)) {
      h.standby++;
    } else {
      h.off++;
      h.off_hooks.push_back(fmt::format("{} {}: {}", s.concern, s.attach, s.reason));
    }
  }
  return h;
}

std::string own_environment() {
  std::string env;
  for (char** e = environ; e && *e; ++e) {
    env += *e;
    env += '\0';
  }
  return env;
}

int run_doctor_command(const DoctorOptions& opt) {
  doctor::DoctorInputs in;
  in.pid = opt.pid;
  in.proc_root = opt.proc_root;
  in.sys_root = opt.sys_root;
  in.dev_shm = opt.dev_shm;
  if (opt.prefetch_factor > 0) in.prefetch_factor = opt.prefetch_factor;
  if (opt.batch_bytes > 0) in.batch_bytes = opt.batch_bytes;
  in.self_environ = own_environment();
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  in.online_cpus = cpus > 0 ? static_cast<unsigned>(cpus) : 1;
  in.hangtrace_version = HANGTRACE_VERSION;
  in.libbpf_version = fmt::format("{}.{}", libbpf_major_version(), libbpf_minor_version());
  // A bad pid is an error before anything is loaded.
  if (opt.pid != 0)
    if (auto ok = doctor::validate_target(opt.proc_root, opt.pid); !ok) return fail(ok.error());
  in.hooks = probe_hooks(opt.no_hooks);
  auto report = doctor::run_doctor(in);
  if (!report) return fail(report.error());
  std::string error;
  if (!write_json_and_text(
          opt.json_path,
          [&] {
            return doctor::report_to_json(*report).dump(2, ' ', false,
                                                        nlohmann::json::error_handler_t::replace) +
                   "\n";
          },
          [&] { return doctor::render_text(*report); }, &error))
    return fail(error);
  return report->any_fail() ? 2 : 0;
}

}  // namespace

Subcommand add_doctor_subcommand(CLI::App& parent) {
  auto opt = std::make_shared<DoctorOptions>();
  Subcommand s;
  s.app = parent.add_subcommand(
      "doctor",
      "pre-flight checklist: /dev/shm against the DataLoader's needs, sharing strategy, ulimits, "
      "NCCL/torch.distributed variables, BTF and hooks, versions (exit 2 when a check fails)");
  s.app->add_option("-p,--pid", opt->pid, "PID of the training job's main process (else: this host)");
  s.app->add_option("--json", opt->json_path, "write the checks as JSON to FILE ('-' = stdout, no table)");
  s.app
      ->add_option("--prefetch-factor", opt->prefetch_factor, "the DataLoader's prefetch_factor (default: 2)")
      ->check(CLI::Range(1, 1 << 20));
  s.app
      ->add_option("--batch-bytes", opt->batch_bytes,
                   "bytes of one batch in /dev/shm (default: the largest torch segment mapped now)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 50));
  s.app->add_flag("--no-hooks", opt->no_hooks, "don't start the live tracer to see which hooks load");
  s.app->add_option("--proc-root", opt->proc_root, "read /proc from DIR (tests)")->group("");
  s.app->add_option("--sys-root", opt->sys_root, "read /sys from DIR (tests)")->group("");
  s.app->add_option("--dev-shm", opt->dev_shm, "measure this directory as /dev/shm (tests)")->group("");
  s.run = [opt] { return run_doctor_command(*opt); };
  return s;
}

}  // namespace hangtrace::cli
