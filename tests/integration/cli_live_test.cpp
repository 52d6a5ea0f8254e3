// The live modes end to end: launch a job under tracing (-- COMMAND), watch a
// running one (--duration), stop on no progress (--hang-after), Ctrl-C.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

#include "support.h"

namespace hangtrace::testing {
namespace {

nlohmann::json parse(const CommandResult& r) {
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.out << r.err;
  return j;
}

TEST(CliLive, LaunchedJobKilledBySigbusIsReported) {
  HANGTRACE_REQUIRE_BPF();
  auto r = run_command({hangtrace_path(), "--json", "-", "--", "/bin/sh", "-c", "kill -BUS $$"});
  ASSERT_EQ(r.exit_code, 2) << r.err;
  auto j = parse(r);
  EXPECT_EQ(j["verdict"]["status"], "killed");
  const auto* f = find_finding(j, "process-killed");
  ASSERT_NE(f, nullptr) << j.dump(1);
  EXPECT_EQ((*f)["details"]["signal"], 7);
  EXPECT_EQ((*f)["details"]["pid"], j["target_pid"]);
  ASSERT_TRUE(j["live"].is_object());
  EXPECT_GT(j["live"]["events"].get<int>(), 0);
}

TEST(CliLive, CleanExitIsNoFinding) {
  HANGTRACE_REQUIRE_BPF();
  auto r = run_command({hangtrace_path(), "--json", "-", "--", "/bin/true"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = parse(r);
  EXPECT_EQ(j["verdict"]["status"], "ok");
  EXPECT_TRUE(j["findings"].empty());
}

TEST(CliLive, ForkedChildKilledBySiblingNamesTheSender) {
  HANGTRACE_REQUIRE_BPF();
  // The job forks a child that sleeps; the job kills it with SIGTERM and exits 0.
  auto r = run_command({hangtrace_path(), "--json", "-", "--", "/bin/sh", "-c",
                        "sleep 30 & child=$!; kill -TERM $child; wait $child; exit 0"});
  ASSERT_EQ(r.exit_code, 2) << r.err << r.out;
  auto j = parse(r);
  const auto* f = find_finding(j, "process-killed");
  ASSERT_NE(f, nullptr) << j.dump(1);
  EXPECT_EQ((*f)["details"]["signal"], 15);
  EXPECT_EQ((*f)["details"]["cause"], "signal");
  EXPECT_EQ((*f)["details"]["sender_pid"], j["target_pid"]);
  bool followed = false;
  for (const auto& pid : j["live"]["forked"]) followed |= pid == (*f)["details"]["pid"];
  EXPECT_TRUE(followed) << "the child should have been followed through fork";
}

TEST(CliLive, HangAfterReportsTheDeadlockAndLeavesTheJobRunning) {
  HANGTRACE_REQUIRE_BPF();
  // The job keeps running after hangtrace exits, so it must not hold the
  // pipes run_command reads to EOF.
  auto r = run_command({hangtrace_path(), "--json", "-", "--hang-after", "1", "--", "/bin/sh", "-c",
                        "exec " + repro_path("repro_fork_locked_mutex") + " >/dev/null 2>&1"},
                       std::chrono::seconds(60));
  auto j = parse(r);
  // Clean up the job first: hangtrace leaves it running on purpose.
  if (j.is_object() && j.contains("processes"))
    for (const auto& p : j["processes"])
      if (p["role"] != "peer") kill(p["pid"].get<int>(), SIGKILL);
  ASSERT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("no progress for 1 s"), std::string::npos) << r.err;
  EXPECT_EQ(j["verdict"]["status"], "hang");
  EXPECT_NE(find_finding(j, "orphaned-lock"), nullptr) << j.dump(1);
  EXPECT_TRUE(j["live"].is_object());
}

// Forks hangtrace with `args` (after argv[0]), its stderr on `out` -- and its
// stdout too with `stdout_too`, else /dev/null.
pid_t spawn_hangtrace(const std::vector<std::string>& args, int out, bool stdout_too) {
  const std::string path = hangtrace_path();
  std::vector<char*> argv{const_cast<char*>("hangtrace")};
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t child = fork();
  if (child == 0) {
    dup2(out, STDERR_FILENO);
    dup2(stdout_too ? out : open("/dev/null", O_WRONLY), STDOUT_FILENO);
    execv(path.c_str(), argv.data());
    _exit(127);
  }
  return child;
}

// What `fd` gives until `needle` is in it, it ends, or `timeout` passes.
std::string read_until(int fd, const std::string& needle, std::chrono::seconds timeout) {
  std::string text;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (text.find(needle) == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 1000) <= 0) continue;
    char buf[4096];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  return text;
}

TEST(CliLive, DurationOnARunningJobAndCtrlCEndsEarly) {
  HANGTRACE_REQUIRE_BPF();
  Workload job({repro_path("repro_sleeper")});
  ASSERT_FALSE(job.wait_for_line("READY").empty());
  int out[2];
  ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
  pid_t tracer =
      spawn_hangtrace({"--pid", std::to_string(job.pid()), "--duration", "60", "--json", "-"}, out[1], true);
  close(out[1]);
  // Wait for the "tracing ..." line: the window has begun.
  std::string text = read_until(out[0], "hangtrace: tracing", std::chrono::seconds(30));
  ASSERT_NE(text.find("hangtrace: tracing"), std::string::npos) << text;
  auto interrupted_at = std::chrono::steady_clock::now();
  kill(tracer, SIGINT);
  for (;;) {
    char buf[4096];
    ssize_t n = read(out[0], buf, sizeof buf);
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  close(out[0]);
  int status = 0;
  waitpid(tracer, &status, 0);
  auto took = std::chrono::steady_clock::now() - interrupted_at;
  EXPECT_LT(took, std::chrono::seconds(10));
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_NE(WEXITSTATUS(status), 1) << text;
  auto json_start = text.find('{');
  ASSERT_NE(json_start, std::string::npos) << text;
  auto j = nlohmann::json::parse(text.substr(json_start), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << text;
  ASSERT_TRUE(j["live"].is_object());
  EXPECT_LT(j["live"]["duration_s"].get<double>(), 30.0);
  EXPECT_FALSE(j["live"]["hooks"].empty());
}

// The text report dates when progress stopped. Every thread of the stuck set
// (the parent in wait4, the child on its inherited lock) blocked between the
// launch and the moment /proc showed them all asleep, and the report's
// snapshot is taken after a 2 s live window, so "N s ago" is bounded by
// clocks read here, independently of hangtrace.
TEST(CliLive, ProgressStoppedLineDatesTheHang) {
  HANGTRACE_REQUIRE_BPF();
  const auto launched = std::chrono::steady_clock::now();
  Workload job({repro_path("repro_fork_locked_mutex")});
  std::vector<int> pids = parse_ready_pids(job.wait_for_line("READY"));
  ASSERT_EQ(pids.size(), 3u);
  ASSERT_EQ(wait_until_blocked(pids[0]), "") << describe_threads(pids[0]);
  ASSERT_EQ(wait_until_blocked(pids[1]), "") << describe_threads(pids[1]);
  const auto all_blocked = std::chrono::steady_clock::now();
  auto r = run_command({hangtrace_path(), "--pid", std::to_string(pids[0]), "--duration", "2"});
  const auto finished = std::chrono::steady_clock::now();
  ASSERT_EQ(r.exit_code, 2) << r.err << r.out;

  size_t at = r.out.find("\nPROGRESS STOPPED: ");
  ASSERT_NE(at, std::string::npos) << r.out;
  std::string line = r.out.substr(at + 1, r.out.find('\n', at + 1) - at - 1);
  // "PROGRESS STOPPED: 2024-05-01 12:00:00 UTC, 2.3 s ago: main 123 (repro_fork_lock) was the last ..."
  size_t utc = line.find(" UTC, ");
  ASSERT_NE(utc, std::string::npos) << line;
  ASSERT_NE(line.find(" s ago: ", utc), std::string::npos) << line;
  const double ago = std::stod(line.substr(utc + 6));
  auto seconds = [](std::chrono::steady_clock::duration d) {
    return std::chrono::duration<double>(d).count();
  };
  // Blocked after `launched`, at the latest by `all_blocked`; sampled after the
  // 2 s window that began after `all_blocked`, and before `finished`. 0.25 s
  // covers the scheduler clock's tick and the rounding to 0.1 s.
  EXPECT_GE(ago, 2.0 - 0.25) << line;
  EXPECT_LE(ago, seconds(finished - launched) + 0.25) << line;
  EXPECT_LE(seconds(all_blocked - launched), 5.0) << "the bound above would be loose";
  EXPECT_TRUE(line.find("main " + std::to_string(pids[0])) != std::string::npos ||
              line.find("worker " + std::to_string(pids[1])) != std::string::npos)
      << "the last to block is the parent or its child: " << line;
  EXPECT_NE(r.out.find("TIMELINES"), std::string::npos) << r.out;
}

// The prog ids a process holds, from its fdinfo ("prog_id:" lines).
std::vector<int> bpf_prog_ids_of(int pid) {
  std::vector<int> ids;
  auto r = run_command({"/bin/sh", "-c", "cat /proc/" + std::to_string(pid) + "/fdinfo/* 2>/dev/null"});
  size_t pos = 0;
  while ((pos = r.out.find("prog_id:", pos)) != std::string::npos) {
    pos += 8;
    ids.push_back(std::atoi(r.out.c_str() + pos));
  }
  return ids;
}

TEST(CliLive, SigkillMidTraceLeavesNothingAttached) {
  HANGTRACE_REQUIRE_BPF();
  Workload job({repro_path("repro_sleeper")});
  ASSERT_FALSE(job.wait_for_line("READY").empty());
  int out[2];
  ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
  pid_t tracer = spawn_hangtrace({"--pid", std::to_string(job.pid()), "--duration", "600"}, out[1], false);
  close(out[1]);
  std::string text = read_until(out[0], "hangtrace: tracing", std::chrono::seconds(30));
  ASSERT_NE(text.find("hangtrace: tracing"), std::string::npos)
      << "hangtrace never started tracing: " << text;
  std::vector<int> progs = bpf_prog_ids_of(tracer);
  ASSERT_GE(progs.size(), 5u) << "hangtrace should hold its live programs";
  kill(tracer, SIGKILL);
  int status = 0;
  waitpid(tracer, &status, 0);
  close(out[0]);
  // The kernel frees programs once the last fd (and link) is gone.
  for (int id : progs) {
    CommandResult r;
    for (int i = 0; i < 100; ++i) {
      r = run_command({"bpftool", "prog", "show", "id", std::to_string(id)});
      if (r.exit_code != 0) break;
      usleep(50000);
    }
    EXPECT_NE(r.exit_code, 0) << "program " << id << " still loaded: " << r.out;
  }
  auto links = run_command({"bpftool", "link", "show"});
  for (int id : progs)
    EXPECT_EQ(links.out.find("prog " + std::to_string(id) + "\n"), std::string::npos) << links.out;
}

// Folded stacks of live waits carry the kernel stack where the thread slept
// and, after "--", the stacks of whoever woke it (offwaketime's layout): here
// the child's write() into the pipe the parent reads.
TEST(CliLive, FoldedWaitsCarryTheirWakersStacks) {
  HANGTRACE_REQUIRE_BPF();
  TempDir dir{"hangtrace-folded-test"};
  std::string folded = dir.file("waits.folded");
  auto r = run_command({hangtrace_path(), "--json", "-", "--folded", folded, "--",
                        repro_path("repro_live_slow_pipe"), "6", "30"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  std::string text = read_text_file(folded);
  ASSERT_FALSE(text.empty()) << r.err;
  int read_waits_with_waker = 0;
  // A JITed program's symbol: bpf_prog_<tag>_<name>. (The kernel's own
  // bpf_prog_load is no BPF frame: a timer interrupt that ends a sleep wakes
  // it from whatever it interrupted, e.g. another tracer loading programs.)
  const std::regex bpf_frame("(^|;)bpf_prog_[0-9a-f]{16}");
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    EXPECT_FALSE(std::regex_search(line, bpf_frame)) << "our own BPF frames leaked: " << line;
    size_t sep = line.find(";--;");
    if (sep == std::string::npos || line.find("pipe_read", 0) > sep) continue;
    std::string waker = line.substr(sep + 4, line.rfind(' ') - sep - 4);
    // The waker's kernel stack, innermost first: the wakeup inside the pipe write.
    EXPECT_NE(waker.find("try_to_wake_up"), std::string::npos) << line;
    EXPECT_NE(waker.find("pipe_write"), std::string::npos) << line;
    EXPECT_LT(waker.find("try_to_wake_up"), waker.find("pipe_write")) << line;
    // ... and last the waker itself, comm/tid.
    EXPECT_EQ(waker.substr(waker.rfind(';') + 1).rfind("repro_live_slow", 0), 0u) << line;
    // User frames are named from the module files (libc's wrappers), also
    // after the job exited: the wakee's read() above its kernel stack, the
    // waker's write() below its own.
    EXPECT_NE(line.find(";read;entry_SYSCALL_64"), std::string::npos) << line;
    EXPECT_NE(waker.find("entry_SYSCALL_64_after_hwframe;write;"), std::string::npos) << line;
    ++read_waits_with_waker;
  }
  EXPECT_GE(read_waits_with_waker, 1) << text;
}

TEST(CliLive, ListHooksSaysWhatIsActive) {
  HANGTRACE_REQUIRE_BPF();
  auto r = run_command({hangtrace_path(), "--list-hooks"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("hooks active"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("process"), std::string::npos);
}

}  // namespace
}  // namespace hangtrace::testing
