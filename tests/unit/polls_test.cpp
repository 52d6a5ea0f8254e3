// Polls: a main thread that sleeps, wakes, re-checks and sleeps again moves a
// little all the time, yet the job may be stuck. Watched by the collector
// (PollWatch), it is judged by what it polls for: a lock another process
// holds and does not let go (critical), or nothing the kernel shows (a
// warning that names the loop) -- and a lock whose holder ran recently is no
// finding at all.
#include <gtest/gtest.h>
#include <sys/file.h>

#include "hangtrace/analysis.h"
#include "hangtrace/snapshot_json.h"
#include "hangtrace/syscalls.h"
#include "snapshot_builder.h"

namespace hangtrace {
namespace {

using testing::of_kind;
using testing::SnapshotBuilder;

PollWatch poll_every_50ms() {
  PollWatch w;
  w.watched_s = 1.5;
  w.sleeps = 30;
  w.cpu_ns = 4'000'000;
  w.samples = 60;
  w.asleep = 59;
  return w;
}

// main 100 polls (clock_nanosleep of 50 ms, again and again) at
// prep.py:12; with `lock_holder_blocked_s`, it holds fd 3 on
// /data/cache.lock, which peer 300 holds a flock lock on while it sleeps.
SnapshotBuilder poller(std::optional<double> lock_holder_blocked_s) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  ThreadInfo& t = b.thread(100, 100, 'S', 0.04);
  testing::in_syscall(t, HT_NR_clock_nanosleep, {1, 0, 0x7000, 0});
  t.memory.timeout_s = 0.05;
  t.cpu_ns_end = 300'000;  // it ran between the samples
  t.python_stack = {{UserFrame::Kind::Python, "wait_for_lock", "/srv/prep.py", 12}};
  t.poll = poll_every_50ms();
  if (lock_holder_blocked_s) {
    b.file_fd(100, 3, "/data/cache.lock", 77);
    t.poll->lock_fds = {3};
    b.s.file_locks = {SnapshotBuilder::file_lock(1, "FLOCK", 300, 77)};
    b.proc(300, 1, ProcessRole::Peer, "datasets-prep");
    ThreadInfo& h = b.thread(300, 300, 'S', *lock_holder_blocked_s);
    testing::in_syscall(h, HT_NR_clock_nanosleep, {1, 0, 0x7000, 0});
    b.file_fd(300, 4, "/data/cache.lock", 77).locks = {SnapshotBuilder::file_lock(1, "FLOCK", 300, 77)};
  }
  return b;
}

TEST(Polls, WhatAWatchedThreadDidSaysWhetherItPolls) {
  PollWatch w = poll_every_50ms();
  EXPECT_TRUE(is_poll(w));
  PollWatch asleep_throughout = w;  // one long sleep: no wakeups
  asleep_throughout.sleeps = 0;
  EXPECT_FALSE(is_poll(asleep_throughout));
  PollWatch busy = w;  // wakes often, but works: 10 % of a CPU
  busy.cpu_ns = 150'000'000;
  EXPECT_FALSE(is_poll(busy));
  PollWatch mostly_awake = w;
  mostly_awake.asleep = 30;
  EXPECT_FALSE(is_poll(mostly_awake));
  EXPECT_FALSE(is_poll(PollWatch{}));
}

TEST(Polls, ALockPolledForWhoseHolderSleepsIsCritical) {
  Diagnosis d = diagnose(poller(120.0).s);
  const ThreadWait& w = d.graph.threads.at(100);
  ASSERT_TRUE(w.poll_period_s.has_value());
  EXPECT_NEAR(*w.poll_period_s, 0.05, 1e-9);
  ASSERT_EQ(w.objects.size(), 1u);
  EXPECT_EQ(d.graph.objects.at(w.objects[0]).holder_pids, (std::vector<int>{300}));
  auto found = of_kind(d, FindingKind::NoProgress);
  ASSERT_EQ(found.size(), 1u) << d.verdict.summary;
  const Finding& f = *found.front();
  EXPECT_EQ(f.severity, Severity::Critical);
  EXPECT_NE(f.summary.find("main 100 (python3) polls in /srv/prep.py:12 (wait_for_lock)"), std::string::npos)
      << f.summary;
  EXPECT_NE(f.summary.find("every ~50 ms"), std::string::npos) << f.summary;
  EXPECT_NE(f.summary.find("flock lock on /data/cache.lock"), std::string::npos) << f.summary;
  EXPECT_NE(f.summary.find("peer 300 (datasets-prep)"), std::string::npos) << f.summary;
  EXPECT_TRUE(f.details["polls"].get<bool>());
  bool kill_advice = false;
  for (const auto& a : f.advice) kill_advice |= a.find("kill 300") != std::string::npos;
  EXPECT_TRUE(kill_advice);
  EXPECT_EQ(exit_status_for(d), 2);
}

TEST(Polls, ALockWhoseHolderRanRecentlyMayChangeHandsAndIsNoFinding) {
  Diagnosis d = diagnose(poller(0.3).s);
  EXPECT_TRUE(of_kind(d, FindingKind::NoProgress).empty()) << d.verdict.summary;
  EXPECT_EQ(exit_status_for(d), 0);
}

TEST(Polls, APollForWhatTheKernelDoesNotShowIsAWarningThatNamesTheLoop) {
  Diagnosis d = diagnose(poller(std::nullopt).s);
  auto found = of_kind(d, FindingKind::NoProgress);
  ASSERT_EQ(found.size(), 1u) << d.verdict.summary;
  const Finding& f = *found.front();
  EXPECT_EQ(f.severity, Severity::Warning);
  EXPECT_NE(f.summary.find("polls in /srv/prep.py:12"), std::string::npos) << f.summary;
  EXPECT_NE(f.summary.find("unknown"), std::string::npos) << f.summary;
  EXPECT_NE(f.advice.front().find("re-checks something every ~50 ms"), std::string::npos) << f.advice.front();
  EXPECT_EQ(d.verdict.status, "suspect");
  EXPECT_EQ(exit_status_for(d), 0);
}

TEST(Polls, APollWhileTheRestOfTheJobWorksWaitsOnThatWork) {
  SnapshotBuilder b = poller(std::nullopt);  // `while child.poll() is None: sleep(0.05)`
  b.proc(200, 100, ProcessRole::Descendant, "preprocess");
  b.running(200, 200);
  Diagnosis d = diagnose(b.s);
  EXPECT_TRUE(of_kind(d, FindingKind::NoProgress).empty()) << d.verdict.summary;
  EXPECT_EQ(exit_status_for(d), 0);
}

TEST(Polls, AThreadAsleepWithoutAWatchIsAnOrdinarySleep) {
  SnapshotBuilder b = poller(std::nullopt);
  b.find(100)->threads[0].poll.reset();
  Diagnosis d = diagnose(b.s);
  EXPECT_FALSE(d.graph.threads.at(100).poll_period_s.has_value());
  EXPECT_EQ(d.graph.threads.at(100).summary, "sleeps 50 ms");
  EXPECT_TRUE(of_kind(d, FindingKind::NoProgress).empty()) << d.verdict.summary;
}

TEST(Polls, SelectOrPollOnNoFdsWithATimeoutIsASleep) {
  const uint64_t select_sleep[6] = {0, 0, 0, 0, 0x7000, 0};
  const uint64_t select_forever[6] = {0, 0, 0, 0, 0, 0};
  const uint64_t poll_sleep[6] = {0, 0, 50, 0, 0, 0};
  const uint64_t poll_forever[6] = {0, 0, static_cast<uint64_t>(-1), 0, 0, 0};
  const uint64_t poll_fds[6] = {0x7000, 2, 50, 0, 0, 0};
  EXPECT_TRUE(only_sleeps(HT_NR_select, select_sleep));
  EXPECT_FALSE(only_sleeps(HT_NR_select, select_forever));
  EXPECT_TRUE(only_sleeps(HT_NR_poll, poll_sleep));
  EXPECT_FALSE(only_sleeps(HT_NR_poll, poll_forever));
  EXPECT_FALSE(only_sleeps(HT_NR_poll, poll_fds));
  EXPECT_TRUE(only_sleeps(HT_NR_clock_nanosleep, select_forever));
}

TEST(Polls, TheWatchSurvivesASnapshotFile) {
  SnapshotBuilder b = poller(120.0);
  auto back = snapshot_from_json(snapshot_to_json(b.s));
  ASSERT_TRUE(back.ok()) << back.error();
  const ThreadInfo* t = back->process(100)->thread(100);
  ASSERT_TRUE(t && t->poll);
  EXPECT_EQ(t->poll->sleeps, 30u);
  EXPECT_EQ(t->poll->asleep, 59);
  EXPECT_EQ(t->poll->lock_fds, (std::vector<int>{3}));
}

}  // namespace
}  // namespace hangtrace
