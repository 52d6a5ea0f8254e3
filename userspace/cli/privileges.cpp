#include "privileges.h"

#include <fmt/format.h>
#include <linux/capability.h>
#include <unistd.h>

#include <cstdio>
#include <iterator>

#include "task_iter.h"

namespace hangtrace::cli {

namespace {

// `alt` also does (-1: none): CAP_SYS_ADMIN passes the kernel's
// bpf_capable() and perfmon_capable(), CAP_DAC_OVERRIDE the DAC checks.
struct NeededCapability {
  int cap;
  int alt;
  const char* name;
  const char* why;
};
constexpr NeededCapability kNeeded[] = {
    {CAP_BPF, CAP_SYS_ADMIN, "CAP_BPF", "BPF maps and programs"},
    {CAP_PERFMON, CAP_SYS_ADMIN, "CAP_PERFMON", "tracing programs"},
    {CAP_SYS_PTRACE, -1, "CAP_SYS_PTRACE", "Python stacks, syscalls, /proc/PID/root"},
    {CAP_DAC_READ_SEARCH, CAP_DAC_OVERRIDE, "CAP_DAC_READ_SEARCH", "other users' /proc/PID/fd and maps"},
};

}  // namespace

std::string missing_capabilities() {
  std::string missing;
  for (const auto& n : kNeeded)
    if (!has_capability(n.cap) && !(n.alt >= 0 && has_capability(n.alt)))
      missing += fmt::format("{}{} ({})", missing.empty() ? "" : ", ", n.name, n.why);
  return missing;
}

std::string privilege_failure(const std::string& what, bool strict) {
  const std::string missing = missing_capabilities();
  if (missing.empty()) return "";
  size_t lacking = 0;
  for (const auto& n : kNeeded) lacking += !has_capability(n.cap) && !(n.alt >= 0 && has_capability(n.alt));
  if (strict || lacking == std::size(kNeeded))
    return fmt::format(
        "failed to {}: {}missing {}: run it with sudo, or grant these capabilities (docs/deploy.md)", what,
        geteuid() != 0 ? "not root and " : "", missing);
  static bool warned = false;  // once, not once per job
  if (!warned)
    std::fprintf(stderr, "hangtrace: warning: missing %s: the report lacks what they give (docs/deploy.md)\n",
                 missing.c_str());
  warned = true;
  return "";
}

}  // namespace hangtrace::cli
