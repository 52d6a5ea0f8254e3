// The CLI's subcommands besides the default one (diagnose a pid): each file
// userspace/cli/<name>_cmd.cpp registers its own options on the parent app
// and returns how to run it once parsed.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace hangtrace::cli {

struct Subcommand {
  CLI::App* app = nullptr;
  std::function<int()> run;  // exit status: 0 ok, 1 error, 2 hang / critical
};

// hangtrace doctor [--pid PID]: the pre-flight checklist (doctor_cmd.cpp).
Subcommand add_doctor_subcommand(CLI::App& parent);
// hangtrace merge BUNDLE...: one job's ranks, from their bundles (merge_cmd.cpp).
Subcommand add_merge_subcommand(CLI::App& parent);
// hangtrace daemon: always-on fleet mode (daemon_cmd.cpp).
Subcommand add_daemon_subcommand(CLI::App& parent);

// One line on stderr ("hangtrace: MESSAGE"), and the error exit status.
int fail(const std::string& message);

// Writes `content` to `path` atomically (a reader sees the old file or the
// whole new one, never half of it); "-" is stdout. On failure `error` says
// "failed to write PATH: why".
bool write_output(const std::string& path, const std::string& content, std::string* error);

}  // namespace hangtrace::cli
