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
  // A read that slept waiting for the peer had its kernel stack taken then
  // (unless the stack map had no room: counted); one that found the byte
  // already there never slept and has none. How many sleep is the
  // scheduler's business; that some do is not (the peer answers only after
  // the parent's write wakes it).
  size_t slept = 0, slept_without_stack = 0;
  for (const auto& e : pr) {
    if (e.duration_ns == 0) {
      EXPECT_EQ(e.kstack_id, -ENOENT);
      continue;
    }
    ++slept;
    slept_without_stack += e.kstack_id < 0;
  }
  std::cout << "parent reads that slept: " << slept << " (by its own count " << run.reads_slept
            << "), of them without a kernel stack " << slept_without_stack << "\n";
  EXPECT_GT(slept, 0u);
  EXPECT_EQ(slept, run.reads_slept);
  EXPECT_LE(slept_without_stack, t.counter(HT_CNT_STACKS_LOST));
  EXPECT_EQ(t.counter(HT_CNT_DROPPED), 0u);
}

// With a threshold (here 1 ns: every call that slept at all), no entry hook
// runs: a call starts at its first sleep, read from the thread's saved
// registers, and its fd is resolved at exit. Every read of the ping-pong
// that slept is one (the parent counts them: its voluntary context switches;
// how many sleep is the scheduler's business); the writes never wait for room.
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
  poll_until(t, got, [&] { return parent_reads().size() >= run.reads_slept; });
  drain(t, got);
  auto reads = parent_reads();
  std::cout << got.summary() << "\nparent reads that slept: " << reads.size() << " of " << kRounds
            << " (by its own count " << run.reads_slept << ")\n";
  EXPECT_GT(run.reads_slept, 0u);
  EXPECT_EQ(reads.size(), run.reads_slept);
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

// Waits under the threshold are summed in the kernel per thread, syscall,
// object and waker (HT_EV_SHORT_WAITS): the parent's N reads of ~2 ms, each
// ended by the child's write (the waker, from the child's wake batch -- the
// tp_btf twin's; the raw twin has none), and the child's N timed-out sleeps.
// The 20 ms sleep each takes after them is reported on its own and sends
// what was pending, so nothing is left in the kernel.
TEST_P(LiveWaits, ShortWaitsAreSummedWithTheirWaker) {
  HANGTRACE_REQUIRE_BPF();
  constexpr int kWaits = 200;
  constexpr long kIntervalUs = 2000;
  GatedRun run;
  ASSERT_NO_FATAL_FAILURE(
      start_gated("repro_live_short_waits", {std::to_string(kWaits), std::to_string(kIntervalUs)}, run));
  const int parent = static_cast<int>(run.ready["parent"]), child = static_cast<int>(run.ready["child"]);
  const int fd = static_cast<int>(run.ready["fd"]);
  const std::string link =
      std::filesystem::read_symlink("/proc/" + std::to_string(parent) + "/fd/" + std::to_string(fd));
  ASSERT_EQ(link.rfind("pipe:[", 0), 0u) << link;
  const uint64_t inode = std::stoull(link.substr(6));
  LiveOptions opt = wait_options({parent, child}, 5'000'000);
  opt.short_waits = true;
  ASSERT_NO_FATAL_FAILURE(start_tracer(opt, run));
  expect_wait_hooks_active(*run.tracer, twin(), opt.min_block_ns);
  LiveTracer& t = *run.tracer;
  run.gate->open();
  auto done = numeric_fields<uint64_t>(run.workload->wait_for_line("DONE", 30s));
  ASSERT_EQ(done.count("reads_slept"), 1u) << "the reads never finished";
  // The parent's reads that slept, by its own count: every one of them
  // waited for the child's next write (on an idle machine all of them: the
  // child sleeps first; on a busy one the byte may be there already).
  const uint64_t reads_slept = done["reads_slept"];

  Collected got;
  struct Sum {
    uint64_t count = 0, sum_ns = 0, bucketed = 0, records = 0, by_child = 0, timed_out = 0;
  };
  auto sum = [&](int tgid, long nr) {
    Sum out;
    for (const auto& e : got.of_type<ht_short_waits_event>(HT_EV_SHORT_WAITS, tgid)) {
      const ht_short_waits& w = e.waits;
      if (w.nr != nr || w.futex) continue;
      ++out.records;
      out.count += w.count;
      out.sum_ns += w.sum_ns;
      for (uint32_t b : w.buckets) out.bucketed += b;
      EXPECT_LT(w.sum_ns, 20'000'000u) << "a record sums at most short_wait_flush_ns";
      if (w.timed_out) out.timed_out += w.count;
      if (nr == kNrRead) {
        EXPECT_EQ(w.fd, fd);
        EXPECT_EQ(w.obj_kind, HT_OBJ_PIPE);
        EXPECT_EQ(w.object, inode);
      }
      if (w.waker_tgid == static_cast<uint32_t>(child) && w.waker_tid == static_cast<uint32_t>(child))
        out.by_child += w.count;
      else if (!GetParam() && !w.timed_out)
        std::cout << "read woken by " << w.waker_tgid << "/" << w.waker_tid << " x" << w.count << "\n";
    }
    return out;
  };
  auto sleeps = [&](int tgid) {
    Sum a = sum(tgid, kNrNanosleep), b = sum(tgid, kNrClockNanosleep);
    a.count += b.count;
    a.timed_out += b.timed_out;
    return a;
  };
  // On a busy machine a few waits outlast the threshold: reported one by one.
  // A read of the pipe counts however long it took (under a sanitizer and
  // load some took over 20 ms); a sleep only under 20 ms, the length of the
  // one each process takes after the loop.
  auto reported = [&](int tgid, std::initializer_list<long> nrs, bool pipe_only) {
    uint64_t n = 0;
    for (const auto& e : got.of_type<ht_syscall_event>(HT_EV_SYSCALL_BLOCK, tgid)) {
      if (std::find(nrs.begin(), nrs.end(), e.nr) == nrs.end()) continue;
      n += pipe_only ? e.fd == fd : e.duration_ns < 20'000'000;
    }
    return n;
  };
  auto long_reads = [&] { return reported(parent, {kNrRead}, true); };
  auto long_sleeps = [&] { return reported(child, {kNrNanosleep, kNrClockNanosleep}, false); };
  poll_until(t, got, [&] {
    return sum(parent, kNrRead).count + long_reads() >= reads_slept - 1 &&
           sleeps(child).count + long_sleeps() >= kWaits - 1;
  });
  drain(t, got);
  Sum reads = sum(parent, kNrRead), slept = sleeps(child);
  const uint64_t all_reads = reads.count + long_reads(), all_sleeps = slept.count + long_sleeps();
  std::cout << got.summary() << "\nparent reads: " << reads.count << " in " << reads.records << " records, "
            << reads.sum_ns / 1000 << " us, " << reads.by_child
            << " woken by the child; child sleeps: " << slept.count << ", " << slept.timed_out
            << " timed out; reported on their own: " << long_reads() << " reads, " << long_sleeps()
            << " sleeps; reads that slept by the parent's count: " << reads_slept << "\n";
  // Every read that slept is counted (summed, or reported on its own).
  EXPECT_GT(reads_slept, static_cast<uint64_t>(kWaits / 2));
  EXPECT_GE(all_reads, reads_slept - 1);
  EXPECT_LE(all_reads, reads_slept);
  EXPECT_GE(reads.count, reads_slept / 2);
  EXPECT_EQ(reads.bucketed, reads.count);
  EXPECT_GE(reads.sum_ns, reads.count * kIntervalUs * 1000 * 7 / 10);
  EXPECT_LE(reads.sum_ns, reads.count * kIntervalUs * 1000 * 2);
  EXPECT_LT(reads.records, reads.count / 4) << "summed, not one record per wait";
  EXPECT_EQ(reads.timed_out, 0u);
  if (GetParam())
    EXPECT_EQ(reads.by_child, 0u) << "the raw twin keeps no wake batches";
  else
    EXPECT_GE(reads.by_child, reads.count * 95 / 100);
  EXPECT_GE(all_sleeps, static_cast<uint64_t>(kWaits - 1));
  EXPECT_GE(slept.count, static_cast<uint64_t>(kWaits / 2));
  EXPECT_EQ(slept.timed_out, slept.count);
  // The parent's 20 ms sleep is reported on its own.
  size_t final_sleeps = 0;
  for (const auto& e : got.of_type<ht_syscall_event>(HT_EV_SYSCALL_BLOCK, parent))
    final_sleeps += (e.nr == kNrNanosleep || e.nr == kNrClockNanosleep) && e.duration_ns >= 20'000'000;
  EXPECT_EQ(final_sleeps, 1u) << got.summary();
  EXPECT_EQ(t.counter(HT_CNT_DROPPED), 0u);
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
