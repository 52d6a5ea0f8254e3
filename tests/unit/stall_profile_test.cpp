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
  b.running(100, 100);  // it computes, as the window saw
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
  b.running(300, 300);  // main hands out the work
  for (int tid = 301; tid <= 303; ++tid) b.thread(300, tid);
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

// A synchronize call's record comes when it returns, after the waits it
// slept in; a thread's short waits can come after it (summed in the kernel
// past the call's end). Either way the waits inside it are marked.
TEST(WaitTotals, WaitsInsideAGpuHostWaitAreMarkedWhicheverRecordComesFirst) {
  Aggregator a;
  a.set_window_start(kStart);
  auto futex_wait = [&](uint64_t end_ns, uint64_t duration_ns, uint64_t uaddr) {
    ht_futex_event r{};
    r.hdr.type = HT_EV_FUTEX_WAIT;
    r.hdr.size = sizeof r;
    r.hdr.tgid = 100;
    r.hdr.tid = 100;
    r.hdr.ts_ns = end_ns;
    r.uaddr = uaddr;
    r.duration_ns = duration_ns;
    r.kstack_id = -1;
    r.ustack_id = -1;
    ASSERT_EQ(a.add_raw(&r, sizeof r), Aggregator::Raw::Added);
  };
  futex_wait(kStart + 500'000'000ull, 300'000'000ull, 0x9000);   // before the call
  futex_wait(kStart + 1400'000'000ull, 400'000'000ull, 0x7000);  // inside it
  TraceEvent call;
  call.type = HT_EV_GPU_CALL;
  call.tgid = 100;
  call.tid = 100;
  call.ts_ns = kStart + 1500'000'000ull;
  call.gpu_call.pid = 100;
  call.gpu_call.tid = 100;
  call.gpu_call.fn = HT_GPU_STREAM_SYNCHRONIZE;
  call.gpu_call.start_ns = kStart + 900'000'000ull;
  call.gpu_call.end_ns = kStart + 1500'000'000ull;
  a.add(call);
  // Summed in the kernel, sent after the call's record.
  ht_short_waits_event sw{};
  sw.hdr.type = HT_EV_SHORT_WAITS;
  sw.hdr.size = sizeof sw;
  sw.hdr.tgid = 100;
  sw.hdr.tid = 100;
  sw.hdr.ts_ns = kStart + 1450'000'000ull;
  sw.waits.nr = HT_NR_futex;
  sw.waits.object = 0x7004;
  sw.waits.fd = -1;
  sw.waits.count = 5;
  sw.waits.futex = 1;
  sw.waits.sum_ns = 25'000'000ull;
  ASSERT_EQ(a.add_raw(&sw, sizeof sw), Aggregator::Raw::Added);
  // A copy that does not wait for the device is no host wait.
  call.gpu_call.fn = HT_GPU_LAUNCH_KERNEL;
  call.gpu_call.start_ns = kStart;
  a.add(call);
  LiveObservation o = a.finish(kStart, kStart + kWindow, 4, 0);
  ASSERT_EQ(o.wait_totals[100].size(), 3u);
  for (const WaitTotal& w : o.wait_totals[100]) {
    const uint64_t expected = w.object == 0x7000 ? 400'000'000ull : w.object == 0x7004 ? 25'000'000ull : 0u;
    EXPECT_EQ(w.in_gpu_ns, expected) << std::hex << w.object;
  }
  ASSERT_EQ(o.gpu_host_waits.count(100), 1u);
  EXPECT_EQ(o.gpu_host_waits[100].calls, 1u);
  EXPECT_EQ(o.gpu_host_waits[100].ns, 600'000'000ull);
  EXPECT_EQ(o.blocked[100].size(), 2u);  // the GPU call adds no blocked interval
}

// main 100 synchronizes for 4 s of its 8: 1.5 s asleep in a futex the
// driver's thread 101 ends, 2.5 s spinning; then one more call still in
// progress for the last second. All of it is "gpu", none on-cpu or lock.
TEST(StallProfile, TimeInGpuHostWaitsIsGpuWhetherTheThreadSleptOrSpun) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  b.thread(100, 100);
  b.thread(100, 101);
  WindowBuilder w;
  w.times(100, 100, 5.0);
  WaitTotal& f = w.futex(100, 100, 0x7000, 2.0, 20, 100, 101);
  f.in_gpu_ns = 1'500'000'000ull;
  GpuHostWaits& h = w.o.gpu_host_waits[100];
  h.pid = 100;
  h.calls = 10;
  h.ns = 4 * kS;
  h.ns_by_fn[HT_GPU_STREAM_SYNCHRONIZE] = 4 * kS;
  StallProfile p = build_stall_profile(b.s, w.o);
  ASSERT_EQ(p.mains.size(), 1u);
  EXPECT_NEAR(share(p.mains.front(), StallCause::Gpu), 0.5, 1e-6);
  EXPECT_NEAR(share(p.mains.front(), StallCause::OnCpu), 2.5 / 8, 1e-6);
  EXPECT_NEAR(share(p.mains.front(), StallCause::Lock), 0.5 / 8, 1e-6);
  EXPECT_NEAR(share(p.mains.front(), StallCause::Other), 1.0 / 8, 1e-6);
  const CauseShare* gpu = p.mains.front().cause(StallCause::Gpu);
  ASSERT_NE(gpu, nullptr);
  ASSERT_FALSE(gpu->objects.empty());
  EXPECT_EQ(gpu->objects.front().what, "cuStreamSynchronize");

  GpuThreadState open;
  open.pid = 100;
  open.tid = 100;
  open.in_fn = HT_GPU_STREAM_SYNCHRONIZE;
  open.in_since_ns = kStart + kWindow - kS;
  w.o.gpu.threads.push_back(open);
  p = build_stall_profile(b.s, w.o);
  EXPECT_NEAR(share(p.mains.front(), StallCause::Gpu), 5.0 / 8, 1e-6);
  EXPECT_NEAR(share(p.mains.front(), StallCause::OnCpu), 2.5 / 8, 1e-6);
  EXPECT_NEAR(share(p.mains.front(), StallCause::Other), 0, 1e-6);
}

}  // namespace
}  // namespace hangtrace
