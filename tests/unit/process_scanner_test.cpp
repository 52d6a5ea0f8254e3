// The daemon's /proc scan with a memory (process_scanner.h): the same
// entries as scan_processes, without reading an unchanged process's command
// line again; a new image (exec), a reused pid, an argv rewritten in place
// are still seen.
#include "hangtrace/process_scanner.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <fstream>
#include <string>
#include <vector>

#include "fake_proc.h"

namespace hangtrace::daemon {
namespace {

using testing::FakeProc;

JobMatcher matcher(JobSelectors s) {
  auto m = JobMatcher::make(s);
  EXPECT_TRUE(m) << m.error();
  return *m;
}

// ROOT/PID/stat with all 52 fields: start time (22), start of the stack
// (28), argv's bounds (48, 49), as an exec moves them.
void write_stat(const FakeProc& proc, int pid, int ppid, const std::string& comm, uint64_t start,
                uint64_t stack, uint64_t arg_start, uint64_t arg_end) {
  std::vector<std::string> f(52, "0");
  f[0] = std::to_string(pid);
  f[1] = "(" + comm + ")";
  f[2] = "S";
  f[3] = std::to_string(ppid);
  f[8] = "4194304";  // flags: not a kernel thread
  f[19] = "1";       // threads
  f[21] = std::to_string(start);
  f[27] = std::to_string(stack);
  f[47] = std::to_string(arg_start);
  f[48] = std::to_string(arg_end);
  std::string line;
  for (const auto& x : f) line += (line.empty() ? "" : " ") + x;
  std::ofstream(proc.root / std::to_string(pid) / "stat") << line << "\n";
}

void write_cmdline(const FakeProc& proc, int pid, const std::vector<std::string>& argv) {
  std::string cmd;
  for (const auto& a : argv) cmd += a + '\0';
  std::ofstream(proc.root / std::to_string(pid) / "cmdline", std::ios::binary) << cmd;
}

std::vector<std::tuple<int, int, uint64_t, std::string, std::string, std::string>> rows(
    const std::vector<ProcessEntry>& entries) {
  std::vector<std::tuple<int, int, uint64_t, std::string, std::string, std::string>> out;
  for (const auto& e : entries)
    out.emplace_back(e.pid, e.ppid, e.start_ticks, e.comm, e.cmdline, e.matched_by);
  return out;
}

TEST(ProcessScanner, TheEntriesOfScanProcessesWithoutReadingCommandLinesAgain) {
  FakeProc proc;
  proc.add(1, 0, "systemd", {"/sbin/init"});
  proc.add(10, 1, "torchrun", {"/usr/bin/python3", "/usr/bin/torchrun", "train.py"});
  proc.add(11, 10, "python3", {"/usr/bin/python3", "-u", "train.py", "--local-rank=0"});
  proc.add(14, 11, "python3", {"/usr/bin/python3", "-u", "train.py", "--local-rank=0"});
  proc.add(30, 1, "bash", {"bash"});
  proc.add(2, 0, "kthreadd", {}, "", {}, 0x00208040);  // a kernel thread: never listed
  const JobMatcher m = matcher({{R"(train\.py)"}, {}, false});
  auto plain = scan_processes(proc.root, m);
  ASSERT_TRUE(plain) << plain.error();

  ProcessScanner scanner(proc.root.string(), m);
  auto first = scanner.scan();
  ASSERT_TRUE(first) << first.error();
  EXPECT_EQ(rows(*first), rows(*plain));
  EXPECT_EQ(scanner.cmdlines_read(), 5u);
  EXPECT_EQ(scanner.matches_made(), 5u);

  auto second = scanner.scan();
  ASSERT_TRUE(second) << second.error();
  EXPECT_EQ(rows(*second), rows(*plain));
  // Pids 1, 10, 11, 14, 30 at scan 2 of 15: none is due for its refresh (scan + pid).
  EXPECT_EQ(scanner.cmdlines_read(), 5u) << "nothing changed: no command line read again";
  EXPECT_EQ(scanner.matches_made(), 5u) << "nor matched again";
}

// The daemon's identity source (one task-iterator pass) stands for every
// /proc/PID/stat: the same entries, /proc read for command lines and for
// what the pass left out (a kernel thread, once; a zombie; a process it did
// not visit); when the source fails, the scan reads the stat files.
TEST(ProcessScanner, AnIdentitySourceStandsForTheStatFilesAndAFailedOneFallsBack) {
  FakeProc proc;
  proc.add(1, 0, "init", {"/sbin/init"});
  proc.add(2, 0, "kthreadd", {}, "", {}, 0x00208040);
  proc.add(10, 1, "torchrun", {"/usr/bin/python3", "/usr/bin/torchrun", "train.py"});
  proc.add(11, 10, "python3", {"/usr/bin/python3", "-u", "train.py"});
  proc.add(30, 1, "bash", {"bash"});
  write_stat(proc, 11, 10, "python3", 1000, 0x7ffd0000, 0x7ffd1000, 0x7ffd1020);
  const JobMatcher m = matcher({{R"(train\.py)"}, {}, false});
  auto plain = scan_processes(proc.root, m);
  ASSERT_TRUE(plain) << plain.error();

  // The pass's view: the stat files' fields as they are now, parsed; it
  // did not visit pid 1, and leaves kernel threads out.
  std::vector<procfs::ProcStat> view;
  const procfs::ProcFs fs(proc.root.string());
  for (int pid : {10, 11, 30}) {
    auto st = fs.stat(pid);
    ASSERT_TRUE(st) << st.error();
    view.push_back(*st);
  }
  bool fail = false;
  int passes = 0;
  auto identities = [&]() -> Result<std::vector<procfs::ProcStat>> {
    ++passes;
    if (fail) return make_error("failed to read BPF task iterator: test");
    return view;
  };
  ProcessScanner scanner(proc.root.string(), m);
  scanner.set_identity_source(identities);
  // The stat file of 30 now says something else: a scan that read it would differ.
  write_stat(proc, 30, 1, "zsh", 5000, 0x7ffa0000, 0x7ffa1000, 0x7ffa1008);
  auto first = scanner.scan();
  ASSERT_TRUE(first) << first.error();
  EXPECT_EQ(passes, 1);
  EXPECT_EQ(rows(*first), rows(*plain));
  EXPECT_TRUE(scanner.identity_error().empty());
  EXPECT_EQ(scanner.stat_fds_open(), 1u) << "pid 1's only";

  // A zombie /proc lists and the pass does not: read, and left out.
  proc.add(12, 10, "python3", {});
  write_stat(proc, 12, 10, "python3", 1000, 0, 0, 0);
  // A new process, in the pass and in /proc: listed as the pass saw it.
  procfs::ProcStat late = view.back();
  late.pid = 40;
  view.push_back(late);
  proc.add(40, 1, "bash", {"bash"});
  auto second = scanner.scan();
  ASSERT_TRUE(second) << second.error();
  std::map<int, std::string> comm;
  for (const auto& e : *second) comm[e.pid] = e.comm;
  EXPECT_EQ(comm, (std::map<int, std::string>{
                      {1, "init"}, {10, "torchrun"}, {11, "python3"}, {30, "bash"}, {40, "bash"}}));

  fail = true;
  auto fallback = scanner.scan();
  ASSERT_TRUE(fallback) << fallback.error();
  EXPECT_EQ(scanner.identity_error(), "failed to read BPF task iterator: test");
  comm.clear();
  for (const auto& e : *fallback) comm[e.pid] = e.comm;
  EXPECT_EQ(comm, (std::map<int, std::string>{
                      {1, "init"}, {10, "torchrun"}, {11, "python3"}, {30, "zsh"}, {40, "bash"}}))
      << "every stat file read";
}

TEST(ProcessScanner, AnExecAReusedPidAndANewProcessAreReadAtTheNextScan) {
  FakeProc proc;
  proc.add(20, 1, "python3", {"/usr/bin/python3", "wrapper.py"});
  proc.add(21, 1, "python3", {"/usr/bin/python3", "other.py"});
  write_stat(proc, 20, 1, "python3", 1000, 0x7ffd0000, 0x7ffd1000, 0x7ffd1020);
  write_stat(proc, 21, 1, "python3", 1000, 0x7ffe0000, 0x7ffe1000, 0x7ffe1020);
  const JobMatcher m = matcher({{R"(train\.py)"}, {}, false});
  ProcessScanner scanner(proc.root.string(), m);
  ASSERT_TRUE(scanner.scan());
  const uint64_t reads = scanner.cmdlines_read();

  // 20 execs python3 train.py (the same comm; a new stack and argv);
  // pid 21 exits and is reused by a new process; 22 starts.
  write_cmdline(proc, 20, {"/usr/bin/python3", "train.py"});
  write_stat(proc, 20, 1, "python3", 1000, 0x7ffc0000, 0x7ffc1000, 0x7ffc1018);
  write_cmdline(proc, 21, {"/usr/bin/python3", "train.py", "--again"});
  write_stat(proc, 21, 1, "python3", 2000, 0x7ffe0000, 0x7ffe1000, 0x7ffe1020);
  proc.add(22, 1, "python3", {"/usr/bin/python3", "train.py"});
  auto after = scanner.scan();
  ASSERT_TRUE(after) << after.error();
  std::map<int, std::string> why;
  for (const auto& e : *after) why[e.pid] = e.matched_by;
  EXPECT_EQ(why[20], R"(cmdline ~ 'train\.py')");
  EXPECT_EQ(why[21], R"(cmdline ~ 'train\.py')");
  EXPECT_EQ(why[22], R"(cmdline ~ 'train\.py')");
  EXPECT_EQ(scanner.cmdlines_read(), reads + 3);
}

TEST(ProcessScanner, AnArgvRewrittenInPlaceIsSeenWithinFullEveryScans) {
  // setproctitle: the command line changes, the stat does not.
  FakeProc proc;
  proc.add(20, 1, "python3", {"/usr/bin/python3", "launcher.py"});
  write_stat(proc, 20, 1, "python3", 1000, 0x7ffd0000, 0x7ffd1000, 0x7ffd1080);
  const JobMatcher m = matcher({{R"(train\.py)"}, {}, false});
  ProcessScanner scanner(proc.root.string(), m, 4);
  ASSERT_TRUE(scanner.scan());
  write_cmdline(proc, 20, {"train.py rank 3"});
  int seen_at = 0;
  for (int scan = 1; scan <= 4 && !seen_at; ++scan) {
    auto s = scanner.scan();
    ASSERT_TRUE(s) << s.error();
    ASSERT_EQ(s->size(), 1u);
    if (!s->front().matched_by.empty()) seen_at = scan;
  }
  EXPECT_GT(seen_at, 0) << "not seen within 4 scans";
}

TEST(ProcessScanner, GoneAndZombieProcessesAreLeftOut) {
  FakeProc proc;
  proc.add(20, 1, "python3", {"/usr/bin/python3", "train.py"});
  proc.add(21, 20, "python3", {"/usr/bin/python3", "train.py"});
  write_stat(proc, 21, 20, "python3", 1000, 0x7ffd0000, 0x7ffd1000, 0x7ffd1080);
  const JobMatcher m = matcher({{R"(train\.py)"}, {}, false});
  ProcessScanner scanner(proc.root.string(), m);
  ASSERT_TRUE(scanner.scan());
  // 21 becomes a zombie: no mm, so no stack or argv in its stat, and an
  // empty command line.
  write_stat(proc, 21, 20, "python3", 1000, 0, 0, 0);
  write_cmdline(proc, 21, {});
  auto zombie = scanner.scan();
  ASSERT_TRUE(zombie) << zombie.error();
  ASSERT_EQ(zombie->size(), 1u);
  EXPECT_EQ(zombie->front().pid, 20);
  std::filesystem::remove_all(proc.root / "20");
  std::filesystem::remove_all(proc.root / "21");
  auto gone = scanner.scan();
  ASSERT_TRUE(gone) << gone.error();
  EXPECT_TRUE(gone->empty());
}

TEST(ProcessScanner, CgroupAndGpuSelectorsAreMatchedAgainWhenThoseChange) {
  FakeProc proc;
  proc.add(40, 1, "python3", {"python3", "a.py"}, "0::/user.slice\n");
  const JobMatcher m = matcher({{}, {"/kubepods/"}, true});
  ProcessScanner scanner(proc.root.string(), m);
  auto before = scanner.scan();
  ASSERT_TRUE(before) << before.error();
  EXPECT_EQ(before->front().matched_by, "");
  std::ofstream(proc.root / "40" / "cgroup") << "0::/kubepods/pod-a/c1\n";  // moved into a pod
  auto after = scanner.scan();
  ASSERT_TRUE(after) << after.error();
  EXPECT_EQ(after->front().matched_by, "cgroup /kubepods/pod-a/c1");
}

// The scanner keeps kMaxKeptCmdlineBytes of each command line, not the MiB
// a process may show: one rewritten in place past that part (setproctitle)
// is told by its digest and matched again on what is read.
TEST(ProcessScanner, KeepsAShortPartOfEachCommandLineAndSeesChangesPastIt) {
  FakeProc proc;
  const std::string pad(8 * 1024, 'p');
  proc.add(50, 1, "python3", {"python3", pad, "idle.py"});
  const JobMatcher m = matcher({{R"(train\.py$)"}, {}, false});
  ProcessScanner scanner(proc.root.string(), m, 1);  // every scan reads every command line
  auto before = scanner.scan();
  ASSERT_TRUE(before) << before.error();
  ASSERT_EQ(before->size(), 1u);
  EXPECT_EQ(before->front().matched_by, "");
  EXPECT_LE(before->front().cmdline.size(), kMaxKeptCmdlineBytes + 4);
  write_cmdline(proc, 50, {"python3", pad, "train.py"});
  auto after = scanner.scan();
  ASSERT_TRUE(after) << after.error();
  EXPECT_EQ(after->front().cmdline, before->front().cmdline);  // the kept part is the same
  EXPECT_NE(after->front().cmdline_digest, before->front().cmdline_digest);
  EXPECT_EQ(after->front().matched_by, R"(cmdline ~ 'train\.py$')");
}

}  // namespace
}  // namespace hangtrace::daemon
