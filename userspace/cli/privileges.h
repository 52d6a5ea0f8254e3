// What hangtrace needs to read and trace other users' processes, judged by
// capabilities rather than uid 0: root whose capabilities were cut (a
// systemd unit, a container) lacks what it lacks, and a non-root uid given
// exactly these (ambient capabilities, docs/deploy.md "Capabilities") runs.
#pragma once

#include <string>

namespace hangtrace::cli {

// Empty, or the needed capabilities this process lacks, each with what it
// is for: "CAP_BPF (BPF maps and programs), CAP_SYS_PTRACE (...)".
std::string missing_capabilities();

// "" when nothing is missing, else the one line a command that cannot run
// without them prints: "failed to <what>: missing ...: run it with sudo, or
// grant these capabilities (docs/deploy.md)".
std::string privilege_failure(const std::string& what);

}  // namespace hangtrace::cli
