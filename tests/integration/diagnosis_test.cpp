// End-to-end diagnosis tests: a reproducer blocks for real, hangtrace looks at
// it through /proc + BPF, and the report must name the cause.
//
// Each reproducer prints "READY <pids...>" just before it blocks; the test then
// polls /proc until every thread really sleeps in the expected syscall (no
// guessing sleeps) and only then runs `hangtrace --pid P --json -`.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hangtrace/syscall_nr.h"
#include "support.h"

namespace ht = hangtrace::testing;
using nlohmann::json;

namespace {

constexpr long kRead = HT_NR_read;
constexpr long kPause = HT_NR_pause;
constexpr long kWait4 = HT_NR_wait4;
constexpr long kFutex = HT_NR_futex;

std::set<int> as_set(const std::vector<int>& v) { return {v.begin(), v.end()}; }

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t b = 0;
  while (b < s.size() && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  return s.substr(b);
}

// The common shape of a "hang" report: exit 2, schema, verdict, target.
void expect_hang_report(const ht::HangtraceRun& run, int target) {
  ASSERT_EQ(run.cmd.exit_code, 2) << run.dump();
  ASSERT_TRUE(run.report.is_object()) << run.dump();
  EXPECT_EQ(run.report.value("schema", ""), "hangtrace.report/1") << run.dump();
  EXPECT_EQ(run.report.value("target_pid", 0), target) << run.dump();
  ASSERT_TRUE(run.report.contains("verdict")) << run.dump();
  EXPECT_EQ(run.report["verdict"].value("status", ""), "hang") << run.dump();
  EXPECT_FALSE(run.report["verdict"].value("summary", "").empty()) << run.dump();
}

// The one finding of `kind`; fails the test when there is none.
json only_finding(const ht::HangtraceRun& run, const std::string& kind) {
  auto found = run.findings(kind);
  EXPECT_EQ(found.size(), 1u) << "expected exactly one " << kind << " finding\n" << run.dump();
  return found.empty() ? json() : found.front();
}

// What the fd that `pid`'s main thread is blocked on (args[0] of its
// syscall, e.g. read(fd, ...)) links to: "pipe:[123]", or "" when unknown.
std::string blocked_fd_link(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/syscall");
  long nr = -1;
  std::string arg0;
  if (!(in >> nr >> arg0) || nr < 0) return "";
  long fd = std::stol(arg0, nullptr, 16);
  char buf[128] = {};
  std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  ssize_t n = readlink(path.c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

const json* process_entry(const json& report, int pid) {
  if (!report.contains("processes")) return nullptr;
  for (const auto& p : report["processes"])
    if (p.value("pid", 0) == pid) return &p;
  return nullptr;
}

}  // namespace

// Parent holds a process-shared mutex and reads a pipe only the child writes;
// the child waits for the mutex. A two-process cycle.
TEST(Diagnosis, PipeFutexCycleIsACertainDeadlock) {
  HANGTRACE_REQUIRE_BPF();
  ht::Workload w({ht::repro_path("repro_pipe_futex_cycle")});
  auto pids = ht::parse_ready_pids(w.wait_for_line("READY"));
  ASSERT_EQ(pids.size(), 2u) << "no READY line from the reproducer";
  const int parent = pids[0], child = pids[1];
  ASSERT_EQ(parent, w.pid());
  ASSERT_EQ(ht::wait_until_blocked(parent, std::chrono::seconds(20), {kRead}), "");
  ASSERT_EQ(ht::wait_until_blocked(child, std::chrono::seconds(20), {kFutex}), "");

  auto run = ht::run_hangtrace(parent);
  ASSERT_NO_FATAL_FAILURE(expect_hang_report(run, parent));
  json f = only_finding(run, "deadlock-cycle");
  ASSERT_FALSE(f.is_null());
  EXPECT_EQ(f.value("severity", ""), "critical") << run.dump();
  EXPECT_EQ(f.value("confidence", ""), "certain") << run.dump();
  EXPECT_EQ(as_set(ht::finding_pids(f)), (std::set<int>{parent, child})) << run.dump();
  ASSERT_TRUE(f.contains("details") && f["details"].contains("cycle")) << run.dump();
  EXPECT_GE(f["details"]["cycle"].size(), 2u) << run.dump();
  EXPECT_GE(f.value("chain", json::array()).size(), 2u) << run.dump();
  // The cycle runs through the pipe the parent reads: it must be named.
  std::string pipe_link = blocked_fd_link(parent);
  ASSERT_EQ(pipe_link.rfind("pipe:[", 0), 0u) << pipe_link;
  EXPECT_NE(f.dump().find(pipe_link), std::string::npos) << "cycle does not name " << pipe_link << "\n"
                                                         << run.dump();
}

// The reader kept its own copy of the write end; every writer exited.
static void dead_writer_case(bool zombie) {
  std::vector<std::string> argv = {ht::repro_path("repro_dead_writer")};
  if (zombie) argv.push_back("--zombie");
  ht::Workload w(argv);
  auto pids = ht::parse_ready_pids(w.wait_for_line("READY"));
  ASSERT_EQ(pids.size(), 3u) << "no READY line from the reproducer";
  const int reader = pids[0];
  ASSERT_EQ(ht::wait_until_blocked(reader, std::chrono::seconds(20), {kRead}), "");
  const std::string pipe_link = blocked_fd_link(reader);
  ASSERT_EQ(pipe_link.rfind("pipe:[", 0), 0u) << pipe_link;

  auto run = ht::run_hangtrace(reader);
  ASSERT_NO_FATAL_FAILURE(expect_hang_report(run, reader));
  json f = only_finding(run, "dead-peer");
  ASSERT_FALSE(f.is_null());
  EXPECT_EQ(f.value("severity", ""), "critical") << run.dump();
  auto fp = ht::finding_pids(f);
  EXPECT_TRUE(std::find(fp.begin(), fp.end(), reader) != fp.end()) << run.dump();
  ASSERT_TRUE(f.contains("details")) << run.dump();
  EXPECT_EQ(f["details"].value("object", ""), pipe_link) << run.dump();

  if (zombie) {
    // The unreaped writer is still a child of the reader: it must show up,
    // as a zombie, and must not break the snapshot.
    const json* z = process_entry(run.report, pids[2]);
    ASSERT_NE(z, nullptr) << "zombie writer " << pids[2] << " not in processes\n" << run.dump();
    EXPECT_EQ(z->value("state", ""), "Z") << run.dump();
    EXPECT_EQ(z->value("ppid", 0), reader) << run.dump();
  }
}

TEST(Diagnosis, DeadWriterReapedIsADeadPeer) {
  HANGTRACE_REQUIRE_BPF();
  dead_writer_case(false);
}

TEST(Diagnosis, DeadWriterLeftZombieIsADeadPeer) {
  HANGTRACE_REQUIRE_BPF();
  dead_writer_case(true);
}

// A second thread holds a private mutex across fork(); the child locks its
// copy, whose owner does not exist in the child.
TEST(Diagnosis, ForkInheritedLockedMutexIsOrphaned) {
  HANGTRACE_REQUIRE_BPF();
  ht::Workload w({ht::repro_path("repro_fork_locked_mutex")});
  auto pids = ht::parse_ready_pids(w.wait_for_line("READY"));
  ASSERT_EQ(pids.size(), 3u) << "no READY line from the reproducer";
  const int parent = pids[0], child = pids[1], holder = pids[2];
  ASSERT_EQ(ht::wait_until_blocked(parent, std::chrono::seconds(20), {kWait4, kPause}), "");
  ASSERT_EQ(ht::wait_until_blocked(child, std::chrono::seconds(20), {kFutex}), "");

  auto run = ht::run_hangtrace(parent);
  ASSERT_NO_FATAL_FAILURE(expect_hang_report(run, parent));
  json f = only_finding(run, "orphaned-lock");
  ASSERT_FALSE(f.is_null());
  EXPECT_EQ(f.value("severity", ""), "critical") << run.dump();
  EXPECT_EQ(f.value("confidence", ""), "certain") << run.dump();
  auto fp = ht::finding_pids(f);
  EXPECT_TRUE(std::find(fp.begin(), fp.end(), child) != fp.end()) << run.dump();
  ASSERT_TRUE(f.contains("details") && f["details"].contains("owner_tid")) << run.dump();
  ASSERT_TRUE(f["details"]["owner_tid"].is_number_integer()) << run.dump();
  EXPECT_EQ(f["details"]["owner_tid"].get<int>(), holder) << run.dump();
  // The child is a descendant of the target in the report.
  const json* c = process_entry(run.report, child);
  ASSERT_NE(c, nullptr) << run.dump();
  EXPECT_EQ(c->value("role", ""), "descendant") << run.dump();
  // Nothing here is a cycle: the parent only waits for its child.
  EXPECT_TRUE(run.findings("deadlock-cycle").empty()) << run.dump();
}

// ---- bad input: exit 1 with one line on stderr -----------------------------

TEST(BadInput, NoSuchProcess) {
  auto r = ht::run_command({ht::hangtrace_path(), "--pid", "999999999", "--json", "-"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  std::string err = trim(r.err);
  EXPECT_EQ(err.find('\n'), std::string::npos) << "more than one line on stderr:\n" << r.err;
  EXPECT_NE(lower(err).find("no such process"), std::string::npos) << r.err;
}

TEST(BadInput, KernelThread) {
  auto r = ht::run_command({ht::hangtrace_path(), "--pid", "2", "--json", "-"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  std::string err = trim(r.err);
  EXPECT_EQ(err.find('\n'), std::string::npos) << "more than one line on stderr:\n" << r.err;
  EXPECT_NE(lower(err).find("kernel thread"), std::string::npos) << r.err;
}
