// Helpers for integration tests: start a real process, wait for the marker
// line it prints when it is in place (no sleeps to guess readiness), run
// hangtrace, and skip with a reason where root or BTF are missing.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

namespace hangtrace::testing {

// "" when root + BTF are present, else the reason to skip.
std::string missing_privileges();

#define HANGTRACE_REQUIRE_BPF()                                       \
  do {                                                                \
    std::string why = ::hangtrace::testing::missing_privileges();     \
    if (!why.empty()) GTEST_SKIP() << why;                            \
  } while (0)

// A child process whose stdout is a pipe we read lines from. Killed (its
// whole process group) on destruction.
class Workload {
 public:
  explicit Workload(std::vector<std::string> argv);
  ~Workload();
  Workload(const Workload&) = delete;
  Workload& operator=(const Workload&) = delete;

  int pid() const { return pid_; }
  // Reads stdout lines until one starts with `prefix`; returns that line
  // (without the newline), or "" on EOF/timeout.
  std::string wait_for_line(const std::string& prefix,
                            std::chrono::milliseconds timeout = std::chrono::seconds(60));
  void kill_all();

 private:
  int pid_ = -1;
  int stdout_fd_ = -1;
  std::string buffer_;
};

struct CommandResult {
  int exit_code = -1;
  std::string out;   // stdout
  std::string err;   // stderr
};

// Runs argv to completion (with a timeout), capturing stdout and stderr.
CommandResult run_command(const std::vector<std::string>& argv,
                          std::chrono::seconds timeout = std::chrono::seconds(60));

std::string repro_path(const std::string& name);   // HANGTRACE_REPRO_DIR/name
std::string hangtrace_path();                      // HANGTRACE_BIN

}  // namespace hangtrace::testing
