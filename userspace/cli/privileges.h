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

// The one line a command prints when it cannot run for want of them ("":
// it can): "failed to <what>: [not root and ]missing ...: run it with sudo,
// or grant these capabilities (docs/deploy.md)". `strict` (the daemon, which
// must not run half-blind for months): any one missing. Else (a one-off
// diagnosis, which degrades: docs/deploy.md's table): only when all are,
// and a warning naming the missing ones otherwise.
std::string privilege_failure(const std::string& what, bool strict);

}  // namespace hangtrace::cli
