// The harness of the live tracer's wait tests (live_waits_test.cpp: futex
// waits, wakes and wakers; live_calls_test.cpp: blocking calls and their
// objects): workloads gated on a pipe so their activity starts only once the
// tracer is attached, the tracer started for them, and the hook checks. Every
// test runs with both twins (LiveWaits' parameter).
#pragma once

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

using namespace std::chrono_literals;

inline constexpr int kRounds = 1000;
inline constexpr long kNrRead = HT_NR_read, kNrWrite = HT_NR_write, kNrNanosleep = HT_NR_nanosleep,
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

inline void print_hooks(const LiveTracer& t) {
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
inline void expect_wait_hooks_active(const LiveTracer& t, const std::string& suffix, uint64_t min_block_ns) {
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
inline LiveOptions wait_options(std::vector<int> tgids, uint64_t min_block_ns) {
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
inline void start_gated(const std::string& repro, const std::vector<std::string>& args, GatedRun& run) {
  run.gate = std::make_unique<Gate>();
  std::vector<std::string> argv{repro_path(repro), run.gate->arg()};
  argv.insert(argv.end(), args.begin(), args.end());
  run.workload = std::make_unique<Workload>(argv);
  run.gate->close_read_end();
  run.ready = numeric_fields<uint64_t>(run.workload->wait_for_line("READY"));
}

inline void start_tracer(const LiveOptions& opt, GatedRun& run) {
  auto started = LiveTracer::start(opt);
  ASSERT_TRUE(started.ok()) << started.error();
  run.tracer = std::move(*started);
}

// A workload whose READY line gives its pid, and a tracer streaming its
// waits of at least `min_block_ns` -- or, without `traced`, nobody's.
inline void start_traced(const std::string& repro, const std::vector<std::string>& args,
                         uint64_t min_block_ns, bool traced, GatedRun& run, int& pid) {
  start_gated(repro, args, run);
  pid = static_cast<int>(run.ready["pid"]);
  ASSERT_GT(pid, 0);
  // The tests count on the gate's read having begun (slept) before the
  // tracer attaches: READY is printed before it, and on a busy machine the
  // workload may not reach the read until after the attach.
  ASSERT_EQ(wait_until_blocked(pid), "") << describe_threads(pid);
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

inline void run_futex_pingpong(LiveOptions opt, const std::string& twin, PingPongRun& run,
                               bool hold = false) {
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
inline uint64_t wakeups_counted(int waker_tid, int wakee_tid) {
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
  size_t reads_slept = 0;  // the parent's reads of the answer that slept, as it counted them
};

inline void run_pipe_pingpong(uint64_t min_block_ns, const std::string& twin, PipePingPongRun& run) {
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
  auto done = numeric_fields<uint64_t>(run.workload->wait_for_line("DONE", 30s));
  ASSERT_EQ(done.count("reads_slept"), 1u) << "the ping-pong never finished";
  run.reads_slept = done["reads_slept"];
}

}  // namespace hangtrace::testing
