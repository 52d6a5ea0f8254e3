#include "hangtrace/job_identity.h"

#include <fmt/format.h>

#include <cctype>
#include <cstdint>
#include <optional>
#include <sstream>

namespace hangtrace {

namespace {

constexpr size_t kMaxPlainId = 64;

bool plain_id(std::string_view s) {
  if (s.empty() || s.size() > kMaxPlainId) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) return false;
  return true;
}

// FNV-1a, 64 bits: stable across hosts and builds (std::hash is neither).
uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace

void for_each_environ(std::string_view environ_bytes,
                      const std::function<void(std::string_view key, std::string_view value)>& visit) {
  while (!environ_bytes.empty()) {
    const auto end = environ_bytes.find('\0');
    const std::string_view entry = environ_bytes.substr(0, end);
    environ_bytes = end == std::string_view::npos ? std::string_view() : environ_bytes.substr(end + 1);
    const auto eq = entry.find('=');
    if (eq != std::string_view::npos) visit(entry.substr(0, eq), entry.substr(eq + 1));
  }
}

std::optional<std::string_view> environ_value(std::string_view environ_bytes, std::string_view key) {
  // With duplicate entries getenv() returns the first: the one the process saw.
  std::optional<std::string_view> out;
  for_each_environ(environ_bytes, [&](std::string_view k, std::string_view v) {
    if (!out && k == key) out = v;
  });
  return out;
}

JobIdentity job_identity(std::string_view environ_bytes, const std::string& cmdline) {
  JobIdentity out;
  const auto run_id = environ_value(environ_bytes, "TORCHELASTIC_RUN_ID");
  if (run_id && !run_id->empty() && *run_id != "none") {
    out.source = "torchelastic";
    out.id = plain_id(*run_id) ? std::string(*run_id) : fmt::format("run-{:016x}", fnv1a(*run_id));
    return out;
  }
  // A batch system's job (and step: one srun of many in an allocation),
  // the same on every node of it.
  const auto slurm_job = environ_value(environ_bytes, "SLURM_JOB_ID");
  if (slurm_job && !slurm_job->empty() && plain_id(*slurm_job)) {
    const auto step = environ_value(environ_bytes, "SLURM_STEP_ID");
    out.source = "slurm";
    out.id = step && !step->empty() && plain_id(*step) ? fmt::format("slurm-{}.{}", *slurm_job, *step)
                                                       : fmt::format("slurm-{}", *slurm_job);
    return out;
  }
  // Open MPI and other PMIx launchers: the job's namespace.
  const auto pmix = environ_value(environ_bytes, "PMIX_NAMESPACE");
  if (pmix && !pmix->empty()) {
    out.source = "pmix";
    out.id = plain_id(*pmix) ? fmt::format("pmix-{}", *pmix) : fmt::format("pmix-{:016x}", fnv1a(*pmix));
    return out;
  }
  const auto addr = environ_value(environ_bytes, "MASTER_ADDR");
  const auto port = environ_value(environ_bytes, "MASTER_PORT");
  if (!addr || !port || addr->empty() || port->empty()) return out;
  const auto world = environ_value(environ_bytes, "WORLD_SIZE");
  out.source = "rendezvous";
  out.id = fmt::format("rdzv-{:016x}", fnv1a(fmt::format("{}:{}\n{}\n{}", *addr, *port, world.value_or(""),
                                                         job_cmdline(cmdline))));
  return out;
}

std::string job_cmdline(const std::string& cmdline) {
  std::istringstream in(cmdline);
  std::string word, out;
  bool skip_next = false;
  while (in >> word) {
    if (skip_next) {
      skip_next = false;
      continue;
    }
    if (word.rfind("--local_rank=", 0) == 0 || word.rfind("--local-rank=", 0) == 0) continue;
    if (word == "--local_rank" || word == "--local-rank") {
      skip_next = true;
      continue;
    }
    if (!out.empty()) out += ' ';
    out += word;
  }
  return out;
}

}  // namespace hangtrace
