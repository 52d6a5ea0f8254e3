// Benchmark (not a test): native stack capture + symbolization of a process
// tree, twice in one process, to show what the NativeStackCache saves.
//   bench_stacks PID [PID...]
// Per round: the BPF task snapshot of the given processes, then unwinding and
// symbolizing every blocked thread (NativeStackCache::unwind_process). Then
// the same with the whole collector (collect_snapshot, no progress window),
// on a fresh cache. Prints key=value lines (scripts/bench_stacks.sh).
#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "collector.h"
#include "native_stacks.h"
#include "task_iter.h"

using namespace hangtrace;

namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Round {
  double ms = 0;
  size_t threads = 0, frames = 0, symbolized = 0;
  std::string error;
  void count(const ProcessInfo& p) {
    for (const auto& t : p.threads) {
      if (t.native_stack.empty()) continue;
      ++threads;
      frames += t.native_stack.size();
      for (const auto& f : t.native_stack) symbolized += !f.function.empty();
    }
  }
};

Round stacks_round(const std::vector<int>& pids, NativeStackCache& cache) {
  Round r;
  double t0 = now_ms();
  auto samples = sample_kernel_tasks(pids);
  if (!samples) {
    r.error = samples.error();
    return r;
  }
  std::map<int, ProcessInfo> procs;
  for (const auto& s : *samples) {
    ProcessInfo& p = procs[s.tgid];
    p.pid = s.tgid;
    ThreadInfo t;
    t.tid = s.tid;
    t.state = 'S';
    t.kernel = s.view;
    p.threads.push_back(std::move(t));
  }
  for (auto& [pid, p] : procs) {
    std::string failure = cache.unwind_process(p, pid);
    if (!failure.empty() && r.error.empty()) r.error = failure;
  }
  r.ms = now_ms() - t0;
  for (const auto& [pid, p] : procs) r.count(p);
  return r;
}

Round collect_round(int target, NativeStackCache& cache) {
  Round r;
  CollectOptions o;
  o.min_progress_window_s = 0;
  o.native_cache = &cache;
  double t0 = now_ms();
  auto snap = collect_snapshot(target, o);
  r.ms = now_ms() - t0;
  if (!snap) {
    r.error = snap.error();
    return r;
  }
  for (const auto& p : snap->processes) r.count(p);
  return r;
}

void print_stats(const char* prefix, const NativeStackStats& s) {
  fmt::print(
      "{}_stats dwfl_created={} dwfl_reused={} report_ms={:.1f} unwind_ms={:.1f} symbolize_ms={:.1f} "
      "symbol_hits={} symbol_misses={} remote_reads={}\n",
      prefix, s.dwfl_created, s.dwfl_reused, s.report_ms, s.unwind_ms, s.symbolize_ms, s.symbol_cache_hits,
      s.symbol_cache_misses, s.remote_reads);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fmt::print(stderr, "usage: bench_stacks PID [PID...]\n");
    return 2;
  }
  std::vector<int> pids;
  for (int i = 1; i < argc; ++i) pids.push_back(std::atoi(argv[i]));

  // As a process that captures repeatedly runs (--duration, a daemon): the
  // iterator is verified on the first capture only.
  keep_task_iterator_loaded(true);
  NativeStackCache stacks_cache;
  Round first = stacks_round(pids, stacks_cache);
  NativeStackStats after_first = stacks_cache.stats();
  Round second = stacks_round(pids, stacks_cache);
  NativeStackStats after_second = stacks_cache.stats();
  if (!first.error.empty() || !second.error.empty()) {
    fmt::print(stderr, "bench_stacks: {}\n", first.error.empty() ? second.error : first.error);
  }
  fmt::print("first_ms={:.1f} second_ms={:.1f} ratio={:.1f}\n", first.ms, second.ms,
             second.ms > 0 ? first.ms / second.ms : 0.0);
  fmt::print("first_threads={} first_frames={} first_symbolized={}\n", first.threads, first.frames,
             first.symbolized);
  fmt::print("second_threads={} second_frames={} second_symbolized={}\n", second.threads, second.frames,
             second.symbolized);
  print_stats("first", after_first);
  print_stats("total", after_second);

  keep_task_iterator_loaded(false);  // cold again: the collector's first capture loads it
  keep_task_iterator_loaded(true);
  NativeStackCache collect_cache;
  Round c1 = collect_round(pids[0], collect_cache);
  Round c2 = collect_round(pids[0], collect_cache);
  if (!c1.error.empty() || !c2.error.empty())
    fmt::print(stderr, "bench_stacks: collect: {}\n", c1.error.empty() ? c2.error : c1.error);
  fmt::print("collect_first_ms={:.1f} collect_second_ms={:.1f} collect_threads={} collect_frames={}\n", c1.ms,
             c2.ms, c1.threads, c1.frames);
  // What the caches keep open between captures (fds should not pile up).
  std::string fds;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    auto target = std::filesystem::read_symlink(e.path(), ec);
    fds += " " + e.path().filename().string() + "=" + (ec ? "?" : target.string());
  }
  fmt::print("open_fds{}\n", fds);
  return first.threads > 0 ? 0 : 1;
}
