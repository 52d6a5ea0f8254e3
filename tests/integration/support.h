// Helpers for integration tests: start a real process, wait for the marker
// line it prints when it is in place (no sleeps to guess readiness), run
// hangtrace, and skip with a reason where root or BTF are missing.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "temp_dir.h"  // TempDir

namespace hangtrace::testing {

// "" when root + BTF are present, else the reason to skip.
std::string missing_privileges();

#define HANGTRACE_REQUIRE_BPF()                                   \
  do {                                                            \
    std::string why = ::hangtrace::testing::missing_privileges(); \
    if (!why.empty()) GTEST_SKIP() << why;                        \
  } while (0)

// A child process whose stdout is a pipe we read lines from. Killed (its
// whole process group) on destruction.
class Workload {
 public:
  // With `gated_stdin`, the child's stdin is a pipe: workloads that must not
  // start before a tracer is attached wait for the line release() writes.
  explicit Workload(std::vector<std::string> argv, bool gated_stdin = false);
  ~Workload();
  Workload(const Workload&) = delete;
  Workload& operator=(const Workload&) = delete;

  int pid() const { return pid_; }
  // Reads stdout lines until one starts with `prefix`; returns that line
  // (without the newline), or "" on EOF/timeout.
  std::string wait_for_line(const std::string& prefix,
                            std::chrono::milliseconds timeout = std::chrono::seconds(60));
  void kill_all();
  // Writes "go\n" to a gated workload's stdin.
  void release();
  // Reads stdout to EOF, then reaps the child: its wait status, or -1 if its
  // stdout did not close within `timeout`.
  int wait_exit(std::chrono::milliseconds timeout = std::chrono::seconds(30));

 private:
  int pid_ = -1;
  int stdin_fd_ = -1;
  int stdout_fd_ = -1;
  std::string buffer_;
};

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs argv to completion (with a timeout), capturing stdout and stderr.
CommandResult run_command(const std::vector<std::string>& argv,
                          std::chrono::seconds timeout = std::chrono::seconds(60));

// GET `url` (python3's urllib: a client that is not ours), with extra
// request headers ("Name: value"): the status (0 when nothing answered)
// and the body as bytes.
struct HttpAnswer {
  int status = 0;
  std::string body;
};
HttpAnswer http_get(const std::string& url, const std::vector<std::string>& headers = {});

// What the daemon's lines say: "http://HOST:PORT" it serves on (its ready
// line; "" when it serves nothing), the bundle a "bundle written: PATH (...)"
// line names.
std::string daemon_served_base(const std::string& ready_line);
std::string daemon_bundle_path(const std::string& written_line);

std::string repro_path(const std::string& name);  // HANGTRACE_REPRO_DIR/name
// The reproducer `name` as a link of this test's own, DIR/name, to start it
// by: its command line then names DIR, and a daemon of this test given
// `--match DIR/name` never picks up the same reproducer that a test running
// beside it started (ctest -j). Throws when the link cannot be made.
std::string own_repro(const TempDir& dir, const std::string& name);
std::string hangtrace_path();  // HANGTRACE_BIN

// "READY 12 34 56" -> {12, 34, 56}: the integers after the first word.
std::vector<int> parse_ready_pids(const std::string& line);

// The KEY=VALUE words of a marker line, values as written:
// "READY parent=12 name=/x" -> {"parent": "12", "name": "/x"}.
std::map<std::string, std::string> line_fields(const std::string& line);
// KEY's value as an int (decimal, or hex after 0x); -1 when absent.
int field_int(const std::map<std::string, std::string>& fields, const std::string& key);
inline int field(const std::string& line, const std::string& key) {
  return field_int(line_fields(line), key);
}
// Every value as a number of type T (decimal, or hex after 0x):
// "READY a=1 b=0x10" -> {a: 1, b: 16}.
template <class T>
std::map<std::string, T> numeric_fields(const std::string& line) {
  std::map<std::string, T> out;
  for (const auto& [key, value] : line_fields(line))
    out[key] = static_cast<T>(std::stoull(value, nullptr, 0));
  return out;
}

// One thread as /proc shows it right now.
struct ThreadState {
  int tid = 0;
  char state = '?';      // /proc/PID/task/TID/stat field 3
  long syscall_nr = -2;  // /proc/PID/task/TID/syscall: nr, -1 not in one, -2 "running"/unreadable
  std::string wchan;
};
std::vector<ThreadState> thread_states(int pid);
std::string describe_threads(int pid);  // one line per thread, for failure messages

// Polls /proc (every 10 ms, no guessing sleeps) until every thread of `pid`
// sleeps (state S or D) inside a syscall -- one of `syscalls` when that is
// not empty -- and stays so on two reads in a row. Returns "" when it does,
// else (after `timeout`) what it last saw.
std::string wait_until_blocked(int pid, std::chrono::milliseconds timeout = std::chrono::seconds(20),
                               std::vector<long> syscalls = {});

// `hangtrace --pid PID --json - EXTRA...`, with stdout parsed when it is JSON.
struct HangtraceRun {
  CommandResult cmd;
  nlohmann::json report;  // null when stdout was not JSON
  std::string parse_error;
  // The findings of the given kind.
  std::vector<nlohmann::json> findings(const std::string& kind) const;
  // For failure messages: exit code, stderr and the pretty-printed report.
  std::string dump() const;
};
HangtraceRun run_hangtrace(int pid, const std::vector<std::string>& extra = {},
                           std::chrono::seconds timeout = std::chrono::seconds(120));

// A finding's "pids" array as ints.
std::vector<int> finding_pids(const nlohmann::json& finding);

// The first finding of `kind` in a report, nullptr when none.
const nlohmann::json* find_finding(const nlohmann::json& report, const std::string& kind);

// A whole file as text ("" when it cannot be read).
std::string read_text_file(const std::string& path);

}  // namespace hangtrace::testing
