// "When did progress stop" and the per-thread timelines, from hand-built
// snapshots and live observations: every figure is checked to the value the
// fixture implies, so a wrong time axis or a wrong thread fails here.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "hangtrace/analysis.h"
#include "hangtrace/live.h"
#include "hangtrace/report.h"
#include "hangtrace/snapshot_json.h"
#include "snapshot_builder.h"

namespace hangtrace {
namespace {

constexpr int64_t kPoll = HT_NR_poll, kFutex = HT_NR_futex, kWait4 = HT_NR_wait4,
                  kNanosleep = HT_NR_nanosleep;
constexpr uint64_t kWaitBitsetPrivate = FUTEX_WAIT_BITSET_PRIVATE;
constexpr double kSampledAtUnix = 1'700'000'000.0;         // 2023-11-14 22:13:20 UTC
constexpr uint64_t kSampledAtMono = 5'000'000'000'000ull;  // 5000 s of uptime
constexpr uint64_t kSecond = 1'000'000'000ull;

// Snapshots with the BPF sample's clock pair, whose threads are blocked in a
// syscall for a given time (nullopt: no BPF, no blocked time).
struct Fixture : testing::SnapshotBuilder {
  explicit Fixture(int target) : SnapshotBuilder(target) {
    clock(kSampledAtUnix, kSampledAtMono, 0.5);  // the snapshot began a little before the BPF sample
  }
  // A thread blocked in `nr` for `blocked_s`; threads other than the main one are "helper"s.
  ThreadInfo& thread(int pid, int tid, int64_t nr, std::initializer_list<uint64_t> args,
                     std::optional<double> blocked_s) {
    ThreadInfo& t = SnapshotBuilder::thread(pid, tid, 'S', blocked_s);
    if (tid != pid) t.comm = "helper";
    testing::in_syscall(t, nr, args);
    return t;
  }
  // A worker blocked on its fork()ed copy of a lock held by main's thread 101.
  void worker_on_inherited_lock(int pid, std::optional<double> blocked_s) {
    proc(pid, s.target_pid, ProcessRole::Descendant);
    futex_wait(pid, pid, 0x4000, false, testing::mutex_bytes(2, 101), std::nullopt, blocked_s);
  }
};

// main 100 waits for its child 200 (wait4); 200 is single-threaded and waits
// on a private lock nobody in it can release: orphaned-lock, main on the chain.
Fixture main_waits_for_stuck_child(std::optional<double> main_blocked, std::optional<double> child_blocked) {
  Fixture f(100);
  f.proc(100, 1, ProcessRole::Target);
  f.proc(200, 100, ProcessRole::Descendant, "pt_data_worker");
  f.thread(100, 100, kWait4, {200, 0, 0}, main_blocked);
  f.thread(100, 102, kNanosleep, {0x7000, 0}, 0.5);  // a timer thread: not part of the hang
  f.futex_wait(200, 200, 0x4000, false, testing::sem_bytes(1, FUTEX_PRIVATE_FLAG), std::nullopt,
               child_blocked);
  return f;
}

LiveObservation window(double start_before_s, double end_before_s) {
  LiveObservation live;
  live.start_ns = kSampledAtMono - static_cast<uint64_t>(start_before_s * 1e9);
  live.end_ns = kSampledAtMono - static_cast<uint64_t>(end_before_s * 1e9);
  live.duration_s = (live.end_ns - live.start_ns) / 1e9;
  return live;
}

BlockedInterval interval(uint64_t start_ns, uint64_t end_ns, const std::string& what) {
  BlockedInterval b;
  b.start_ns = start_ns;
  b.end_ns = end_ns;
  b.what = what;
  return b;
}

TraceEvent wakeup(int tgid, int tid, uint64_t ts_ns, int waker_tgid, int waker_tid, const std::string& comm) {
  TraceEvent e;
  e.tgid = tgid;
  e.tid = tid;
  e.ts_ns = ts_ns;
  e.waker_tgid = waker_tgid;
  e.waker_tid = waker_tid;
  e.waker_comm = comm;
  return e;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

size_t count_lines_starting(const std::string& text, const std::string& prefix) {
  auto ls = lines_of(text);
  return std::count_if(ls.begin(), ls.end(), [&](const std::string& l) { return l.rfind(prefix, 0) == 0; });
}

TEST(ProgressStopped, IsTheLatestWaitStartInTheStuckSet) {
  // The child blocked 90 s ago, main (waiting for it) 30 s ago: main was last.
  Fixture f = main_waits_for_stuck_child(30.0, 90.0);
  Diagnosis d = diagnose(f.s);
  ASSERT_EQ(d.verdict.status, "hang") << d.verdict.summary;
  ASSERT_STREQ(finding_kind_name(d.findings.front().kind), "orphaned-lock");
  ASSERT_TRUE(d.progress_stopped);
  const ProgressStop& ps = *d.progress_stopped;
  EXPECT_EQ(ps.tid, 100);
  EXPECT_EQ(ps.pid, 100);
  EXPECT_DOUBLE_EQ(ps.ago_s, 30.0);
  EXPECT_DOUBLE_EQ(ps.unix_time, kSampledAtUnix - 30.0);
  EXPECT_EQ(ps.monotonic_ns, kSampledAtMono - 30 * kSecond);
  EXPECT_EQ(ps.basis, "snapshot");
  EXPECT_FALSE(ps.at_the_latest);
  std::vector<int> tids = ps.tids;
  std::sort(tids.begin(), tids.end());
  EXPECT_EQ(tids, (std::vector<int>{100, 200})) << "the timer thread 102 is not part of the hang";
  EXPECT_NE(ps.waits_on.find("child"), std::string::npos) << ps.waits_on;

  std::string text = render_text(f.s, d);
  auto ls = lines_of(text);
  auto verdict =
      std::find_if(ls.begin(), ls.end(), [](const auto& l) { return l.rfind("VERDICT:", 0) == 0; });
  ASSERT_NE(verdict, ls.end());
  ASSERT_NE(verdict + 1, ls.end());
  EXPECT_EQ((verdict + 1)
                ->rfind("PROGRESS STOPPED: 2023-11-14 22:12:50 UTC, 30.0 s ago: main 100 (python3) was "
                        "the last to block",
                        0),
            0u)
      << text;
  EXPECT_NE(text.find("basis: blocked times (kernel scheduler clock) of 2 stuck thread(s)"),
            std::string::npos)
      << text;
}

TEST(ProgressStopped, TheChildBlockingLastMovesIt) {
  Fixture f = main_waits_for_stuck_child(300.0, 12.5);
  Diagnosis d = diagnose(f.s);
  ASSERT_TRUE(d.progress_stopped);
  EXPECT_EQ(d.progress_stopped->tid, 200);
  EXPECT_DOUBLE_EQ(d.progress_stopped->ago_s, 12.5);
  EXPECT_EQ(d.progress_stopped->comm, "pt_data_worker");
  EXPECT_NE(d.progress_stopped->thread.find("worker 200"), std::string::npos) << d.progress_stopped->thread;
}

TEST(ProgressStopped, WaitThatBeganBeforeAttachCountsAndUnrelatedLiveActivityDoesNot) {
  // Both stuck threads blocked before the 10 s window began; the timer thread
  // 102 (not stuck) woke throughout it. Progress stopped 30 s ago, not 1 s ago.
  Fixture f = main_waits_for_stuck_child(30.0, 90.0);
  LiveObservation live = window(10.3, 0.3);
  live.blocked[102] = {interval(kSampledAtMono - 3 * kSecond, kSampledAtMono - 1 * kSecond, "nanosleep")};
  live.last_waker[102] = wakeup(100, 102, kSampledAtMono - 1 * kSecond, 0, 0, "swapper/0");
  Diagnosis d = diagnose(f.s, {}, &live);
  ASSERT_TRUE(d.progress_stopped);
  EXPECT_EQ(d.progress_stopped->tid, 100);
  EXPECT_DOUBLE_EQ(d.progress_stopped->ago_s, 30.0);
  EXPECT_EQ(d.progress_stopped->basis, "snapshot+live");
  EXPECT_EQ(d.progress_stopped->live_note,
            "live: not woken during the 10.0 s window (blocked since before it)");
}

TEST(ProgressStopped, LiveWakeupConfirmsTheSnapshot) {
  Fixture f = main_waits_for_stuck_child(4.0, 90.0);
  LiveObservation live = window(10.3, 0.3);
  // Main was woken 4.02 s before the sample, then blocked in wait4 (4 s ago).
  live.last_waker[100] = wakeup(100, 100, kSampledAtMono - 4'020'000'000ull, 200, 200, "pt_data_worker");
  Diagnosis d = diagnose(f.s, {}, &live);
  ASSERT_TRUE(d.progress_stopped);
  EXPECT_DOUBLE_EQ(d.progress_stopped->ago_s, 4.0) << "the snapshot's blocked time stays authoritative";
  EXPECT_EQ(d.progress_stopped->basis, "snapshot+live");
  EXPECT_EQ(d.progress_stopped->live_note,
            "live: last woken by 200 (pt_data_worker, tid 200) 4.0 s before the snapshot, then blocked");
}

TEST(ProgressStopped, WakeupSeenAfterTheSnapshotsWaitStartMovesItLater) {
  // The report falls back to the snapshot taken before the window when the
  // target exits during it: a wakeup seen live then postdates the blocked time.
  Fixture f = main_waits_for_stuck_child(30.0, 90.0);
  LiveObservation live;
  live.start_ns = kSampledAtMono + 1 * kSecond;
  live.end_ns = kSampledAtMono + 11 * kSecond;
  live.duration_s = 10.0;
  live.last_waker[200] = wakeup(200, 200, kSampledAtMono + 4 * kSecond, 0, 0, "swapper/1");
  Diagnosis d = diagnose(f.s, {}, &live);
  ASSERT_TRUE(d.progress_stopped);
  EXPECT_EQ(d.progress_stopped->tid, 200);
  EXPECT_DOUBLE_EQ(d.progress_stopped->ago_s, 7.0) << "counted back from the end of the window";
  EXPECT_DOUBLE_EQ(d.progress_stopped->unix_time, kSampledAtUnix + 4.0);
  EXPECT_EQ(d.progress_stopped->monotonic_ns, kSampledAtMono + 4 * kSecond);
  EXPECT_EQ(d.progress_stopped->basis, "snapshot+live");
  EXPECT_EQ(d.progress_stopped->live_note,
            "live: last woken from interrupt context 4.0 s after the snapshot, later than its blocked time "
            "says: its wait began then");
}

TEST(ProgressStopped, LiveOnlyUsesTheLastWakeupOfTheStuckThreads) {
  // No BPF snapshot data (no blocked times): the last time the live window saw
  // each stuck thread run bounds when its current wait began.
  Fixture f = main_waits_for_stuck_child(std::nullopt, std::nullopt);
  LiveObservation live = window(20.2, 0.2);
  live.last_waker[100] = wakeup(100, 100, kSampledAtMono - 6 * kSecond, 300, 301, "dist_store");
  live.blocked[200] = {interval(kSampledAtMono - 15 * kSecond, kSampledAtMono - 9 * kSecond, "futex 0x4000")};
  Diagnosis d = diagnose(f.s, {}, &live);
  ASSERT_EQ(d.verdict.status, "hang") << d.verdict.summary;
  ASSERT_TRUE(d.progress_stopped);
  EXPECT_EQ(d.progress_stopped->basis, "live");
  EXPECT_EQ(d.progress_stopped->tid, 100);
  EXPECT_DOUBLE_EQ(d.progress_stopped->ago_s, 6.0);
  EXPECT_EQ(d.progress_stopped->monotonic_ns, kSampledAtMono - 6 * kSecond);
  EXPECT_EQ(d.progress_stopped->live_note,
            "live: last woken by 300 (dist_store, tid 301) 6.0 s before the snapshot (no blocked time: its "
            "wait began then or later)");
  std::string text = render_text(f.s, d, {}, &live);
  EXPECT_NE(text.find("basis: its last wakeup seen while tracing"), std::string::npos) << text;
}

// Stack walks the kernel's stack map lost (bucket collisions) are said in the
// LIVE line and counted in the JSON; none, nothing is said.
TEST(LiveReport, StacksLostToTheStackMapAreReported) {
  Fixture f = main_waits_for_stuck_child(std::nullopt, std::nullopt);
  LiveObservation live = window(20.2, 0.2);
  Diagnosis d = diagnose(f.s, {}, &live);
  EXPECT_EQ(render_text(f.s, d, {}, &live).find("stack-map collisions"), std::string::npos);
  EXPECT_EQ(live_json(&live)["stacks_lost"], 0u);
  live.stacks_lost = 3;
  std::string text = render_text(f.s, d, {}, &live);
  EXPECT_NE(text.find("3 stack walks lost to stack-map collisions"), std::string::npos) << text;
  EXPECT_EQ(live_json(&live)["stacks_lost"], 3u);
}

TEST(ProgressStopped, OldSnapshotWithoutClockPairFallsBackToTakenAt) {
  Fixture f = main_waits_for_stuck_child(30.0, 90.0);
  f.s.sampled_at_unix = 0;
  f.s.sampled_at_monotonic_ns = 0;
  Diagnosis d = diagnose(f.s);
  ASSERT_TRUE(d.progress_stopped);
  EXPECT_DOUBLE_EQ(d.progress_stopped->unix_time, kSampledAtUnix - 0.5 - 30.0);
  EXPECT_EQ(d.progress_stopped->monotonic_ns, 0u);
  EXPECT_TRUE(render_json(f.s, d)["progress_stopped"]["monotonic_ns"].is_null());
}

TEST(ProgressStopped, TimedRetryLoopOfMainIsNotCounted) {
  // The DataLoader shape: main polls the result pipe every 5 s (its wait
  // restarts at each timeout), the workers block on an inherited lock.
  Fixture f(100);
  f.proc(100, 1, ProcessRole::Target);
  ThreadInfo& main = f.thread(100, 100, kPoll, {0x5000, 1, 5000}, 2.0);
  main.memory.poll_fds = {{5, 1}};
  main.memory.timeout_s = 5.0;
  f.thread(100, 101, kFutex, {0x9000, kWaitBitsetPrivate, 0, 0}, 600.0);
  f.worker_on_inherited_lock(200, 60.0);
  f.worker_on_inherited_lock(201, 50.0);
  for (int pid : {100, 200, 201}) {
    f.fd(pid, 5, FdKind::Pipe, 777, O_RDONLY, pid == 100 ? 0 : -1);
    f.fd(pid, 6, FdKind::Pipe, 777, O_WRONLY);
  }
  Diagnosis d = diagnose(f.s);
  ASSERT_EQ(d.verdict.status, "hang") << d.verdict.summary;
  ASSERT_TRUE(d.progress_stopped);
  EXPECT_EQ(d.progress_stopped->tid, 201);
  EXPECT_DOUBLE_EQ(d.progress_stopped->ago_s, 50.0);
  EXPECT_EQ(d.progress_stopped->timed_waits_not_counted, 1);
  EXPECT_FALSE(d.progress_stopped->at_the_latest);
  std::string text = render_text(f.s, d);
  EXPECT_NE(text.find("1 timed wait(s) not counted"), std::string::npos) << text;
}

TEST(ProgressStopped, NoLineWhenNothingIsStuck) {
  Fixture f(100);
  f.proc(100, 1, ProcessRole::Target);
  f.running(100, 100);
  f.thread(100, 102, kNanosleep, {0x7000, 0}, 0.5);
  Diagnosis d = diagnose(f.s);
  ASSERT_EQ(d.verdict.status, "ok") << d.verdict.summary;
  EXPECT_FALSE(d.progress_stopped);
  EXPECT_EQ(render_text(f.s, d).find("PROGRESS STOPPED"), std::string::npos);
  nlohmann::json j = render_json(f.s, d);
  ASSERT_TRUE(j.contains("progress_stopped"));
  EXPECT_TRUE(j["progress_stopped"].is_null());
}

// Ten workers on copies of one inherited lock: one finding with ten threads.
Fixture many_stuck_workers() {
  Fixture f(100);
  f.proc(100, 1, ProcessRole::Target);
  f.thread(100, 100, kWait4, {static_cast<uint64_t>(-1), 0, 0}, 100.0);
  f.thread(100, 101, kFutex, {0x9000, kWaitBitsetPrivate, 0, 0}, 600.0);
  for (int i = 0; i < 10; ++i) f.worker_on_inherited_lock(200 + i, 90.0 - i);
  return f;
}

TEST(Timelines, TextIsBoundedInThreadsAndIntervals) {
  Fixture f = many_stuck_workers();
  LiveObservation live = window(10.0, 0.0);
  // Worker 200: ten short waits, one per second from the start of the window.
  for (uint64_t i = 0; i < 10; ++i)
    live.blocked[200].push_back(
        interval(live.start_ns + i * kSecond, live.start_ns + i * kSecond + kSecond / 4, "futex 0x4000"));
  live.last_waker[200] = wakeup(200, 200, live.start_ns + 9 * kSecond + kSecond / 4, 100, 101, "python3");
  Diagnosis d = diagnose(f.s, {}, &live);
  ASSERT_STREQ(finding_kind_name(d.findings.front().kind), "orphaned-lock");
  ASSERT_EQ(d.findings.front().tids.size(), 10u);
  std::string text = render_text(f.s, d, {}, &live);
  auto ls = lines_of(text);
  auto start = std::find_if(ls.begin(), ls.end(), [](const auto& l) { return l.rfind("TIMELINES", 0) == 0; });
  ASSERT_NE(start, ls.end()) << text;
  EXPECT_EQ(*start, "TIMELINES (offsets from the start of the 10.0 s live window; T = the snapshot)");
  // Thread headers are indented by two spaces, their lines by four.
  size_t headers = 0;
  auto it = start + 1;
  for (; it != ls.end() && it->rfind("  ", 0) == 0; ++it)
    if (it->rfind("    ", 0) != 0 && it->rfind("  +", 0) != 0) ++headers;
  EXPECT_EQ(headers, 8u) << text;
  // main + 10 workers (the first of them also on main's chain) = 11 threads.
  EXPECT_NE(text.find("  +3 more thread(s) of the finding not shown"), std::string::npos) << text;
  EXPECT_NE(text.find("    +4 earlier blocked interval(s)"), std::string::npos) << text;
  EXPECT_EQ(count_lines_starting(text, "       +4.000 s  blocked   0.250 s  futex 0x4000"), 1u) << text;
  EXPECT_EQ(count_lines_starting(text, "       +9.000 s  blocked   0.250 s  futex 0x4000"), 1u) << text;
  EXPECT_EQ(count_lines_starting(text, "       +3.000 s"), 0u) << "older intervals are summarised";
  // The current wait of the worker began 90 s before the sample, 80 s before the window.
  EXPECT_NE(text.find("      -80.000 s  ongoing"), std::string::npos) << text;
  EXPECT_NE(text.find("(since T-90.0 s, before the window)"), std::string::npos) << text;
  EXPECT_NE(text.find("    last woken by 100 (python3, tid 101) at +9.250 s"), std::string::npos) << text;
  EXPECT_NE(text.find("    not woken during the window"), std::string::npos) << text;
}

TEST(Timelines, JsonCarriesIntervalsAndTheOpenCurrentWait) {
  Fixture f = main_waits_for_stuck_child(30.0, 90.0);
  LiveObservation live = window(10.3, 0.3);
  live.blocked[200] = {
      interval(kSampledAtMono - 95 * kSecond, kSampledAtMono - 91 * kSecond, "futex 0x4000")};
  Diagnosis d = diagnose(f.s, {}, &live);
  nlohmann::json j = render_json(f.s, d, &live);

  const auto& ps = j["progress_stopped"];
  ASSERT_TRUE(ps.is_object()) << j.dump(1);
  EXPECT_EQ(ps["tid"], 100);
  EXPECT_EQ(ps["pid"], 100);
  EXPECT_DOUBLE_EQ(ps["ago_s"].get<double>(), 30.0);
  EXPECT_DOUBLE_EQ(ps["unix_time"].get<double>(), kSampledAtUnix - 30.0);
  EXPECT_EQ(ps["monotonic_ns"].get<uint64_t>(), kSampledAtMono - 30 * kSecond);
  EXPECT_EQ(ps["utc"], "2023-11-14 22:12:50 UTC");
  EXPECT_EQ(ps["basis"], "snapshot+live");
  EXPECT_EQ(ps["at_the_latest"], false);
  EXPECT_EQ(j["sampled_at_monotonic_ns"].get<uint64_t>(), kSampledAtMono);

  const auto& timelines = j["live"]["timelines"];
  ASSERT_TRUE(timelines.is_array());
  ASSERT_EQ(timelines.size(), 2u) << timelines.dump(1);  // main, then the worker on its chain
  EXPECT_EQ(timelines[0]["tid"], 100);
  EXPECT_EQ(timelines[1]["tid"], 200);
  EXPECT_EQ(timelines[1]["pid"], 200);
  EXPECT_EQ(timelines[1]["comm"], "pt_data_worker");
  const auto& intervals = timelines[1]["intervals"];
  ASSERT_EQ(intervals.size(), 2u);
  EXPECT_EQ(intervals[0]["start_ns"].get<uint64_t>(), kSampledAtMono - 95 * kSecond);
  EXPECT_EQ(intervals[0]["end_ns"].get<uint64_t>(), kSampledAtMono - 91 * kSecond);
  EXPECT_EQ(intervals[0]["what"], "futex 0x4000");
  EXPECT_EQ(intervals[1]["start_ns"].get<uint64_t>(), kSampledAtMono - 90 * kSecond);
  EXPECT_TRUE(intervals[1]["end_ns"].is_null()) << "the wait it is still in";
  EXPECT_TRUE(timelines[1]["last_woken"].is_null());
}

TEST(Timelines, NoSectionForAJobThatExitedUnseen) {
  // The stand-in snapshot of a job that is gone: no threads, nothing seen live.
  Fixture f(100);
  f.proc(100, 1, ProcessRole::Target).state = 'X';
  LiveObservation live = window(1.0, 0.0);
  Diagnosis d = diagnose(f.s, {}, &live);
  EXPECT_EQ(render_text(f.s, d, {}, &live).find("TIMELINES"), std::string::npos);
  EXPECT_TRUE(render_json(f.s, d, &live)["live"]["timelines"].empty());
}

TEST(Timelines, SnapshotClockPairRoundTripsAndOldFilesStillLoad) {
  Fixture f = main_waits_for_stuck_child(30.0, 90.0);
  auto back = snapshot_from_json(snapshot_to_json(f.s));
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_DOUBLE_EQ(back->sampled_at_unix, kSampledAtUnix);
  EXPECT_EQ(back->sampled_at_monotonic_ns, kSampledAtMono);
  nlohmann::json old = snapshot_to_json(f.s);
  old.erase("sampled_at_unix");
  old.erase("sampled_at_monotonic_ns");
  auto loaded = snapshot_from_json(old);
  ASSERT_TRUE(loaded.ok()) << loaded.error();
  EXPECT_EQ(loaded->sampled_at_monotonic_ns, 0u);
  EXPECT_EQ(loaded->sampled_at_unix, 0.0);
}

}  // namespace
}  // namespace hangtrace
