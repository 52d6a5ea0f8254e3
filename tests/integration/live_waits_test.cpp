// The live tracer's wait concerns against real processes (root + BTF): futex
// waits and wakes, who woke whom, blocking syscalls with the fd's object, the
// block threshold, and the in-kernel filter keeping untraced processes out.
// Each workload starts its activity only on a line written to a gate pipe
// after the tracer is attached, so counts are exact up to the kernel's doing.
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "hangtrace/abi.h"
#include "hangtrace/syscall_nr.h"
#include "live_sched.h"
#include "live_tracer.h"
#include "live_records.h"
#include "support.h"

namespace hangtrace::testing {
namespace {

using namespace std::chrono_literals;

constexpr int kRounds = 1000;
constexpr long kNrRead = HT_NR_read, kNrWrite = HT_NR_write, kNrNanosleep = HT_NR_nanosleep,
               kNrClockNanosleep = HT_NR_clock_nanosleep;

// A pipe whose read end a workload inherits (its fd number passed in argv):
// a line written to it starts the workload's activity.
class Gate {
 public:
  Gate() {
    int fds[2];
    if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
    read_fd_ = fds[0];
    write_fd_ = fds[1];
    fcntl(write_fd_, F_SETFD, FD_CLOEXEC);  // only the read end goes to the child
  }
  ~Gate() {
    close_read_end();
    if (write_fd_ >= 0) close(write_fd_);
  }
  std::string arg() const { return std::to_string(read_fd_); }
  void close_read_end() {
    if (read_fd_ >= 0) close(read_fd_);
    read_fd_ = -1;
  }
  void open() { ASSERT_EQ(write(write_fd_, "go\n", 3), 3); }

 private:
  int read_fd_ = -1, write_fd_ = -1;
};

void print_hooks(const LiveTracer& t) {
  for (const auto& h : t.hooks()) {
    if (h.concern != "syscalls" && h.concern != "sched") continue;
    std::cout << "hook " << h.concern << "/" << h.program << " " << h.attach << " "
              << (h.active ? "active" : "inactive") << (h.reason.empty() ? "" : " -- " + h.reason) << "\n";
  }
}

// Fails the test unless every hook of our concerns that must run did, in the
// twin this run asked for (`suffix`: "_btf" or "_raw"). sys_enter runs only
// when every call is streamed (min_block_ns 0); otherwise calls start at
// their first sleep and it is listed as not needed.
void expect_wait_hooks_active(const LiveTracer& t, const std::string& suffix, uint64_t min_block_ns) {
  std::set<std::string> active;
  std::map<std::string, std::string> reasons;
  for (const auto& h : t.hooks()) {
    if (h.program == "*") ADD_FAILURE() << h.concern << " failed: " << h.reason;
    if (h.active) active.insert(h.concern + "/" + h.program);
    reasons[h.concern + "/" + h.program] = h.reason;
  }
  for (const char* p : {"syscalls/sys_exit", "syscalls/sched_switch", "sched/sched_waking"}) {
    EXPECT_TRUE(active.count(p + suffix)) << p << suffix << " not active";
  }
  const std::string enter = "syscalls/sys_enter" + suffix;
  if (min_block_ns == 0) {
    EXPECT_TRUE(active.count(enter)) << enter << " not active";
  } else {
    EXPECT_FALSE(active.count(enter)) << enter << " active, though calls start at their first sleep";
    EXPECT_EQ(reasons[enter].rfind("not needed", 0), 0u) << reasons[enter];
  }
}

// Every test runs twice: with the tp_btf twins this kernel offers, and with
// the raw_tp twins a kernel without tp_btf would get (the dispatcher reads
// the syscall registers differently in each).
class LiveWaits : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (GetParam()) setenv("HANGTRACE_LIVE_NO_TP_BTF", "1", 1);
  }
  void TearDown() override { unsetenv("HANGTRACE_LIVE_NO_TP_BTF"); }
  std::string twin() const { return GetParam() ? "_raw" : "_btf"; }
};

// Default transport settings (batched wakeups; LiveTracer::poll drains what
// epoll did not announce), so a lone record must still arrive.
LiveOptions wait_options(std::vector<int> tgids, uint64_t min_block_ns) {
  LiveOptions opt;
  opt.tgids = std::move(tgids);
  opt.min_block_ns = min_block_ns;
  return opt;
}

// A workload that starts its activity on a gate (`REPRO GATE_FD ARGS...`),
// and the tracer started for it.
struct GatedRun {
  std::unique_ptr<LiveTracer> tracer;
  std::unique_ptr<Gate> gate;
  std::unique_ptr<Workload> workload;
  std::map<std::string, uint64_t> ready;  // its READY line's fields
};

// Starts the workload and reads its READY line.
void start_gated(const std::string& repro, const std::vector<std::string>& args, GatedRun& run) {
  run.gate = std::make_unique<Gate>();
  std::vector<std::string> argv{repro_path(repro), run.gate->arg()};
  argv.insert(argv.end(), args.begin(), args.end());
  run.workload = std::make_unique<Workload>(argv);
  run.gate->close_read_end();
  run.ready = numeric_fields<uint64_t>(run.workload->wait_for_line("READY"));
}

void start_tracer(const LiveOptions& opt, GatedRun& run) {
  auto started = LiveTracer::start(opt);
  ASSERT_TRUE(started.ok()) << started.error();
  run.tracer = std::move(*started);
}

// A workload whose READY line gives its pid, and a tracer streaming its
// waits of at least `min_block_ns` -- or, without `traced`, nobody's.
void start_traced(const std::string& repro, const std::vector<std::string>& args, uint64_t min_block_ns,
                  bool traced, GatedRun& run, int& pid) {
  start_gated(repro, args, run);
  pid = static_cast<int>(run.ready["pid"]);
  ASSERT_GT(pid, 0);
  start_tracer(wait_options(traced ? std::vector<int>{pid} : std::vector<int>{}, min_block_ns), run);
}

// A futex ping-pong of kRounds under a tracer started with `opt` (the
// workload's pid is added to its tgids) once the workload is ready; returns
// when both threads are done -- and have exited, unless `hold`: then they
// stay alive, asleep, as long as `run` lives.
struct PingPongRun : GatedRun {
  int pid = 0, a_tid = 0, b_tid = 0;
  uint64_t a_word = 0, b_word = 0;
  std::chrono::milliseconds elapsed{};
};

void run_futex_pingpong(LiveOptions opt, const std::string& twin, PingPongRun& run, bool hold = false) {
  std::vector<std::string> args{std::to_string(kRounds)};
  if (hold) args.push_back("hold");
  start_gated("repro_live_futex_pingpong", args, run);
  Workload& w = *run.workload;
  ASSERT_EQ(run.ready.size(), 3u);
  run.pid = static_cast<int>(run.ready["pid"]);
  run.a_word = run.ready["a_word"];
  run.b_word = run.ready["b_word"];

  opt.tgids.push_back(run.pid);
  ASSERT_NO_FATAL_FAILURE(start_tracer(opt, run));
  print_hooks(*run.tracer);
  expect_wait_hooks_active(*run.tracer, twin, opt.min_block_ns);

  auto t0 = std::chrono::steady_clock::now();
  run.gate->open();
  auto done = numeric_fields<uint64_t>(w.wait_for_line("DONE", 30s));
  ASSERT_EQ(done.size(), 2u) << "the ping-pong never finished";
  run.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  run.a_tid = static_cast<int>(done["a_tid"]);
  run.b_tid = static_cast<int>(done["b_tid"]);
}

// The in-kernel counts of who woke whom, for one pair.
uint64_t wakeups_counted(int waker_tid, int wakee_tid) {
  auto counts = read_wakeup_counts();
  EXPECT_TRUE(counts.ok()) << counts.error();
  if (!counts.ok()) return 0;
  for (const auto& c : *counts)
    if (c.waker_tid == waker_tid && c.wakee_tid == wakee_tid) return c.count;
  return 0;
}

// The pipe ping-pong of kRounds between two processes under a tracer started
// with min_block_ns once both are ready; returns when the rounds are done
// (both processes stay alive as long as `run` lives).
struct PipePingPongRun : GatedRun {
  int parent = 0, child = 0;
  int p2c_r = 0, p2c_w = 0, c2p_r = 0, c2p_w = 0;  // the pipes' fds, as numbered in each process
};

void run_pipe_pingpong(uint64_t min_block_ns, const std::string& twin, PipePingPongRun& run) {
  start_gated("repro_live_pipe_pingpong", {std::to_string(kRounds)}, run);
  auto& ready = run.ready;
  ASSERT_EQ(ready.size(), 6u);
  run.parent = static_cast<int>(ready["parent"]);
  run.child = static_cast<int>(ready["child"]);
  run.p2c_r = static_cast<int>(ready["p2c_r"]);
  run.p2c_w = static_cast<int>(ready["p2c_w"]);
  run.c2p_r = static_cast<int>(ready["c2p_r"]);
  run.c2p_w = static_cast<int>(ready["c2p_w"]);

  ASSERT_NO_FATAL_FAILURE(start_tracer(wait_options({run.parent, run.child}, min_block_ns), run));
  expect_wait_hooks_active(*run.tracer, twin, min_block_ns);

  run.gate->open();
  ASSERT_FALSE(run.workload->wait_for_line("DONE", 30s).empty());
}

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
  for (const auto& e : a_waits) {
    EXPECT_EQ(e.op, static_cast<uint32_t>(FUTEX_WAIT_PRIVATE));
    EXPECT_EQ(e.timeout_ns, 10'000'000'000ull);  // the relative 10 s as given
    EXPECT_EQ(e.ret, 0);
    if (e.kstack_id >= 0) ++with_kstack;
    if (e.ustack_id >= 0) ++with_ustack;
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
            << "; longest wait " << max_wait / 1000 << " us\n";
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
