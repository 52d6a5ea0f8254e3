// hangtrace doctor: the pre-flight checklist of the field reports, as checks
// with verdicts (docs/doctor.md). Pure logic over an injectable /proc and
// /sys: the CLI passes in what needs libbpf or root (which hooks load, the
// libbpf version) as plain data.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "hangtrace/result.h"
#include "hangtrace/text.h"  // format_bytes

namespace hangtrace::doctor {

enum class Verdict { Ok, Warn, Fail, Skip };
const char* verdict_name(Verdict v);  // "ok", "warn", "fail", "skip"

struct Check {
  std::string id;  // stable: "dev-shm-size", "ulimit-nofile", ...
  Verdict verdict = Verdict::Skip;
  std::string finding;     // one line, with the measured figures
  std::string fix;         // the exact command or setting; "" when nothing to do
  nlohmann::json details;  // the figures, machine-readable (an object)
};

struct DoctorReport {
  int pid = 0;  // 0: the host / doctor's own environment
  std::vector<Check> checks;
  const Check* find(const std::string& id) const;
  bool any_fail() const;
};

// What the CLI learned by starting the live tracer (needs root and libbpf).
struct HookProbe {
  bool attempted = false;
  std::string not_attempted_why;  // "not root: ..." when !attempted
  std::string error;              // the tracer did not start
  int active = 0, standby = 0, off = 0;
  std::vector<std::string> off_hooks;  // "concern attach: reason"
};

struct FsUsage {
  uint64_t size_bytes = 0, free_bytes = 0;  // f_blocks, f_bavail (x f_frsize)
};

struct DoctorInputs {
  int pid = 0;  // 0: no target
  std::string proc_root = "/proc";
  std::string sys_root = "/sys";
  // The /dev/shm to measure; "" = PROC_ROOT/PID/root/dev/shm (the target's
  // mount namespace) with a pid, else "/dev/shm".
  std::string dev_shm;
  // Where torch lives without a pid (torch-version).
  std::string default_torch_version_py = "/usr/lib/python3/dist-packages/torch/version.py";
  std::optional<int> prefetch_factor;   // --prefetch-factor (else torch's default 2)
  std::optional<uint64_t> batch_bytes;  // --batch-bytes (else measured)
  std::string self_environ;             // doctor's own environment, NUL-separated
  unsigned online_cpus = 1;
  std::string hangtrace_version;
  std::string libbpf_version;  // "1.1" ("" unknown)
  HookProbe hooks;
  // statvfs(2); tests replace it.
  std::function<Result<FsUsage>(const std::string& path)> statvfs;
};

// Every check, in a fixed order. Errors only for a bad target: "no such
// process: PID", "pid PID is a kernel thread".
Result<DoctorReport> run_doctor(const DoctorInputs& in);

// The same target errors as run_doctor, without reading the rest (so the CLI
// refuses a bad pid before it loads BPF).
Result<bool> validate_target(const std::string& proc_root, int pid);

// The real statvfs(2).
Result<FsUsage> statvfs_usage(const std::string& path);

// ---- parsers (exposed for the tests) ----------------------------------------
// /proc/PID/limits: soft and hard of one row ("Max open files"); nullopt =
// "unlimited".
struct Limit {
  std::optional<uint64_t> soft, hard;
};
Result<Limit> parse_limit(std::string_view limits_text, std::string_view row);
// "KEY=VALUE\0..." -> the first value of KEY (getenv's answer).
std::optional<std::string> environ_value(std::string_view environ_bytes, std::string_view key);
// "6.1.0-18-amd64" -> {6, 1}.
std::optional<std::pair<int, int>> parse_kernel_release(std::string_view release);
// "__version__ = '1.13.1'" lines -> "1.13.1".
std::optional<std::string> parse_torch_version_py(std::string_view text);

// ---- output -----------------------------------------------------------------
// {"schema": "hangtrace.doctor/1", "pid", "checks": [...], "summary": {...}}
nlohmann::json report_to_json(const DoctorReport& r);
// A table (verdict, id, finding) with "fix:" lines under warn and fail.
std::string render_text(const DoctorReport& r);

}  // namespace hangtrace::doctor
