// Which distributed job a rank belongs to, named the same on every host:
// what lets one host's bundle and metrics be matched with another's.
//
//   - torchrun (torch.distributed.elastic) gives every rank of one run
//     TORCHELASTIC_RUN_ID (its --rdzv-id; "none", its default, names nothing);
//   - otherwise the rendezvous every rank connects to, MASTER_ADDR and
//     MASTER_PORT, with WORLD_SIZE and the command line (less the per-rank
//     --local_rank of the legacy launcher), names it.
// The id is printable and bounded, fit for a metric label and a file name: a
// run id of 1-64 characters from [A-Za-z0-9._-] as it is, anything else (and
// the rendezvous, so that no address leaves the host in it) as a hash.
//
// Pure functions over the bytes of /proc/PID/environ, tested from fixtures.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace hangtrace {

struct JobIdentity {
  std::string id;      // "" when the environment names no job
  std::string source;  // "torchelastic", "rendezvous", or "" with no id
};

JobIdentity job_identity(std::string_view environ_bytes, const std::string& cmdline);

// Each KEY=VALUE entry of the raw bytes of /proc/PID/environ
// ("KEY=VALUE\0..."), in order; entries without '=' are skipped.
void for_each_environ(std::string_view environ_bytes,
                      const std::function<void(std::string_view key, std::string_view value)>& visit);

// The value of `key` there: the first entry, as getenv() in the process finds it.
std::optional<std::string_view> environ_value(std::string_view environ_bytes, std::string_view key);

// The command line that names a job: the same on every rank, except what the
// legacy launcher (torch.distributed.launch) passes per rank (--local_rank N,
// --local-rank=N).
std::string job_cmdline(const std::string& cmdline);

}  // namespace hangtrace
