// The live tracer's futex concern against real processes (root + BTF):
// futex waits and wakes, who woke whom, the stack map's lost walks, the
// futex2 calls. Each workload starts its activity only on a line written to
// a gate pipe after the tracer is attached, so counts are exact up to the
// kernel's doing. Harness: live_waits.h.
#include "live_waits.h"

namespace hangtrace::testing {
namespace {

TEST_P(LiveWaits, FutexPingPongWaitsWakesAndWakers) {
  HANGTRACE_REQUIRE_BPF();
  LiveOptions opt = wait_options({}, 0);  // stream every wait
  opt.futex_wake_sample_ns = 0;           // and every wake
  PingPongRun run;
  ASSERT_NO_FATAL_FAILURE(run_futex_pingpong(opt, twin(), run));
  LiveTracer& t = *run.tracer;
  const int pid = run.pid, a_tid = run.a_tid, b_tid = run.b_tid;
  const uint64_t a_word = run.a_word, b_word = run.b_word;
  const auto elapsed = run.elapsed;

  Collected got;
  auto waits_on = [&](uint64_t word, int tid) {
    std::vector<ht_futex_event> out;
    for (const auto& e : got.of_type<ht_futex_event>(HT_EV_FUTEX_WAIT, pid)) {
      if (e.uaddr == word && static_cast<int>(e.hdr.tid) == tid) out.push_back(e);
    }
    return out;
  };
  auto wakes_of = [&](uint64_t word, int tid) {
    std::vector<ht_futex_event> out;
    for (const auto& e : got.of_type<ht_futex_event>(HT_EV_FUTEX_WAKE, pid)) {
      if (e.uaddr == word && static_cast<int>(e.hdr.tid) == tid) out.push_back(e);
    }
    return out;
  };
  poll_until(t, got, [&] {
    return waits_on(a_word, a_tid).size() >= kRounds && waits_on(b_word, b_tid).size() >= kRounds &&
           wakes_of(a_word, b_tid).size() >= kRounds && wakes_of(b_word, a_tid).size() >= kRounds;
  });
  drain(t, got);

  auto a_waits = waits_on(a_word, a_tid), b_waits = waits_on(b_word, b_tid);
  auto a_wakes = wakes_of(b_word, a_tid), b_wakes = wakes_of(a_word, b_tid);
  std::cout << kRounds << " rounds in " << elapsed.count() << " ms; " << got.summary() << "\n"
            << "A waits " << a_waits.size() << ", B waits " << b_waits.size() << ", A wakes "
            << a_wakes.size() << ", B wakes " << b_wakes.size() << "\n";
  // Exact by construction (see the workload); a spurious futex wakeup could
  // only add a wait, never remove one.
  EXPECT_GE(a_waits.size(), static_cast<size_t>(kRounds));
  EXPECT_LE(a_waits.size(), static_cast<size_t>(kRounds + kRounds / 100));
  EXPECT_GE(b_waits.size(), static_cast<size_t>(kRounds));
  EXPECT_LE(b_waits.size(), static_cast<size_t>(kRounds + kRounds / 100));
  EXPECT_EQ(a_wakes.size(), static_cast<size_t>(kRounds));
  EXPECT_EQ(b_wakes.size(), static_cast<size_t>(kRounds));

  size_t with_kstack = 0, with_ustack = 0;
  uint64_t max_wait = 0;
  std::map<int32_t, size_t> ustack_errors;  // why a walk gave no stack, for the log
  for (const auto& e : a_waits) {
    EXPECT_EQ(e.op, static_cast<uint32_t>(FUTEX_WAIT_PRIVATE));
    EXPECT_EQ(e.timeout_ns, 10'000'000'000ull);  // the relative 10 s as given
    EXPECT_EQ(e.ret, 0);
    if (e.kstack_id >= 0) ++with_kstack;
    if (e.ustack_id >= 0)
      ++with_ustack;
    else
      ++ustack_errors[e.ustack_id];
    max_wait = std::max<uint64_t>(max_wait, e.duration_ns);
  }
  // A wait can be woken between queueing itself and sleeping (the wake's
  // sched_waking then finds it still on CPU): it returns 0 having never
  // slept, no stack taken, and blocked for 0 ns. Seen in ~1 run in 10.
  size_t never_slept = 0;
  for (const auto& e : b_waits) {
    EXPECT_EQ(e.op, static_cast<uint32_t>(FUTEX_WAIT_PRIVATE));
    EXPECT_EQ(e.timeout_ns, 0u);
    if (e.kstack_id == -ENOENT) {
      ++never_slept;
      EXPECT_EQ(e.duration_ns, 0u);
    } else {
      EXPECT_GT(e.duration_ns, 0u);
    }
  }
  EXPECT_LE(never_slept, b_waits.size() / 100);
  for (const auto& e : a_wakes) {
    EXPECT_EQ(e.op, static_cast<uint32_t>(FUTEX_WAKE_PRIVATE));
    EXPECT_EQ(e.ret, 1);
  }
  std::cout << "A waits with kernel stack " << with_kstack << ", user stack " << with_ustack
            << "; longest wait " << max_wait / 1000 << " us; stacks lost " << t.counter(HT_CNT_STACKS_LOST)
            << "\n";
  for (const auto& [err, n] : ustack_errors) std::cout << "  user stack error " << err << " x" << n << "\n";
  // Every wait slept (nobody changes the words), so each had a switch-out.
  EXPECT_GE(with_kstack, a_waits.size() * 9 / 10);
  EXPECT_GE(with_ustack, a_waits.size() * 9 / 10);
  int32_t some_kstack = -1;
  for (const auto& e : a_waits) {
    if (e.kstack_id >= 0) some_kstack = e.kstack_id;
  }
  ASSERT_GE(some_kstack, 0);
  EXPECT_GE(t.stack(some_kstack).size(), 3u);

  // Who woke whom, counted in kernel, and streamed (rate-limited).
  auto counts = read_wakeup_counts();
  ASSERT_TRUE(counts.ok()) << counts.error();
  uint64_t a_woke_b = 0, b_woke_a = 0;
  for (const auto& c : *counts) {
    if (c.waker_tid == a_tid && c.wakee_tid == b_tid) {
      a_woke_b = c.count;
      EXPECT_EQ(c.waker_tgid, pid);
      EXPECT_EQ(c.wakee_tgid, pid);
      EXPECT_EQ(c.waker_comm, "repro_live_fute");
    }
    if (c.waker_tid == b_tid && c.wakee_tid == a_tid) b_woke_a = c.count;
  }
  std::cout << "in-kernel wakeup counts: A->B " << a_woke_b << ", B->A " << b_woke_a << " (" << counts->size()
            << " pairs)\n";
  // Not exactly kRounds: a FUTEX_WAKE can dequeue a waiter that has queued
  // itself but not yet slept; it then sees its queue entry gone, skips
  // schedule() and runs on, and the waker's try_to_wake_up finds it running:
  // a wake with no sched_waking (seen once in ~10 runs).
  EXPECT_GE(a_woke_b, static_cast<uint64_t>(kRounds * 95 / 100));
  EXPECT_GE(b_woke_a, static_cast<uint64_t>(kRounds * 95 / 100));
  size_t a_to_b_events = 0;
  for (const auto& e : got.of_type<ht_wakeup_event>(HT_EV_WAKEUP, pid)) {
    if (static_cast<int>(e.waker_tid) == a_tid && static_cast<int>(e.hdr.tid) == b_tid) {
      ++a_to_b_events;
      EXPECT_EQ(static_cast<int>(e.waker_tgid), pid);
    }
  }
  // At most one per 10 ms per pair (+1 for the first, +1 for a cross-CPU race).
  std::cout << "A->B wakeup events " << a_to_b_events << "\n";
  EXPECT_GE(a_to_b_events, 1u);
  EXPECT_LE(a_to_b_events, static_cast<size_t>(elapsed.count() / 10 + 3));
  EXPECT_EQ(t.counter(HT_CNT_DROPPED), 0u);
}

// Wakeups are counted in batches per wakee (tp_btf twin): a batch still
// open when the counts are read is added by the flush iterator (here: A and
// B are alive, asleep, their last batches open), one whose thread exited was
// added at its exit (FutexPingPongWaitsWakesAndWakers: they have exited).
// 1000 rounds take ~10 ms, about one batch: without either flush most of the
// count would be missing.
TEST_P(LiveWaits, WakeCountsIncludeTheOpenBatchesOfLiveThreads) {
  HANGTRACE_REQUIRE_BPF();
  PingPongRun run;
  ASSERT_NO_FATAL_FAILURE(run_futex_pingpong(wait_options({}, 5'000'000), twin(), run, /*hold=*/true));
  ASSERT_TRUE(
      std::filesystem::exists("/proc/" + std::to_string(run.pid) + "/task/" + std::to_string(run.a_tid)));
  uint64_t a_woke_b = wakeups_counted(run.a_tid, run.b_tid);
  uint64_t b_woke_a = wakeups_counted(run.b_tid, run.a_tid);
  std::cout << kRounds << " rounds in " << run.elapsed.count() << " ms; counted A->B " << a_woke_b
            << ", B->A " << b_woke_a << "\n";
  EXPECT_GE(a_woke_b, static_cast<uint64_t>(kRounds * 95 / 100));
  EXPECT_LE(a_woke_b, static_cast<uint64_t>(kRounds));
  EXPECT_GE(b_woke_a, static_cast<uint64_t>(kRounds * 95 / 100));
  // Read again: a flushed batch is not added twice.
  EXPECT_EQ(wakeups_counted(run.a_tid, run.b_tid), a_woke_b);
  EXPECT_EQ(wakeups_counted(run.b_tid, run.a_tid), b_woke_a);
}

// A stack whose bucket in the kernel's stack map another stack holds is
// lost (-EEXIST) and counted: with a one-bucket map, every stack after the
// first distinct one is.
TEST_P(LiveWaits, StacksLostToBucketCollisionsAreCounted) {
  HANGTRACE_REQUIRE_BPF();
  LiveOptions opt = wait_options({}, 0);
  opt.stack_map_entries = 1;
  PingPongRun run;
  ASSERT_NO_FATAL_FAILURE(run_futex_pingpong(opt, twin(), run));
  LiveTracer& t = *run.tracer;
  Collected got;
  poll_until(t, got,
             [&] { return got.of_type<ht_futex_event>(HT_EV_FUTEX_WAIT, run.pid).size() >= kRounds; });
  drain(t, got);
  // Every stack field of every record: the walks the kernel made for them.
  std::set<int32_t> ids;
  size_t without = 0;
  auto tally = [&](int32_t id) {
    if (id >= 0) ids.insert(id);
    if (id == -EEXIST) ++without;
  };
  for (const auto& e : got.of_type<ht_futex_event>(HT_EV_FUTEX_WAIT)) tally(e.kstack_id), tally(e.ustack_id);
  for (const auto& e : got.of_type<ht_syscall_event>(HT_EV_SYSCALL_BLOCK))
    tally(e.kstack_id), tally(e.ustack_id);
  for (const auto& e : got.of_type<ht_wakeup_event>(HT_EV_WAKEUP))
    tally(e.waker_kstack_id), tally(e.waker_ustack_id);
  uint64_t lost = t.counter(HT_CNT_STACKS_LOST);
  std::cout << got.summary() << "\nstack ids in use " << ids.size() << ", record stacks lost " << without
            << ", counted " << lost << "\n";
  EXPECT_LE(ids.size(), 1u);                         // one bucket
  EXPECT_GE(without, static_cast<size_t>(kRounds));  // A's waits alone: kernel and user stacks differ
  // Each lost walk is in one record (a failed walk is never reused), or in a
  // call still in progress: the main thread's read of the gate slept, and
  // its kernel stack was walked then.
  EXPECT_GE(lost, without);
  EXPECT_LE(lost, without + 2);
}

// By default wakes are sampled in kernel (one record per thread and word per
// 10 ms): a ping-pong's waits all arrive, its wakes do not flood the ring.
TEST_P(LiveWaits, FutexWakesAreSampledByDefault) {
  HANGTRACE_REQUIRE_BPF();
  PingPongRun run;
  ASSERT_NO_FATAL_FAILURE(run_futex_pingpong(wait_options({}, 0), twin(), run));
  LiveTracer& t = *run.tracer;
  const int pid = run.pid, a_tid = run.a_tid, b_tid = run.b_tid;
  const uint64_t a_word = run.a_word;
  const auto elapsed = run.elapsed;

  Collected got;
  auto count = [&](uint32_t type, uint64_t word, int tid) {
    size_t n = 0;
    for (const auto& e : got.of_type<ht_futex_event>(type, pid)) {
      if (e.uaddr == word && static_cast<int>(e.hdr.tid) == tid) ++n;
    }
    return n;
  };
  poll_until(t, got, [&] { return count(HT_EV_FUTEX_WAIT, a_word, a_tid) >= kRounds; });
  drain(t, got);
  size_t b_wakes = count(HT_EV_FUTEX_WAKE, a_word, b_tid);
  std::cout << kRounds << " rounds in " << elapsed.count() << " ms; A waits "
            << count(HT_EV_FUTEX_WAIT, a_word, a_tid) << ", B's wakes of A streamed " << b_wakes << "\n";
  EXPECT_GE(count(HT_EV_FUTEX_WAIT, a_word, a_tid), static_cast<size_t>(kRounds));
  // At least the first; at most one per 10 ms (+1 for the first).
  EXPECT_GE(b_wakes, 1u);
  EXPECT_LE(b_wakes, static_cast<size_t>(elapsed.count() / 10 + 2));
  EXPECT_LT(b_wakes, static_cast<size_t>(kRounds));
  EXPECT_EQ(t.counter(HT_CNT_DROPPED), 0u);
}

TEST_P(LiveWaits, FutexWaitvAndFutexWaitAreWaits) {
  HANGTRACE_REQUIRE_BPF();
  GatedRun run;
  int pid = 0;
  ASSERT_NO_FATAL_FAILURE(start_traced("repro_live_futex2", {}, 10'000'000, true, run, pid));
  Workload& w = *run.workload;
  LiveTracer& t = *run.tracer;
  uint64_t word = run.ready["word"];

  run.gate->open();
  auto done = numeric_fields<uint64_t>(w.wait_for_line("DONE", 30s));
  ASSERT_EQ(done.size(), 2u);
  // Both syscalls exist since 6.7 (futex_wait) / 5.16 (futex_waitv).
  if (done["waitv"] == ENOSYS || done["wait"] == ENOSYS)
    GTEST_SKIP() << "kernel lacks futex_waitv/futex_wait";
  ASSERT_EQ(done["waitv"], static_cast<uint64_t>(ETIMEDOUT));
  ASSERT_EQ(done["wait"], static_cast<uint64_t>(ETIMEDOUT));

  Collected got;
  poll_until(t, got, [&] { return got.of_type<ht_futex_event>(HT_EV_FUTEX_WAIT, pid).size() >= 2; });
  drain(t, got);
  auto waits = got.of_type<ht_futex_event>(HT_EV_FUTEX_WAIT, pid);
  ASSERT_EQ(waits.size(), 2u) << got.summary();
  const uint32_t flags = 0x02 | 128;          // FUTEX2_SIZE_U32 | FUTEX2_PRIVATE
  EXPECT_EQ(waits[0].op, HT_FUTEX_OP_WAITV);  // futex_waitv's flags argument is 0
  EXPECT_EQ(waits[1].op, HT_FUTEX_OP_WAIT2 | flags);
  for (const auto& e : waits) {
    std::cout << "op " << std::hex << e.op << std::dec << " duration " << e.duration_ns / 1000
              << " us, timeout " << e.timeout_ns << " ns (absolute), ret " << e.ret << "\n";
    EXPECT_EQ(e.uaddr, word);
    EXPECT_EQ(e.ret, -ETIMEDOUT);
    EXPECT_GE(e.duration_ns, 19'000'000u);  // absolute deadline 20 ms after a clock read just before
    EXPECT_GT(e.timeout_ns, 20'000'000u);   // CLOCK_MONOTONIC deadline, raw
    EXPECT_GE(e.kstack_id, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Twins, LiveWaits, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? "raw_tp" : "tp_btf";
                         });

}  // namespace
}  // namespace hangtrace::testing
