// Bad input gets one clear line and a non-zero exit; outputs are whole or absent.
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "support.h"

namespace hangtrace::testing {
namespace {

size_t count_lines(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

TEST(Cli, NotRootIsOneLine) {
  HANGTRACE_REQUIRE_BPF();
  Workload sleeper({repro_path("repro_sleeper")});
  ASSERT_FALSE(sleeper.wait_for_line("READY").empty());
  auto r = run_command({"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", hangtrace_path(),
                        "--pid", std::to_string(sleeper.pid())});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(count_lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("not root and missing CAP_BPF"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty());
}

// Least privilege: a uid that owns nothing, given only the capabilities
// docs/deploy.md lists (ambient, so they survive the exec), diagnoses a
// root-owned process as root would: its fds, its syscalls, its kernel
// stacks from BPF (symbolized with CAP_SYSLOG). Short of a needed one, a
// warning names the one missing.
TEST(Cli, CapabilitiesWithoutRootAreEnoughAndAMissingOneIsNamed) {
  HANGTRACE_REQUIRE_BPF();
  Workload sleeper({repro_path("repro_sleeper")});
  ASSERT_FALSE(sleeper.wait_for_line("READY").empty());
  auto as_nobody_with = [&](const std::string& caps) {
    return run_command({"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=" + caps,
                        "--ambient-caps=" + caps, hangtrace_path(), "--pid", std::to_string(sleeper.pid()),
                        "--json", "-"});
  };
  auto as_root = run_command({hangtrace_path(), "--pid", std::to_string(sleeper.pid()), "--json", "-"});
  auto r = as_nobody_with("+bpf,+perfmon,+sys_ptrace,+dac_read_search,+syslog");
  auto j = nlohmann::json::parse(r.out, nullptr, false),
       root = nlohmann::json::parse(as_root.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out << r.err;
  ASSERT_FALSE(root.is_discarded()) << as_root.out << as_root.err;
  // The same diagnosis as root's: the same exit status (2: the pipe nobody
  // writes is a hang) and the same findings.
  EXPECT_EQ(r.exit_code, as_root.exit_code) << r.err;
  auto kinds = [](const nlohmann::json& report) {
    std::vector<std::string> out;
    for (const auto& f : report["findings"]) out.push_back(f["kind"]);
    return out;
  };
  EXPECT_EQ(kinds(j), kinds(root)) << r.err;
  EXPECT_FALSE(kinds(j).empty()) << j.dump(1);
  ASSERT_EQ(j["processes"].size(), 1u) << j.dump(1);
  const auto& p = j["processes"][0];
  EXPECT_EQ(p["pid"], sleeper.pid());
  bool kernel_stack = false, syscall_known = false, pipe_known = false;
  for (const auto& t : p["threads"]) {
    kernel_stack |= !t["kernel_stack"].empty();
    syscall_known |= t["syscall"].is_string() && !t["syscall"].get<std::string>().empty();
    // The pipe main reads, through root's 0500 /proc/PID/fd.
    pipe_known |= t["wait"]["summary"].is_string() &&
                  t["wait"]["summary"].get<std::string>().find("pipe:") != std::string::npos;
  }
  EXPECT_TRUE(kernel_stack) << p.dump(1);
  EXPECT_TRUE(syscall_known) << p.dump(1);
  EXPECT_TRUE(pipe_known) << p.dump(1);

  // Without CAP_SYSLOG the kernel shows zeros for every kallsyms address:
  // the same diagnosis, kernel stacks unsymbolized, and the report says so.
  r = as_nobody_with("+bpf,+perfmon,+sys_ptrace,+dac_read_search");
  j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out << r.err;
  EXPECT_EQ(r.exit_code, as_root.exit_code) << r.err;
  EXPECT_EQ(kinds(j), kinds(root)) << r.err;
  EXPECT_NE(j["limitations"].dump().find("CAP_SYSLOG"), std::string::npos) << j["limitations"].dump();

  // Without CAP_SYS_PTRACE a one-off diagnosis degrades (docs/deploy.md's
  // table): one warning names the capability, the limitations what it cost.
  r = as_nobody_with("+bpf,+perfmon,+dac_read_search");
  j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out << r.err;
  EXPECT_NE(r.err.find("warning: missing CAP_SYS_PTRACE ("), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("CAP_BPF"), std::string::npos) << r.err;
  size_t warnings = 0;
  for (size_t at = r.err.find("warning: missing"); at != std::string::npos;
       at = r.err.find("warning: missing", at + 1))
    ++warnings;
  EXPECT_EQ(warnings, 1u) << r.err;
  EXPECT_NE(j["limitations"].dump().find("Operation not permitted"), std::string::npos)
      << j["limitations"].dump();
}

TEST(Cli, MissingTargetAndBadArguments) {
  // Without --pid every training job on the host is diagnosed (scenario
  // tests); selectors that match nothing are one line naming the way out.
  auto r = run_command({hangtrace_path(), "--match", "^no-such-job-[0-9]{40}$"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(count_lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("no process matches --match"), std::string::npos) << r.err;
  r = run_command({hangtrace_path(), "--pid", "1", "--match", "x"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--pid"), std::string::npos) << r.err;
  r = run_command({hangtrace_path(), "--pid", "abc"});
  EXPECT_EQ(r.exit_code, 1);
  r = run_command({hangtrace_path(), "--pid", "1", "--duration", "-3"});
  EXPECT_EQ(r.exit_code, 1);
}

TEST(Cli, CorruptSnapshotFilesAreRejected) {
  TempDir tmp{"hangtrace-cli-test"};
  const std::string dir = tmp.path.string();
  std::string truncated = dir + "/truncated.json";
  std::ofstream(truncated) << "{\"schema\": \"hangtrace.snapshot/1\", \"processes\": [";
  auto r = run_command({hangtrace_path(), "--from-snapshot", truncated});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(count_lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("failed to read"), std::string::npos) << r.err;

  std::string foreign = dir + "/foreign.json";
  std::ofstream(foreign) << "{\"hello\": 1}";
  r = run_command({hangtrace_path(), "--from-snapshot", foreign});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("not a hangtrace snapshot"), std::string::npos) << r.err;

  r = run_command({hangtrace_path(), "--from-snapshot", dir + "/missing.json"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("No such file"), std::string::npos) << r.err;
}

// A live snapshot saved to disk and analysed later gives the same verdict;
// the JSON file is written whole (temp + rename), and a failed write leaves
// nothing behind and exits 1.
TEST(Cli, SavedSnapshotReanalysesToTheSameVerdict) {
  HANGTRACE_REQUIRE_BPF();
  Workload job({repro_path("repro_fork_locked_mutex")});
  std::string line = job.wait_for_line("READY");
  ASSERT_FALSE(line.empty());
  TempDir tmp{"hangtrace-cli-test"};
  const std::string dir = tmp.path.string();
  std::string snap = dir + "/snap.json", report = dir + "/report.json";
  auto ready = parse_ready_pids(line);
  ASSERT_EQ(ready.size(), 3u) << line;  // parent, child, holder thread
  ASSERT_EQ(wait_until_blocked(ready[1]), "") << "the child never blocked";
  CommandResult live = run_command(
      {hangtrace_path(), "--pid", std::to_string(job.pid()), "--save-snapshot", snap, "--json", report});
  ASSERT_EQ(live.exit_code, 2) << live.out << live.err;
  EXPECT_NE(live.out.find("VERDICT: HANG"), std::string::npos);
  std::ifstream in(report);
  nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["verdict"]["status"], "hang");

  auto offline = run_command({hangtrace_path(), "--from-snapshot", snap, "--json", "-"});
  EXPECT_EQ(offline.exit_code, 2) << offline.err;
  nlohmann::json j2 = nlohmann::json::parse(offline.out);
  EXPECT_EQ(j2["verdict"], j["verdict"]);
  EXPECT_EQ(j2["findings"][0]["kind"], j["findings"][0]["kind"]);

  auto unwritable =
      run_command({hangtrace_path(), "--from-snapshot", snap, "--json", dir + "/no/such/dir/r.json"});
  EXPECT_EQ(unwritable.exit_code, 1);
  EXPECT_NE(unwritable.err.find("failed to write"), std::string::npos) << unwritable.err;
  struct stat st {};
  EXPECT_NE(stat((dir + "/no").c_str(), &st), 0);
}

TEST(Cli, TargetThatExitsIsReportedNotCrashed) {
  HANGTRACE_REQUIRE_BPF();
  Workload sleeper({repro_path("repro_sleeper")});
  ASSERT_FALSE(sleeper.wait_for_line("READY").empty());
  int pid = sleeper.pid();
  sleeper.kill_all();
  auto r = run_command({hangtrace_path(), "--pid", std::to_string(pid)});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(count_lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("no such process"), std::string::npos) << r.err;
}

// The postmortem exports (--folded, --flamegraph, --speedscope, --trace) are
// written whole; an unwritable path is one line, exit 1, and no temp file.
TEST(Cli, ExportsAreWrittenWholeOrNotAtAll) {
  TempDir tmp{"hangtrace-cli-test"};
  const std::string dir = tmp.path.string();
  std::string snap = dir + "/snap.json";
  std::ofstream(snap) << R"({"schema": "hangtrace.snapshot/1", "target_pid": 4242, "processes": [)"
                      << R"({"pid": 4242, "comm": "train", "role": "target", "state": "S", "threads": [)"
                      << R"({"tid": 4242, "comm": "train", "state": "S"}]}]})";
  auto ok =
      run_command({hangtrace_path(), "--from-snapshot", snap, "--folded", dir + "/f.folded", "--flamegraph",
                   dir + "/f.svg", "--speedscope", dir + "/s.json", "--trace", dir + "/t.json"});
  EXPECT_NE(ok.exit_code, 1) << ok.err;
  for (const char* name : {"/f.folded", "/f.svg", "/s.json", "/t.json"}) {
    struct stat st {};
    EXPECT_EQ(stat((dir + name).c_str(), &st), 0) << name;
  }
  std::ifstream svg(dir + "/f.svg");
  std::string svg_text((std::istreambuf_iterator<char>(svg)), std::istreambuf_iterator<char>());
  EXPECT_NE(svg_text.find("</svg>"), std::string::npos);
  nlohmann::json speedscope, trace;
  EXPECT_NO_THROW(speedscope = nlohmann::json::parse(std::ifstream(dir + "/s.json")));
  EXPECT_NO_THROW(trace = nlohmann::json::parse(std::ifstream(dir + "/t.json")));
  EXPECT_TRUE(speedscope.contains("profiles"));
  EXPECT_FALSE(trace.is_null());

  for (const char* flag : {"--folded", "--flamegraph", "--speedscope", "--trace"}) {
    auto bad = run_command({hangtrace_path(), "--from-snapshot", snap, flag, "/nonexistent/dir/x.svg"});
    EXPECT_EQ(bad.exit_code, 1) << flag << bad.err;
    EXPECT_EQ(count_lines(bad.err), 1u) << flag << bad.err;
    EXPECT_NE(bad.err.find("failed to write /nonexistent/dir/x.svg: "), std::string::npos) << bad.err;
  }
  // A target that cannot be replaced (a directory): the temp file is made,
  // then the rename fails; nothing may be left behind.
  std::string blocker = dir + "/is_a_dir.svg";
  ASSERT_EQ(mkdir(blocker.c_str(), 0755), 0);
  auto bad = run_command({hangtrace_path(), "--from-snapshot", snap, "--flamegraph", blocker});
  EXPECT_EQ(bad.exit_code, 1) << bad.err;
  EXPECT_EQ(count_lines(bad.err), 1u) << bad.err;
  EXPECT_NE(bad.err.find("failed to write " + blocker), std::string::npos) << bad.err;
  auto ls = run_command({"ls", "-A", dir});
  EXPECT_EQ(ls.out.find(".tmp."), std::string::npos) << ls.out;
}

// As root, hangtrace writes where it is told without replacing what is not a
// regular file (`--json /dev/null` once replaced the host's /dev/null) and
// without following a link another user planted.
TEST(Cli, OutputsNeverReplaceDevicesOrFollowForeignLinks) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: mknod and lchown";
  TempDir dir;
  std::string snap = dir.file("snap.json");
  std::ofstream(snap) << R"({"schema": "hangtrace.snapshot/1", "target_pid": 4242, "processes": [)"
                      << R"({"pid": 4242, "comm": "train", "role": "target", "state": "S", "threads": [)"
                      << R"({"tid": 4242, "comm": "train", "state": "S"}]}]})";
  std::string null_copy = dir.file("null");
  ASSERT_EQ(mknod(null_copy.c_str(), S_IFCHR | 0666, makedev(1, 3)), 0);
  auto r =
      run_command({hangtrace_path(), "--from-snapshot", snap, "--json", null_copy, "--trace", null_copy});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  struct stat st {};
  ASSERT_EQ(lstat(null_copy.c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << "the device was replaced";

  std::string victim = dir.file("victim");
  std::ofstream(victim) << "precious";
  std::string planted = dir.file("report.json");
  ASSERT_EQ(symlink(victim.c_str(), planted.c_str()), 0);
  ASSERT_EQ(lchown(planted.c_str(), 65534, 65534), 0);
  // Every output, planted at its own path, and below a planted directory link.
  std::string elsewhere = dir.file("elsewhere");
  ASSERT_EQ(mkdir(elsewhere.c_str(), 0755), 0);
  std::string planted_dir = dir.file("shared");
  ASSERT_EQ(symlink(elsewhere.c_str(), planted_dir.c_str()), 0);
  ASSERT_EQ(lchown(planted_dir.c_str(), 65534, 65534), 0);
  for (const char* flag :
       {"--json", "--folded", "--flamegraph", "--speedscope", "--trace", "--save-snapshot"}) {
    for (const std::string& path : {planted, planted_dir + "/out"}) {
      r = run_command({hangtrace_path(), "--from-snapshot", snap, flag, path});
      EXPECT_EQ(r.exit_code, 1) << flag << " " << path << ": " << r.err;
      EXPECT_EQ(count_lines(r.err), 1u) << r.err;
      EXPECT_NE(r.err.find("not followed"), std::string::npos) << r.err;
    }
  }
  r = run_command({hangtrace_path(), "--from-snapshot", snap, "--bundle", planted_dir});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(count_lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("not followed"), std::string::npos) << r.err;
  EXPECT_EQ(read_text_file(victim), "precious");
  auto ls = run_command({"ls", "-A", elsewhere});
  EXPECT_EQ(ls.out, "") << "written through the planted directory link";
  // A hard link to the victim at the output path: replaced, never written through.
  std::string hard = dir.file("hard.json");
  ASSERT_EQ(link(victim.c_str(), hard.c_str()), 0);
  r = run_command({hangtrace_path(), "--from-snapshot", snap, "--json", hard});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(read_text_file(victim), "precious");
  EXPECT_NE(read_text_file(hard).find("\"schema\""), std::string::npos);
}

}  // namespace
}  // namespace hangtrace::testing
