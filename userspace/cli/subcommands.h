// The CLI's subcommands besides the default one (diagnose a pid): each file
// userspace/cli/<name>_cmd.cpp registers its own options on the parent app
// and returns how to run it once parsed.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

namespace hangtrace {
struct HookStatus;  // live_tracer.h
}

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

// A command's result: its JSON to `json_path` when one is given ("-":
// stdout), its text to stdout unless the JSON went there. Each is rendered
// only when written. On failure `error` says "failed to write PATH: why".
bool write_json_and_text(const std::string& json_path, const std::function<std::string()>& json,
                         const std::function<std::string()>& text, std::string* error);

// An inactive hook that is on standby rather than missing: the loser of a
// twin pair (tp_btf vs raw_tp), or a concern waiting for a library to probe (gpu).
bool hook_on_standby(const HookStatus& h);

}  // namespace hangtrace::cli
