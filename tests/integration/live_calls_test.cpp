// The live tracer's blocking-call concern against real processes (root +
// BTF): pipe reads and writes with the fd's object on both sides, calls
// tracked from their first sleep, the block threshold, and the in-kernel
// filter keeping untraced processes out. Harness: live_waits.h.
#include "live_waits.h"

namespace hangtrace::testing {
namespace {

TEST_P(LiveWaits, PipePingPongNamesThePipeOnBothSides) {
  HANGTRACE_REQUIRE_BPF();
  PipePingPongRun run;
  ASSERT_NO_FATAL_FAILURE(run_pipe_pingpong(0, twin(), run));
  LiveTracer& t = *run.tracer;
  const int parent = run.parent, child = run.child;

  Collected got;
  auto calls = [&](int tgid, long nr, int fd) {
    std::vector<ht_syscall_event> out;
    for (const auto& e : got.of_type<ht_syscall_event>(HT_EV_SYSCALL_BLOCK, tgid)) {
      if (e.nr == nr && e.fd == fd) out.push_back(e);
    }
    return out;
  };
  const int p2c_r = run.p2c_r, p2c_w = run.p2c_w, c2p_r = run.c2p_r, c2p_w = run.c2p_w;
  // The child's first read began before the tracer attached: kRounds - 1.
  poll_until(t, got, [&] {
    return calls(parent, kNrWrite, p2c_w).size() >= kRounds &&
           calls(parent, kNrRead, c2p_r).size() >= kRounds &&
           calls(child, kNrRead, p2c_r).size() >= kRounds - 1 &&
           calls(child, kNrWrite, c2p_w).size() >= kRounds;
  });
  drain(t, got);
  auto pw = calls(parent, kNrWrite, p2c_w), pr = calls(parent, kNrRead, c2p_r);
  auto cr = calls(child, kNrRead, p2c_r), cw = calls(child, kNrWrite, c2p_w);
  std::cout << got.summary() << "\nparent writes " << pw.size() << ", parent reads " << pr.size()
            << ", child reads " << cr.size() << ", child writes " << cw.size() << "\n";
  EXPECT_EQ(pw.size(), static_cast<size_t>(kRounds));
  EXPECT_EQ(pr.size(), static_cast<size_t>(kRounds));
  EXPECT_GE(cr.size(), static_cast<size_t>(kRounds - 1));
  EXPECT_LE(cr.size(), static_cast<size_t>(kRounds));
  EXPECT_EQ(cw.size(), static_cast<size_t>(kRounds));
  ASSERT_FALSE(pw.empty());
  ASSERT_FALSE(cr.empty());
  ASSERT_FALSE(pr.empty());
  ASSERT_FALSE(cw.empty());

  // One pipe, one inode, seen from both ends and both processes.
  uint64_t down = pw[0].obj_inode, up = pr[0].obj_inode;
  EXPECT_NE(down, 0u);
  EXPECT_NE(up, 0u);
  EXPECT_NE(down, up);
  for (const auto* v : {&pw, &cr}) {
    for (const auto& e : *v) {
      EXPECT_EQ(e.obj_kind, HT_OBJ_PIPE);
      EXPECT_EQ(e.obj_inode, down);
      EXPECT_EQ(e.args[2], 1u);  // one byte
    }
  }
  for (const auto* v : {&pr, &cw}) {
    for (const auto& e : *v) {
      EXPECT_EQ(e.obj_kind, HT_OBJ_PIPE);
      EXPECT_EQ(e.obj_inode, up);
      EXPECT_EQ(e.ret, 1);
    }
  }
  // The reads slept waiting for the peer: their kernel stacks were taken.
  size_t slept = 0;
  for (const auto& e : pr) slept += e.kstack_id >= 0;
  std::cout << "parent reads with a kernel stack: " << slept << "\n";
  EXPECT_GE(slept, pr.size() / 2);
  EXPECT_EQ(t.counter(HT_CNT_DROPPED), 0u);
}

// With a threshold (here 1 ns: every call that slept at all), no entry hook
// runs: a call starts at its first sleep, read from the thread's saved
// registers, and its fd is resolved at exit. The reads of the ping-pong
// sleep (about half of them: with two CPUs the byte is often there already);
// the writes never wait for room.
TEST_P(LiveWaits, CallsStartAtTheirFirstSleepWithoutAnEntryHook) {
  HANGTRACE_REQUIRE_BPF();
  PipePingPongRun run;
  ASSERT_NO_FATAL_FAILURE(run_pipe_pingpong(1, twin(), run));
  LiveTracer& t = *run.tracer;
  const int parent = run.parent, child = run.child, c2p_r = run.c2p_r;
  Collected got;
  auto parent_reads = [&] {
    std::vector<ht_syscall_event> out;
    for (const auto& e : got.of_type<ht_syscall_event>(HT_EV_SYSCALL_BLOCK, parent))
      if (e.nr == kNrRead && e.fd == c2p_r) out.push_back(e);
    return out;
  };
  poll_until(t, got, [&] { return parent_reads().size() >= kRounds / 4; });
  drain(t, got);
  auto reads = parent_reads();
  std::cout << got.summary() << "\nparent reads that slept: " << reads.size() << " of " << kRounds << "\n";
  EXPECT_GE(reads.size(), static_cast<size_t>(kRounds / 4));
  EXPECT_LE(reads.size(), static_cast<size_t>(kRounds));
  for (const auto& e : reads) {
    EXPECT_EQ(e.obj_kind, HT_OBJ_PIPE);  // resolved at exit
    EXPECT_EQ(e.obj_inode, reads[0].obj_inode);
    EXPECT_NE(e.obj_inode, 0u);
    EXPECT_EQ(e.args[2], 1u);  // the arguments, read from the saved registers at the first sleep
    EXPECT_EQ(e.ret, 1);
    EXPECT_GT(e.duration_ns, 0u);
    EXPECT_GE(e.kstack_id, 0);
  }
  // Every call reported slept, and a call that slept is one of the
  // dispatcher's: nothing but reads and writes of the two pipes.
  for (int tgid : {parent, child}) {
    for (const auto& e : got.of_type<ht_syscall_event>(HT_EV_SYSCALL_BLOCK, tgid)) {
      EXPECT_TRUE(e.nr == kNrRead || e.nr == kNrWrite) << "nr " << e.nr;
      EXPECT_GT(e.duration_ns, 0u);
    }
  }
  EXPECT_EQ(t.counter(HT_CNT_DROPPED), 0u);
}

TEST_P(LiveWaits, SleepAboveThresholdIsOneBlockingCall) {
  HANGTRACE_REQUIRE_BPF();
  GatedRun run;
  int pid = 0;
  ASSERT_NO_FATAL_FAILURE(start_traced("repro_live_sleep", {}, 10'000'000, true, run, pid));
  Workload& w = *run.workload;
  LiveTracer& t = *run.tracer;

  run.gate->open();
  ASSERT_FALSE(w.wait_for_line("DONE", 30s).empty());
  Collected got;
  auto sleeps = [&] {
    std::vector<ht_syscall_event> out;
    for (const auto& e : got.of_type<ht_syscall_event>(HT_EV_SYSCALL_BLOCK, pid)) {
      if (e.nr == kNrNanosleep || e.nr == kNrClockNanosleep) out.push_back(e);
    }
    return out;
  };
  poll_until(t, got, [&] { return !sleeps().empty(); });
  drain(t, got);
  auto s = sleeps();
  ASSERT_EQ(s.size(), 1u) << got.summary();
  std::cout << "sleep: nr " << s[0].nr << " duration " << s[0].duration_ns / 1000 << " us, ret " << s[0].ret
            << "\n";
  EXPECT_GE(s[0].duration_ns, 50'000'000u);
  EXPECT_LT(s[0].duration_ns, 500'000'000u);
  EXPECT_EQ(s[0].ret, 0);
  EXPECT_EQ(s[0].fd, -1);
  EXPECT_EQ(s[0].obj_kind, HT_OBJ_UNKNOWN);
  EXPECT_GE(s[0].kstack_id, 0);
  EXPECT_GE(s[0].ustack_id, 0);
  EXPECT_GE(t.stack(s[0].kstack_id).size(), 3u);
  // Nothing else of the sleeper blocked 10 ms after attach (the gate read
  // began before it, the DONE write does not block).
  EXPECT_EQ(got.of_type<ht_syscall_event>(HT_EV_SYSCALL_BLOCK, pid).size(), 1u) << got.summary();
  EXPECT_TRUE(got.of_type<ht_futex_event>(HT_EV_FUTEX_WAIT, pid).empty());
}

TEST_P(LiveWaits, UntracedProcessProducesNothing) {
  HANGTRACE_REQUIRE_BPF();
  GatedRun run;
  int pid = 0;
  ASSERT_NO_FATAL_FAILURE(start_traced("repro_live_futex_pingpong", {std::to_string(kRounds)}, 0,
                                       /*traced=*/false, run, pid));  // traces nobody
  Workload& w = *run.workload;
  LiveTracer& t = *run.tracer;

  run.gate->open();
  auto done = numeric_fields<uint64_t>(w.wait_for_line("DONE", 30s));
  ASSERT_EQ(done.size(), 2u);
  Collected got;
  drain(t, got, 500ms);
  EXPECT_EQ(got.count_tgid(pid), 0u) << got.summary();
  EXPECT_TRUE(got.of_type<ht_futex_event>(HT_EV_FUTEX_WAIT).empty()) << got.summary();
  EXPECT_TRUE(got.of_type<ht_futex_event>(HT_EV_FUTEX_WAKE).empty()) << got.summary();
  EXPECT_TRUE(got.of_type<ht_syscall_event>(HT_EV_SYSCALL_BLOCK).empty()) << got.summary();
  EXPECT_TRUE(got.of_type<ht_wakeup_event>(HT_EV_WAKEUP).empty()) << got.summary();
  auto counts = read_wakeup_counts();
  ASSERT_TRUE(counts.ok()) << counts.error();
  EXPECT_TRUE(counts->empty()) << counts->size() << " wakeup pairs counted";
}

INSTANTIATE_TEST_SUITE_P(Twins, LiveWaits, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? "raw_tp" : "tp_btf";
                         });

}  // namespace
}  // namespace hangtrace::testing
