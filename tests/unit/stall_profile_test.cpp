// The stall profile (profile/stall_profile.cpp) and the slow-job rules
// (rules/slow.cpp) on hand-made snapshots and live windows: shares add up to
// the window, waits are attributed through who woke whom (relays followed),
// and each finding appears only for its shape.
#include <gtest/gtest.h>

#include <cstring>

#include "hangtrace/abi.h"
#include "hangtrace/analysis.h"
#include "hangtrace/live.h"
#include "hangtrace/profile.h"
#include "snapshot_builder.h"

namespace hangtrace {
namespace {

using testing::of_kind;
using testing::SnapshotBuilder;

constexpr uint64_t kS = 1'000'000'000ull;
constexpr uint64_t kStart = 100 * kS;
constexpr uint64_t kWindow = 8 * kS;

// A live window of kWindow with per-thread CPU times and wait totals.
struct WindowBuilder {
  LiveObservation o;
  WindowBuilder() {
    o.start_ns = kStart;
    o.end_ns = kStart + kWindow;
    o.duration_s = 8;
  }
  void times(int pid, int tid, double cpu_s, double runq_s = 0) {
    ThreadTimes& t = o.thread_times[tid];
    t.pid = pid;
    t.comm = "python3";
    t.first_ns = kStart;
    t.last_ns = kStart + kWindow;
    t.seen_at_start = true;
    t.on_cpu_ns = static_cast<uint64_t>(cpu_s * 1e9);
    t.runnable_ns = static_cast<uint64_t>(runq_s * 1e9);
  }
  WaitTotal& wait(int pid, int tid, uint32_t type, int64_t nr, double seconds, uint64_t calls, int waker_pid,
                  int waker_tid) {
    WaitTotal w;
    w.type = type;
    w.pid = pid;
    w.nr = nr;
    w.waker_pid = waker_pid;
    w.waker_tid = waker_tid;
    w.count = calls;
    w.sum_ns = static_cast<uint64_t>(seconds * 1e9);
    // All calls in the bucket of the mean.
    uint64_t us = w.sum_ns / std::max<uint64_t>(calls, 1) / 1000;
    int b = 0;
    while (us > 1 && b + 1 < HT_HIST_BUCKETS) us >>= 1, ++b;
    w.buckets[b] = static_cast<uint32_t>(calls);
    o.wait_totals[tid].push_back(w);
    return o.wait_totals[tid].back();
  }
  WaitTotal& futex(int pid, int tid, uint64_t uaddr, double seconds, uint64_t calls, int waker_pid,
                   int waker_tid) {
    WaitTotal& w = wait(pid, tid, HT_EV_FUTEX_WAIT, HT_NR_futex, seconds, calls, waker_pid, waker_tid);
    w.object = uaddr;
    return w;
  }
};

double share(const ThreadProfile& p, StallCause c) {
  const CauseShare* s = p.cause(c);
  return s ? s->share : 0;
}

double share(const std::vector<CauseShare>& causes, StallCause c) {
  for (const auto& s : causes)
    if (s.cause == c) return s.share;
  return 0;
}

// main 100 and DataLoader workers 200, 201; each worker's feeder thread
// (205, 206) wakes main, and is itself woken by its worker's main thread.
struct StarvedJob {
  SnapshotBuilder b{100};
  WindowBuilder w;
  StarvedJob() {
    b.proc(100, 1, ProcessRole::Target);
    b.thread(100, 100);
    for (int worker : {200, 201}) {
      b.proc(worker, 100, ProcessRole::Descendant);
      b.thread(worker, worker);
      b.thread(worker, worker + 5);
    }
    w.times(100, 100, 1.6);
    w.wait(100, 100, HT_EV_SYSCALL_BLOCK, HT_NR_poll, 3.2, 40, 200, 205);
    w.wait(100, 100, HT_EV_SYSCALL_BLOCK, HT_NR_poll, 3.0, 40, 201, 206);
    for (int worker : {200, 201}) {
      w.times(worker, worker, 0.8);
      WaitTotal& io = w.wait(worker, worker, HT_EV_SYSCALL_BLOCK, HT_NR_read, 6.8, 500, 0, 0);
      io.obj_kind = HT_OBJ_FILE;
      io.mnt_id = 40;
      io.files = {"//0001.jpg", "//0002.jpg"};  // the parent is the mount's root dentry, "/"
      MountEntry m;
      m.mount_id = 40;
      m.mount_point = "/mnt/train";
      m.fstype = "fuse.slowfs";
      m.source = "slowfs";
      m.root = "/";
      w.o.file_mounts[{worker, 40}] = m;
      w.times(worker, worker + 5, 0.1);
      w.futex(worker, worker + 5, 0x7000, 7.5, 40, worker, worker);
    }
  }
};

TEST(StallProfile, SharesOfEveryThreadAddUpToItsWindow) {
  StarvedJob job;
  StallProfile p = build_stall_profile(job.b.s, job.w.o);
  ASSERT_EQ(p.mains.size(), 1u);
  const ThreadProfile& main = p.mains.front();
  EXPECT_EQ(main.tid, 100);
  EXPECT_EQ(main.window_ns, kWindow);
  uint64_t sum = 0;
  double shares = 0;
  for (const auto& c : main.causes) {
    sum += c.ns;
    shares += c.share;
  }
  EXPECT_EQ(sum, kWindow);
  EXPECT_NEAR(shares, 1.0, 1e-9);
  EXPECT_NEAR(share(main, StallCause::OnCpu), 0.2, 1e-6);
  EXPECT_NEAR(share(main, StallCause::DataLoader), 0.775, 1e-6);
  EXPECT_NEAR(share(main, StallCause::Other), 0.025, 1e-6);
}

TEST(StallProfile, TheCriticalPathFollowsWakersThroughRelaysToTheWorkersAndTheirFiles) {
  StarvedJob job;
  StallProfile p = build_stall_profile(job.b.s, job.w.o);
  ASSERT_EQ(p.paths.size(), 1u);
  const PathStep& root = p.paths.front();
  ASSERT_EQ(root.next.size(), 1u);
  const PathStep& workers = root.next.front();
  EXPECT_EQ(workers.via, StallCause::DataLoader);
  // The feeder threads relay: the step is the workers' main threads.
  EXPECT_EQ(workers.tids, (std::vector<int>{200, 201}));
  EXPECT_EQ(workers.label, "workers 200, 201 (python3)");
  EXPECT_NEAR(share(workers.causes, StallCause::StorageIo), 0.85, 1e-6);
  ASSERT_FALSE(workers.causes.empty());
  ASSERT_FALSE(workers.causes.front().objects.empty());
  const StallObject& o = workers.causes.front().objects.front();
  EXPECT_EQ(o.mount_point, "/mnt/train");
  EXPECT_EQ(o.calls, 1000u);
  EXPECT_NE(o.what.find("read /mnt/train/*.jpg (fuse.slowfs slowfs)"), std::string::npos) << o.what;
  EXPECT_EQ(o.files, (std::vector<std::string>{"/mnt/train/0001.jpg", "/mnt/train/0002.jpg"}));
  // 6.8 s / 500 calls = 13.6 ms: the 8-16 ms bucket's middle.
  EXPECT_NEAR(static_cast<double>(o.median_ns) / 1e6, 12.288, 0.01);
}

TEST(SlowRules, StarvedByFileReadsIsIoBoundFirstThenDataStarvedAndExitsZero) {
  StarvedJob job;
  Diagnosis d = diagnose(job.b.s, {}, &job.w.o);
  ASSERT_FALSE(d.findings.empty());
  EXPECT_EQ(d.verdict.status, "slow");
  EXPECT_EQ(d.findings.front().kind, FindingKind::IoBound) << d.verdict.summary;
  EXPECT_EQ(d.verdict.summary.rfind("slow: io-bound (85%)", 0), 0u) << d.verdict.summary;
  auto io = of_kind(d, FindingKind::IoBound);
  ASSERT_EQ(io.size(), 1u);
  EXPECT_EQ(io[0]->details["mount_point"], "/mnt/train");
  EXPECT_EQ(io[0]->details["fstype"], "fuse.slowfs");
  auto starved = of_kind(d, FindingKind::DataStarved);
  ASSERT_EQ(starved.size(), 1u);
  EXPECT_NEAR(starved[0]->details["share"].get<double>(), 0.775, 1e-6);
  EXPECT_EQ(starved[0]->details["worker_pids"], (std::vector<int>{200, 201}));
  EXPECT_EQ(starved[0]->caused_by, io[0]->id);
  EXPECT_EQ(exit_status_for(d), 0);
}

TEST(SlowRules, WorkersOnCpuGetTheDecodeAdviceNotTheCacheAdvice) {
  StarvedJob job;
  for (int worker : {200, 201}) {
    job.w.o.wait_totals[worker].clear();
    job.w.times(worker, worker, 7.6);
  }
  Diagnosis d = diagnose(job.b.s, {}, &job.w.o);
  EXPECT_TRUE(of_kind(d, FindingKind::IoBound).empty());
  auto starved = of_kind(d, FindingKind::DataStarved);
  ASSERT_EQ(starved.size(), 1u);
  EXPECT_EQ(d.verdict.summary.rfind("slow: data-starved (78%)", 0), 0u) << d.verdict.summary;
  ASSERT_FALSE(starved[0]->advice.empty());
  EXPECT_NE(starved[0]->advice.front().find("CPU-bound"), std::string::npos) << starved[0]->advice.front();
}

TEST(SlowRules, AJobThatComputesMostOfTheTimeHasNoSlowFinding) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  b.thread(100, 100);
  b.proc(200, 100, ProcessRole::Descendant);
  b.thread(200, 200);
  WindowBuilder w;
  w.times(100, 100, 7.0);
  w.wait(100, 100, HT_EV_SYSCALL_BLOCK, HT_NR_poll, 0.6, 40, 200, 200);
  w.times(200, 200, 2.0);
  w.wait(200, 200, HT_EV_SYSCALL_BLOCK, HT_NR_write, 5.0, 40, 100, 100);
  Diagnosis d = diagnose(b.s, {}, &w.o);
  EXPECT_EQ(d.verdict.status, "ok") << d.verdict.summary;
  EXPECT_NEAR(share(d.profile.mains.front(), StallCause::OnCpu), 0.875, 1e-6);
}

TEST(SlowRules, ThreadsTakingTurnsOnOneLockAreContentionAConditionPoolIsNot) {
  SnapshotBuilder b(300);
  b.proc(300, 1, ProcessRole::Target);
  for (int tid = 300; tid <= 303; ++tid) b.thread(300, tid);
  for (int tid = 400; tid <= 403; ++tid) b.thread(300, tid);
  WindowBuilder w;
  w.times(300, 300, 1.0);
  // Three threads queue on 0x1000, each woken by another of them.
  for (int tid = 301; tid <= 303; ++tid) {
    w.times(300, tid, 0.2);
    w.futex(300, tid, 0x1000, 5.0, 100, 300, tid == 303 ? 301 : tid + 1);
  }
  // A pool waiting on its condition variable, woken by main only.
  for (int tid = 400; tid <= 403; ++tid) {
    w.times(300, tid, 0.5);
    w.futex(300, tid, 0x2000, 7.0, 100, 300, 300);
  }
  Diagnosis d = diagnose(b.s, {}, &w.o);
  auto locks = of_kind(d, FindingKind::LockContention);
  ASSERT_EQ(locks.size(), 1u) << d.verdict.summary;
  EXPECT_EQ(locks[0]->details["lock"], "futex 0x1000");
  EXPECT_EQ(locks[0]->details["waiter_tids"], (std::vector<int>{301, 302, 303}));
  EXPECT_NEAR(locks[0]->details["share"].get<double>(), 0.625, 1e-6);
  EXPECT_EQ(d.verdict.status, "slow");
}

TEST(StallProfile, WaitsLongerThanTheWindowAreScaledToIt) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  b.thread(100, 100);
  WindowBuilder w;
  w.times(100, 100, 2.0);
  w.wait(100, 100, HT_EV_SYSCALL_BLOCK, HT_NR_nanosleep, 9.0, 9, 0, 0);
  StallProfile p = build_stall_profile(b.s, w.o);
  ASSERT_EQ(p.mains.size(), 1u);
  EXPECT_NEAR(share(p.mains.front(), StallCause::Sleep), 0.75, 1e-6);
  EXPECT_NEAR(share(p.mains.front(), StallCause::OnCpu), 0.25, 1e-6);
}

TEST(StallProfile, NoThreadTimesNoProfile) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  b.thread(100, 100);
  WindowBuilder w;
  w.o.thread_times.clear();
  EXPECT_TRUE(build_stall_profile(b.s, w.o).empty());
}

// The aggregator's sums, from raw records as the ring buffer delivers them.
ht_syscall_event syscall_record(int tgid, int tid, uint64_t end_ns, uint64_t duration_ns, int64_t nr) {
  ht_syscall_event r{};
  r.hdr.type = HT_EV_SYSCALL_BLOCK;
  r.hdr.size = sizeof r;
  r.hdr.tgid = static_cast<uint32_t>(tgid);
  r.hdr.tid = static_cast<uint32_t>(tid);
  r.hdr.ts_ns = end_ns;
  r.nr = nr;
  r.duration_ns = duration_ns;
  r.fd = 5;
  r.kstack_id = -1;
  r.ustack_id = -1;
  return r;
}

TEST(WaitTotals, RecordsAreSummedByObjectAndWakerFilesByDirectoryAndClippedToTheWindow) {
  Aggregator a;
  a.set_window_start(kStart);
  TraceEvent wake;
  wake.type = HT_EV_WAKEUP;
  wake.tid = 100;
  wake.tgid = 100;
  wake.waker_tgid = 200;
  wake.waker_tid = 205;
  wake.ts_ns = kStart + kS;
  a.add(wake);
  // Began 2 s before the window: counted from its start.
  auto poll = syscall_record(100, 100, kStart + kS, 3 * kS, HT_NR_poll);
  poll.ret = 1;
  ASSERT_EQ(a.add_raw(&poll, sizeof poll), Aggregator::Raw::Added);
  for (int i = 0; i < 3; ++i) {
    auto read = syscall_record(200, 200, kStart + 2 * kS + i * 20'000'000ull, 15'000'000ull, HT_NR_read);
    read.obj_kind = HT_OBJ_FILE;
    read.obj_inode = 1000 + i;
    read.mnt_id = 40;
    std::string name = "train/" + std::to_string(i) + ".jpg";
    std::memcpy(read.file, name.data(), name.size());
    ASSERT_EQ(a.add_raw(&read, sizeof read), Aggregator::Raw::Added);
  }
  LiveObservation o = a.finish(kStart, kStart + kWindow, 4, 0);
  ASSERT_EQ(o.wait_totals[100].size(), 1u);
  const WaitTotal& p = o.wait_totals[100].front();
  EXPECT_EQ(p.sum_ns, kS);
  EXPECT_EQ(p.waker_tid, 205);
  EXPECT_EQ(p.waker_pid, 200);
  ASSERT_EQ(o.wait_totals[200].size(), 1u);
  const WaitTotal& r = o.wait_totals[200].front();
  EXPECT_EQ(r.count, 3u);
  EXPECT_EQ(r.sum_ns, 45'000'000u);
  EXPECT_EQ(r.waker_tid, 0);  // the wakeup was another thread's
  EXPECT_EQ(r.files, (std::vector<std::string>{"train/0.jpg", "train/1.jpg", "train/2.jpg"}));
}

}  // namespace
}  // namespace hangtrace
