// Fleet mode's pure parts: which processes are jobs (from a fixture /proc),
// the flight recorder's bounds and replay, the watchdog, histogram folding.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "hangtrace/abi.h"
#include "hangtrace/daemon.h"
#include "hangtrace/procfs.h"
#include "fake_proc.h"
#include "temp_dir.h"

namespace hangtrace::daemon {
namespace {

namespace fs = std::filesystem;

using testing::FakeProc;

JobMatcher matcher(JobSelectors s) {
  auto m = JobMatcher::make(s);
  EXPECT_TRUE(m) << m.error();
  return *m;
}

TEST(DaemonJobs, ForkedWorkersJoinTheirJobAndLaunchersAreNotJobs) {
  FakeProc proc;
  const std::vector<std::string> train = {"/usr/bin/python3", "train.py", "--epochs", "3"};
  proc.add(1, 0, "systemd", {"/sbin/init"});
  // torchrun (a launcher whose command line names train.py too) and two ranks
  // it exec'd, each with forked DataLoader workers.
  proc.add(10, 1, "torchrun", {"/usr/bin/python3", "/usr/bin/torchrun", "--nproc-per-node", "2", "train.py"});
  proc.add(11, 10, "python3", {"/usr/bin/python3", "-u", "train.py", "--local-rank=0"});
  proc.add(12, 10, "python3", {"/usr/bin/python3", "-u", "train.py", "--local-rank=1"});
  proc.add(13, 11, "python3", {"/usr/bin/python3", "-u", "train.py", "--local-rank=0"});
  proc.add(14, 12, "python3", {"/usr/bin/python3", "-u", "train.py", "--local-rank=1"});
  // A job of its own, started by hand; a spawn worker that does not match.
  proc.add(20, 1, "python3", train);
  proc.add(21, 20, "python3", {"/usr/bin/python3", "-c", "from multiprocessing.spawn import spawn_main"});
  proc.add(30, 1, "bash", {"bash"});
  proc.add(2, 0, "kthreadd", {}, "", {}, 0x00208040);  // a kernel thread: never listed
  auto procs = scan_processes(proc.root, matcher({{R"(train\.py)"}, {}, false}));
  ASSERT_TRUE(procs) << procs.error();
  EXPECT_EQ(procs->size(), 9u);
  std::vector<int> roots = job_roots(*procs);
  EXPECT_EQ(roots, (std::vector<int>{11, 12, 20}));
  EXPECT_EQ(descendants_of(11, *procs), (std::vector<int>{13}));
  EXPECT_EQ(descendants_of(20, *procs), (std::vector<int>{21}));
  EXPECT_EQ(descendants_of(10, *procs), (std::vector<int>{11, 12, 13, 14}));
  auto p20 = std::find_if(procs->begin(), procs->end(), [](const auto& p) { return p.pid == 20; });
  EXPECT_EQ(p20->matched_by, R"(cmdline ~ 'train\.py')");
  EXPECT_EQ(p20->cmdline, "/usr/bin/python3 train.py --epochs 3");
  EXPECT_EQ(p20->start_ticks, 1000u);
}

TEST(DaemonJobs, ALauncherPickedUpBeforeItsRankExecdGivesWayToTheRank) {
  // torchrun with one rank per node: the first scan sees the launcher and
  // its child still a forked copy of it (before exec), one job; the next
  // scan sees the child exec'd as the rank, the launcher's job superseded.
  FakeProc proc;
  const std::vector<std::string> launcher = {"/usr/bin/python3", "launch.py", "--nnodes", "2", "train.py"};
  proc.add(1, 0, "systemd", {"/sbin/init"});
  proc.add(10, 1, "python3", launcher);
  proc.add(11, 10, "python3", launcher);
  proc.add(20, 1, "python3", {"/usr/bin/python3", "train.py"});  // a job of its own, with a worker
  proc.add(21, 20, "python3", {"/usr/bin/python3", "train.py"});
  auto before = scan_processes(proc.root, matcher({{R"(train\.py)"}, {}, false}));
  ASSERT_TRUE(before) << before.error();
  ASSERT_EQ(job_roots(*before), (std::vector<int>{10, 20}));
  const std::map<int, std::set<int>> tracked = {{10, {10, 11}}, {20, {20, 21}}};
  EXPECT_EQ(superseded_jobs(tracked, job_roots(*before)), std::vector<int>{});

  FakeProc execd;
  execd.add(1, 0, "systemd", {"/sbin/init"});
  execd.add(10, 1, "python3", launcher);
  execd.add(11, 10, "python3", {"/usr/bin/python3", "-u", "train.py", "--rank-from-env"});
  execd.add(20, 1, "python3", {"/usr/bin/python3", "train.py"});
  execd.add(21, 20, "python3", {"/usr/bin/python3", "train.py"});
  auto after = scan_processes(execd.root, matcher({{R"(train\.py)"}, {}, false}));
  ASSERT_TRUE(after) << after.error();
  ASSERT_EQ(job_roots(*after), (std::vector<int>{11, 20}));
  EXPECT_EQ(superseded_jobs(tracked, job_roots(*after)), std::vector<int>{10});
  // A job whose root is gone is not superseded (the scan ends it as gone).
  EXPECT_EQ(superseded_jobs({{30, {30, 31}}}, job_roots(*after)), std::vector<int>{});
}

TEST(DaemonJobs, CgroupAndGpuSelectors) {
  FakeProc proc;
  proc.add(40, 1, "python3", {"python3", "a.py"}, "12:memory:/kubepods/pod-a/c1\n0::/kubepods/pod-a/c1\n");
  proc.add(41, 1, "python3", {"python3", "b.py"}, "0::/user.slice\n", {"/dev/nvidiactl", "/dev/nvidia3"});
  proc.add(42, 1, "python3", {"python3", "c.py"}, "0::/user.slice\n", {"/dev/nvidiactl", "/dev/null"});
  auto procs = scan_processes(proc.root, matcher({{}, {"/kubepods/"}, true}));
  ASSERT_TRUE(procs) << procs.error();
  std::map<int, std::string> why;
  for (const auto& p : *procs) why[p.pid] = p.matched_by;
  EXPECT_EQ(why[40], "cgroup /kubepods/pod-a/c1");
  EXPECT_EQ(why[41], "holds /dev/nvidia3");
  EXPECT_EQ(why[42], "") << "nvidiactl alone is not a GPU";
  EXPECT_EQ(job_roots(*procs), (std::vector<int>{40, 41}));
}

TEST(DaemonJobs, ABadRegexIsOneClearError) {
  for (const char* bad : {"train(", R"((a)\1)", "train(?=x)"}) {
    auto m = JobMatcher::make({{"ok", bad}, {}, false});
    ASSERT_FALSE(m) << bad;
    EXPECT_EQ(m.error().rfind(std::string("failed to compile --match '") + bad + "': ", 0), 0u) << m.error();
  }
}

// Issue 34: a process of another user whose command line is over
// kMaxCmdlineBytes (~1.1 MiB, train.py at its end). The match is made on its
// first MiB and says so; a pattern whose match lies past the cut does not
// match (what was cut off is not matched on, and the CLI and daemon say
// it); what is kept of each command line is bounded, and two command lines
// equal in their kept part but not beyond are told apart.
TEST(DaemonJobs, ACommandLinePastTheBoundIsMatchedOnItsFirstPartAndKeptShort) {
  FakeProc proc;
  std::vector<std::string> huge = {"/usr/bin/python3", "x.py"};
  for (int i = 0; i < 11; ++i) huge.push_back(std::string(100 * 1000, 'a' + i));
  huge.push_back("train.py");
  proc.add(1, 0, "systemd", {"/sbin/init"});
  proc.add(50, 1, "python3", huge);
  proc.add(51, 50, "python3", huge);  // forked: the same command line
  std::vector<std::string> other = huge;
  // Exec'd into another program: the same first 4 KiB (what is kept), not
  // the same first MiB (what the digest covers; command lines equal in it
  // are one to the daemon).
  other[2] = std::string(50 * 1000, 'a') + std::string(50 * 1000, 'z');
  proc.add(52, 50, "python3", other);
  for (const char* pattern : {R"(python.*train\.py)", R"(.*train\.py)", R"(train\.py$)"}) {
    auto procs = scan_processes(proc.root, matcher({{pattern}, {}, false}));
    ASSERT_TRUE(procs) << procs.error();
    for (const auto& p : *procs) {
      if (p.pid == 1) continue;
      EXPECT_TRUE(p.cmdline_cut) << p.pid;
      EXPECT_EQ(p.matched_by, "") << pattern;
      EXPECT_LE(p.cmdline.size(), kMaxKeptCmdlineBytes + 4);
      EXPECT_TRUE(p.cmdline.ends_with(" ...")) << p.cmdline.substr(p.cmdline.size() - 20);
    }
  }
  auto procs = scan_processes(proc.root, matcher({{R"(^/usr/bin/python3 x\.py a+)"}, {}, false}));
  ASSERT_TRUE(procs) << procs.error();
  std::map<int, const ProcessEntry*> by_pid;
  for (const auto& p : *procs) by_pid[p.pid] = &p;
  ASSERT_EQ(by_pid.size(), 4u);
  EXPECT_EQ(by_pid[50]->matched_by, R"(cmdline ~ '^/usr/bin/python3 x\.py a+' (in its first 1 MiB))");
  EXPECT_TRUE(same_cmdline(*by_pid[50], *by_pid[51]));
  EXPECT_EQ(by_pid[50]->cmdline, by_pid[52]->cmdline);   // the kept part is the same...
  EXPECT_FALSE(same_cmdline(*by_pid[50], *by_pid[52]));  // ... the command lines are not
  // The worker forked from it is in its job; the exec'd child is a job of its own.
  EXPECT_EQ(job_roots(*procs), (std::vector<int>{52}));
}

TEST(DaemonJobs, ACommandLineAtTheBoundIsWholeAndOnePastItIsCut) {
  FakeProc proc;
  // "python3\0" and the argument's NUL: kMaxCmdlineBytes bytes on disk, then one more.
  proc.add(60, 1, "python3", {"python3", std::string(procfs::kMaxCmdlineBytes - 9, 'x')});
  proc.add(61, 1, "python3", {"python3", std::string(procfs::kMaxCmdlineBytes - 8, 'x')});
  auto procs = scan_processes(proc.root, matcher({{"x$"}, {}, false}));
  ASSERT_TRUE(procs) << procs.error();
  ASSERT_EQ(procs->size(), 2u);
  EXPECT_FALSE((*procs)[0].cmdline_cut);
  EXPECT_EQ((*procs)[0].matched_by, "cmdline ~ 'x$'");
  EXPECT_TRUE((*procs)[1].cmdline_cut);
  EXPECT_EQ((*procs)[1].matched_by, "cmdline ~ 'x$' (in its first 1 MiB)");
}

// A cgroup text past kMaxCgroupBytes is matched on its whole lines before
// the cut; a line past it is not seen.
TEST(DaemonJobs, ACgroupTextPastTheBoundIsMatchedOnItsWholeLines) {
  FakeProc proc;
  std::string lines;
  for (int i = 0; lines.size() < procfs::kMaxCgroupBytes; ++i)
    lines += std::to_string(i) + "::/user.slice/" + std::string(100, 'c') + "\n";
  proc.add(70, 1, "python3", {"python3", "a.py"}, "0::/kubepods/early\n" + lines);
  proc.add(71, 1, "python3", {"python3", "b.py"}, lines + "0::/kubepods/late\n");
  auto procs = scan_processes(proc.root, matcher({{}, {"/kubepods/"}, false}));
  ASSERT_TRUE(procs) << procs.error();
  std::map<int, std::string> why;
  for (const auto& p : *procs) why[p.pid] = p.matched_by;
  EXPECT_EQ(why[70], "cgroup /kubepods/early");
  EXPECT_EQ(why[71], "");
}

TEST(DaemonIncidents, WhichDeathsAreBundled) {
  EXPECT_EQ(exit_incident(0), std::nullopt);
  EXPECT_EQ(exit_incident(3 << 8), "abnormal-exit");
  EXPECT_EQ(exit_incident(7), "sigbus");
  EXPECT_EQ(exit_incident(7 | 0x80), "sigbus");  // with a core dump
  EXPECT_EQ(exit_incident(11), "abnormal-exit");
  EXPECT_EQ(exit_incident(6), "abnormal-exit");
  EXPECT_EQ(exit_incident(15), std::nullopt);
  EXPECT_EQ(exit_incident(2), std::nullopt);
  EXPECT_EQ(exit_incident(9), std::nullopt);
}

// One sampled pass's view of a job's main thread, as the cause its time
// counts under (hangtrace_main_thread_seconds_total{cause}).
TEST(DaemonMainThreadCause, EachSampledStateCountsUnderItsCause) {
  const uint32_t none = HT_OBJ_UNKNOWN;
  EXPECT_STREQ(sampled_main_cause(true, false, 0, false, none, true), "on-cpu");
  // On a CPU wins over a syscall caught at its start.
  EXPECT_STREQ(sampled_main_cause(true, true, HT_WAIT_FUTEX, false, none, true), "on-cpu");
  EXPECT_STREQ(sampled_main_cause(false, false, 0, false, none, true), "other");
  // A poll or pipe read: waiting for batches only when the job has workers.
  EXPECT_STREQ(sampled_main_cause(false, true, HT_WAIT_POLL, true, HT_OBJ_PIPE, true), "dataloader");
  EXPECT_STREQ(sampled_main_cause(false, true, HT_WAIT_POLL, true, none, true), "dataloader");
  EXPECT_STREQ(sampled_main_cause(false, true, HT_WAIT_IO, false, HT_OBJ_PIPE, true), "dataloader");
  EXPECT_STREQ(sampled_main_cause(false, true, HT_WAIT_POLL, true, none, false), "sleep");
  EXPECT_STREQ(sampled_main_cause(false, true, HT_WAIT_POLL, false, none, false), "other");
  EXPECT_STREQ(sampled_main_cause(false, true, HT_WAIT_IO, false, HT_OBJ_ANON, true), "other");
  // The fd says more than the call: a file is storage, a socket the network.
  EXPECT_STREQ(sampled_main_cause(false, true, HT_WAIT_IO, false, HT_OBJ_FILE, true), "storage-io");
  EXPECT_STREQ(sampled_main_cause(false, true, HT_WAIT_POLL, true, HT_OBJ_SOCKET, true), "network");
  EXPECT_STREQ(sampled_main_cause(false, true, HT_WAIT_NET, false, none, false), "network");
  EXPECT_STREQ(sampled_main_cause(false, true, HT_WAIT_FUTEX, true, none, true), "lock");
  EXPECT_STREQ(sampled_main_cause(false, true, HT_WAIT_SLEEP, true, none, true), "sleep");
  EXPECT_STREQ(sampled_main_cause(false, true, HT_WAIT_CHILD, false, none, true), "other");
}

TEST(DaemonHistograms, Log2BucketsFoldIntoPowersOfFour) {
  const auto& bounds = exported_bucket_bounds();
  ASSERT_EQ(bounds.size(), 15u);
  EXPECT_DOUBLE_EQ(bounds[0], 4e-6);
  EXPECT_DOUBLE_EQ(bounds[4], 1024e-6);
  uint64_t counts[HT_HIST_BUCKETS] = {};
  counts[0] = 1;    // [1, 2) us  -> <= 4 us
  counts[1] = 2;    // [2, 4) us  -> <= 4 us
  counts[2] = 4;    // [4, 8) us  -> <= 16 us
  counts[9] = 8;    // [512, 1024) us -> <= 1024 us
  counts[10] = 16;  // [1024, 2048) us -> <= 4096 us
  counts[31] = 32;  // beyond every bound -> +Inf
  std::vector<double> folded = fold_log2_buckets(counts, HT_HIST_BUCKETS);
  ASSERT_EQ(folded.size(), 16u);
  EXPECT_EQ(folded[0], 3);
  EXPECT_EQ(folded[1], 4);
  EXPECT_EQ(folded[4], 8);
  EXPECT_EQ(folded[5], 16);
  EXPECT_EQ(folded[15], 32);
  double total = 0;
  for (double v : folded) total += v;
  EXPECT_EQ(total, 63);
  EXPECT_STREQ(role_name(true, true), "main_thread");
  EXPECT_STREQ(role_name(true, false), "main_process");
  EXPECT_STREQ(role_name(false, true), "worker");
  EXPECT_STREQ(wait_kind_name(HT_WAIT_FUTEX), "futex");
  EXPECT_STREQ(wait_kind_name(HT_WAIT_CHILD), "child");
}

std::string proc_record(uint32_t type, uint64_t ts, int tgid, int exit_code = 0,
                        uint32_t flags = HT_PROC_WHOLE_PROCESS) {
  ht_proc_event e{};
  e.hdr.type = type;
  e.hdr.size = sizeof e;
  e.hdr.ts_ns = ts;
  e.hdr.tgid = tgid;
  e.hdr.tid = tgid;
  std::strcpy(e.hdr.comm, "pt_worker");
  e.exit_code = exit_code;
  e.flags = flags;
  return std::string(reinterpret_cast<const char*>(&e), sizeof e);
}

std::string oom_record(uint64_t ts, int tgid) {
  ht_oom_event e{};
  e.hdr.type = HT_EV_OOM_VICTIM;
  e.hdr.size = sizeof e;
  e.hdr.ts_ns = ts;
  e.hdr.tgid = tgid;
  e.hdr.tid = tgid;
  std::strcpy(e.hdr.comm, "pt_worker");
  e.anon_rss_kb = 500 << 10;
  e.memcg_limit_pages = (512 << 20) / 4096;
  return std::string(reinterpret_cast<const char*>(&e), sizeof e);
}

TEST(FlightRecorder, KeepsTheHorizonAndCountsWhatTheBoundsPushOut) {
  FlightRecorder r(10'000'000'000ull, 3, 1 << 20);
  for (int i = 0; i < 5; ++i) {
    std::string rec = proc_record(HT_EV_PROC_FORK, 1'000'000'000ull * (i + 1), 100);
    r.add(1'000'000'000ull * (i + 1), rec.data(), rec.size());
  }
  EXPECT_EQ(r.size(), 3u);
  EXPECT_EQ(r.evicted(), 2u);
  EXPECT_EQ(r.records().front().ts_ns, 3'000'000'000ull);
  r.prune(14'000'000'001ull);  // the horizon is 10 s: what is older than 4 s goes
  EXPECT_EQ(r.size(), 1u);
  EXPECT_EQ(r.records().front().ts_ns, 5'000'000'000ull);
  EXPECT_EQ(r.evicted(), 2u) << "aging out is not eviction";
  FlightRecorder small(10'000'000'000ull, 100, 2 * sizeof(ht_proc_event));
  for (int i = 0; i < 3; ++i) {
    std::string rec = proc_record(HT_EV_PROC_FORK, i, 100);
    small.add(i, rec.data(), rec.size());
  }
  EXPECT_EQ(small.size(), 2u);
  EXPECT_EQ(small.bytes(), 2 * sizeof(ht_proc_event));
}

TEST(FlightRecorder, ReplayGivesTheDeathAndItsCause) {
  FlightRecorder r(600'000'000'000ull, 1000, 1 << 20);
  std::string oom = oom_record(5'000'000'000ull, 212);
  std::string exit = proc_record(HT_EV_PROC_EXIT, 5'100'000'000ull, 212, 9);
  r.add(5'000'000'000ull, oom.data(), oom.size());
  r.add(5'100'000'000ull, exit.data(), exit.size());
  LiveObservation o = r.replay(4'000'000'000ull, 6'000'000'000ull);
  ASSERT_EQ(o.deaths.size(), 1u);
  EXPECT_EQ(o.deaths[0].pid, 212);
  EXPECT_TRUE(o.deaths[0].oom_victim);
  EXPECT_EQ(o.deaths[0].signal, 9);
  EXPECT_DOUBLE_EQ(o.duration_s, 2.0);
  nlohmann::json j = r.to_json(1'700'000'000.0);
  ASSERT_EQ(j["events"].size(), 2u);
  EXPECT_EQ(j["events"][0]["type"], "oom-victim");
  EXPECT_EQ(j["events"][0]["pid"], 212);
  EXPECT_DOUBLE_EQ(j["events"][0]["unix_time"].get<double>(), 1'700'000'005.0);
  EXPECT_EQ(j["events"][1]["type"], "exit");
  EXPECT_EQ(j["events"][1]["signal"], 9);
  EXPECT_EQ(j["records"], 2);
}

TEST(ProgressWatch, HungOnlyWhenNoSignalMovesForTheWholePeriod) {
  ProgressWatch w(10'000'000'000ull);
  ProgressSample s;
  s.now_ns = 1'000'000'000ull;
  s.python_frames = "train.py:10 step\n";
  EXPECT_EQ(w.update(s), "");  // the first sample starts the clock
  EXPECT_FALSE(w.hung(10'999'999'999ull));
  s.now_ns = 5'000'000'000ull;
  s.wakeups_from_job = 3;
  EXPECT_EQ(w.update(s), "wakeups from the job");
  EXPECT_EQ(w.last_progress_ns(), 5'000'000'000ull);
  s.now_ns = 8'000'000'000ull;
  s.gpu_launches = 100;
  EXPECT_EQ(w.update(s), "GPU launches");
  s.now_ns = 8'500'000'000ull;
  s.main_woken_sampled = 1;
  EXPECT_EQ(w.update(s), "main thread woken");
  s.now_ns = 9'000'000'000ull;
  s.python_frames = "train.py:11 step\n";
  EXPECT_EQ(w.update(s), "Python frames");
  // Unreadable frames are no evidence either way.
  s.now_ns = 12'000'000'000ull;
  s.python_frames = "";
  EXPECT_EQ(w.update(s), "");
  s.now_ns = 15'000'000'000ull;
  s.python_frames = "train.py:11 step\n";
  EXPECT_EQ(w.update(s), "");
  EXPECT_FALSE(w.hung(18'999'999'999ull));
  EXPECT_TRUE(w.hung(19'000'000'000ull));
  EXPECT_EQ(w.last_progress_signal(), "Python frames");
}

TEST(ProgressWatch, FramesFingerprintIgnoresNativeFrames) {
  std::vector<UserFrame> stack = {{UserFrame::Kind::Native, "pthread_cond_wait", "libc.so.6", 0, 0x10},
                                  {UserFrame::Kind::Python, "_try_get_data", "dataloader.py", 1133, 0},
                                  {UserFrame::Kind::Python, "<module>", "train.py", 12, 0}};
  EXPECT_EQ(python_frames_fingerprint(stack), "dataloader.py:1133 _try_get_data\ntrain.py:12 <module>\n");
}

}  // namespace
}  // namespace hangtrace::daemon
