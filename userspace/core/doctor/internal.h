// What the parts of hangtrace doctor share (userspace/core/doctor/): what
// /proc shows of the target, and each check as a function of it. Internal to
// hangtrace_core; the public API is include/hangtrace/doctor.h.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hangtrace/doctor.h"

namespace hangtrace::doctor::detail {

constexpr uint64_t kMiB = uint64_t{1} << 20;

inline bool contains(std::string_view s, std::string_view p) { return s.find(p) != std::string_view::npos; }

// ---- small parsers (parsers.cpp) ---------------------------------------------
// A whole decimal number, nothing else.
std::optional<uint64_t> parse_u64(std::string_view s);
// Without leading and trailing spaces, tabs and newlines.
// Doctor trims spaces, tabs and newlines only (a '\r' is part of a value).
inline std::string trim_line(std::string_view s) { return std::string(trim(s, " \t\n")); }
// The CapEff mask of a /proc/PID/status.
std::optional<uint64_t> cap_eff(std::string_view status);

// A check with its verdict; `details` an object (null becomes {}).
Check make(std::string id, Verdict v, std::string finding, std::string fix = "",
           nlohmann::json details = nlohmann::json::object());

// ---- the target (target.cpp) ---------------------------------------------------
// A child of the target and what it is.
enum class ChildKind { Forked, Spawned, ForkServer, ShmManager, Tracker, Other };

struct Child {
  int pid = 0;
  ChildKind kind = ChildKind::Other;
  std::string comm, cmdline;
};

struct Segment {
  uint64_t inode = 0;
  uint64_t bytes = 0;
  bool deleted = false;
  std::string name;
  std::set<int> pids;
};

// What /proc shows of the target, read once.
struct Target {
  int pid = 0;
  std::string comm, cmdline, exe, environ;
  int threads = 0;
  std::string limits;
  std::vector<Child> children;
  std::vector<int> workers;               // worker-like children (and a forkserver's children)
  std::string start_method;               // "fork", "spawn", "forkserver", "" (no workers)
  bool shm_manager = false;               // torch_shm_manager: the file_system strategy
  std::map<uint64_t, Segment> segments;   // /dev/shm/torch_* by inode
  size_t torch_fds = 0;                   // fds on /dev/shm/torch_* (file_descriptor strategy)
  std::map<int, size_t> open_fds;         // per process of the job
  std::vector<std::string> mapped_paths;  // the target's mapped files
};

// The target's /proc, read once; errors as run_doctor's.
Result<Target> read_target(const DoctorInputs& in);

// ---- the checks, in run_doctor's order -------------------------------------------
// /dev/shm, the sharing strategy, open files, the start method (loader_checks.cpp).
Check check_dev_shm(const DoctorInputs& in, const Target* t);
Check check_sharing_strategy(const Target* t);
Check check_nofile(const Target* t, const std::string& self_limits);
Check check_start_method(const Target* t);
// NCCL/torch.distributed, CUDA_LAUNCH_BLOCKING and OMP_NUM_THREADS (environment_checks.cpp).
void check_environment(const DoctorInputs& in, const Target* t,
                       const std::optional<std::string>& torch_version, std::vector<Check>& out);
// Memlock, kernel, BTF, privileges, hooks, versions (system_checks.cpp).
Check check_memlock(const std::string& self_limits, std::optional<std::pair<int, int>> kernel);
Check check_kernel(const std::string& release);
Check check_btf(const DoctorInputs& in);
Check check_privileges(const std::string& self_status);
Check check_hooks(const HookProbe& h);
// The torch and python versions of the target (or, without one, torch's
// default install), and in `*where` where they were found.
std::optional<std::string> torch_version_of(const DoctorInputs& in, const Target* t, std::string* where);
std::optional<std::string> python_version_of(const Target* t, std::string* where);

}  // namespace hangtrace::doctor::detail
