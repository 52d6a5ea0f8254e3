// Wall time by cause (export/wall_profile.cpp) and the critical path in the
// Chrome trace (export/chrome_trace.cpp), from stall profiles built by hand:
// each main thread's stacks add up to its window, the path's steps stand
// under the wait they ended with their own causes scaled to it, and the
// trace has one flow per wakeup that ended a path thread's wait.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <map>
#include <set>
#include <string>

#include "hangtrace/abi.h"
#include "hangtrace/analysis.h"
#include "hangtrace/exports.h"
#include "hangtrace/profile.h"

namespace hangtrace {
namespace {

using nlohmann::json;

constexpr uint64_t kS = 1'000'000'000ull;
constexpr uint64_t kStart = 100 * kS;

CauseShare cause(StallCause c, double seconds, uint64_t window_ns, std::vector<StallObject> objects = {}) {
  CauseShare s;
  s.cause = c;
  s.ns = static_cast<uint64_t>(seconds * 1e9);
  s.share = static_cast<double>(s.ns) / static_cast<double>(window_ns);
  s.objects = std::move(objects);
  return s;
}

StallObject object(const std::string& what, double seconds) {
  StallObject o;
  o.what = what;
  o.ns = static_cast<uint64_t>(seconds * 1e9);
  return o;
}

// main 100 waits 6.2 s of 8 s for batches, 5 s of it ended by workers 200 and
// 201; the workers read files 85% of their time, and 8 s of those reads were
// ended by the FUSE daemon 300, on CPU all the while.
StallProfile starved_profile() {
  StallProfile p;
  p.window_ns = 8 * kS;
  p.start_ns = kStart;
  p.end_ns = kStart + p.window_ns;
  ThreadProfile main;
  main.pid = main.tid = 100;
  main.comm = "python3";
  main.role = "main";
  main.window_ns = 8 * kS;
  main.causes = {cause(StallCause::DataLoader, 6.2, main.window_ns, {object("poll", 6.2)}),
                 cause(StallCause::OnCpu, 1.6, main.window_ns),
                 cause(StallCause::Other, 0.2, main.window_ns)};
  main.cpu_samples = 100;
  main.on_cpu_frames = {{"/tmp/train.py:12 <module>;/tmp/model.py:88 forward", 60, 0.6}};
  p.mains.push_back(main);

  PathStep root;
  root.label = "main 100 (python3)";
  root.pids = {100};
  root.tids = {100};
  root.window_ns = main.window_ns;
  root.causes = main.causes;
  root.on_cpu_frames = main.on_cpu_frames;
  PathStep workers;
  workers.depth = 1;
  workers.via = StallCause::DataLoader;
  workers.ended_ns = 5 * kS;
  workers.label = "workers 200, 201 (python3)";
  workers.pids = {200, 201};
  workers.tids = {200, 201};
  workers.window_ns = 16 * kS;
  workers.causes = {cause(StallCause::StorageIo, 13.6, workers.window_ns,
                          {object("read /mnt/train/*.jpg (fuse.slowfs slowfs)", 13.6)}),
                    cause(StallCause::OnCpu, 1.6, workers.window_ns),
                    cause(StallCause::Other, 0.8, workers.window_ns)};
  PathStep fuse;
  fuse.depth = 2;
  fuse.via = StallCause::StorageIo;
  fuse.ended_ns = 8 * kS;
  fuse.label = "process 300 (slowfs)";
  fuse.pids = fuse.tids = {300};
  fuse.window_ns = 8 * kS;
  fuse.causes = {cause(StallCause::OnCpu, 8, fuse.window_ns)};
  workers.next.push_back(fuse);
  root.next.push_back(workers);
  p.paths.push_back(root);
  return p;
}

std::map<std::string, uint64_t> folded_lines(const FoldedProfile& f) {
  std::map<std::string, uint64_t> out;
  for (const auto& s : f.stacks) {
    std::string key;
    for (const auto& fr : s.frames) key += (key.empty() ? "" : ";") + fr.name;
    out[key] = s.value_us;
  }
  return out;
}

TEST(WallProfile, TheStacksOfAMainThreadAddUpToItsWindow) {
  FoldedProfile f = build_wall_folded(starved_profile());
  EXPECT_EQ(f.total_us(), 8'000'000u);
  for (const auto& s : f.stacks) {
    EXPECT_EQ(s.pid, 100);
    EXPECT_EQ(s.tid, 100);
    ASSERT_FALSE(s.frames.empty());
    EXPECT_EQ(s.frames.front().name, "main 100 (python3)");
  }
  // Everything under the workers is the 5 s they ended.
  uint64_t under_workers = 0;
  for (const auto& [key, us] : folded_lines(f))
    if (key.starts_with("main 100 (python3);dataloader;workers 200, 201 (python3)")) under_workers += us;
  EXPECT_EQ(under_workers, 5'000'000u);
}

TEST(WallProfile, TheWorkersStorageIoStandsUnderMainsWaitForBatches) {
  auto lines = folded_lines(build_wall_folded(starved_profile()));
  const std::string workers = "main 100 (python3);dataloader;workers 200, 201 (python3)";
  // 5 s of the workers' 16 s: 13.6 s storage I/O is 4.25 s of main's wall
  // time, 2.5 s of it ended by the FUSE daemon (8 s of their 13.6 s).
  EXPECT_EQ(lines[workers + ";storage-io;read /mnt/train/*.jpg (fuse.slowfs slowfs)"], 1'750'000u);
  EXPECT_EQ(lines[workers + ";storage-io;process 300 (slowfs);on-cpu"], 2'500'000u);
  EXPECT_EQ(lines[workers + ";on-cpu"], 500'000u);
  EXPECT_EQ(lines[workers + ";other"], 250'000u);
  // The 1.2 s of waiting no path step ended: the object waited on.
  EXPECT_EQ(lines["main 100 (python3);dataloader;poll"], 1'200'000u);
  // On CPU by sampled stack; the unsampled rest on the cause itself.
  EXPECT_EQ(lines["main 100 (python3);on-cpu;<module> (train.py:12);forward (model.py:88)"], 960'000u);
  EXPECT_EQ(lines["main 100 (python3);on-cpu"], 640'000u);
  EXPECT_EQ(lines["main 100 (python3);other"], 200'000u);
  EXPECT_EQ(lines.size(), 8u);
}

TEST(WallProfile, AwkwardSharesStillAddUpExactlyForEveryRank) {
  StallProfile p = starved_profile();
  ThreadProfile rank = p.mains.front();
  rank.pid = rank.tid = 110;
  rank.window_ns = 7'777'777'777;
  rank.causes = {cause(StallCause::Collective, 3.333333333, rank.window_ns),
                 cause(StallCause::OnCpu, 2.222222222, rank.window_ns),
                 cause(StallCause::Runnable, 1.111111111, rank.window_ns),
                 cause(StallCause::Gpu, 1.111111111, rank.window_ns)};
  rank.on_cpu_frames = {
      {"a.py:1 f", 1, 1.0 / 3}, {"a.py g;memcpy", 1, 1.0 / 3}, {"h;do_syscall_64_[k]", 1, 1.0 / 3}};
  p.mains.push_back(rank);
  PathStep root;
  root.label = "rank 1 110 (python3)";
  root.tids = {110};
  PathStep peers;
  peers.via = StallCause::Collective;
  peers.ended_ns = 3'333'333'333;  // all of it
  peers.label = "ranks 111, 112 (python3)";
  peers.window_ns = 15'555'555'553;
  peers.causes = {cause(StallCause::OnCpu, 7.777777777, peers.window_ns),
                  cause(StallCause::Gpu, 7.777777776, peers.window_ns)};
  root.next.push_back(peers);
  p.paths.push_back(root);
  FoldedProfile f = build_wall_folded(p);
  std::map<int, uint64_t> by_tid;
  for (const auto& s : f.stacks) by_tid[s.tid] += s.value_us;
  EXPECT_EQ(by_tid[100], 8'000'000u);
  EXPECT_EQ(by_tid[110], 7'777'778u);
  uint64_t peers_us = 0;
  for (const auto& [key, us] : folded_lines(f))
    if (key.starts_with("rank 1 110 (python3);collective;ranks 111, 112")) peers_us += us;
  // 3.333333333 s of 7.777777777 s is 3333333.43 of its 7777778 µs, and the
  // largest remainder takes the µs the rounding left.
  EXPECT_EQ(peers_us, 3'333'334u);
  // Sampled frames by kind: Python with and without a line, native, kernel.
  std::map<std::string, FrameKind> kinds;
  for (const auto& s : f.stacks)
    for (const auto& fr : s.frames) kinds[fr.name] = fr.kind;
  EXPECT_EQ(kinds["f (a.py:1)"], FrameKind::Python);
  EXPECT_EQ(kinds["g (a.py)"], FrameKind::Python);
  EXPECT_EQ(kinds["memcpy"], FrameKind::Native);
  EXPECT_EQ(kinds["do_syscall_64"], FrameKind::Kernel);
  EXPECT_TRUE(build_wall_folded(StallProfile{}).stacks.empty());
}

TEST(WallProfile, SpeedscopeAndTheFlameGraphCarryIt) {
  FoldedProfile wall = build_wall_folded(starved_profile());
  json j = render_speedscope(FoldedProfile{}, "t", &wall);
  ASSERT_EQ(j["profiles"].size(), 1u);
  EXPECT_EQ(j["profiles"][0]["name"], "wall time by cause: main 100 (python3)");
  EXPECT_EQ(j["profiles"][0]["endValue"], 8'000'000u);
  // The root frame is the main thread's.
  EXPECT_EQ(j["shared"]["frames"][j["profiles"][0]["samples"][0][0].get<size_t>()]["name"],
            "main 100 (python3)");
  std::string svg =
      render_flamegraph_svg(wall, wall_flamegraph_options("hangtrace: python3 (pid 100)", "slow"));
  EXPECT_NE(svg.find("python3 (pid 100): wall time by cause"), std::string::npos);
  EXPECT_NE(svg.find("width = wall time"), std::string::npos);
  EXPECT_NE(svg.find(">storage-io<"), std::string::npos);
  EXPECT_EQ(render_speedscope(FoldedProfile{}, "t")["profiles"].size(), 0u);
}

// The trace of the starved job's window: main 100 woken by worker 200's
// feeder 205, which worker 200 woke, whose read and sleep interrupts ended;
// 300 is off the path.
struct PathTrace {
  Snapshot snap;
  LiveObservation live;
  Diagnosis d;
  PathTrace() {
    snap.target_pid = 100;
    auto proc = [&](int pid, std::vector<int> tids) {
      ProcessInfo p;
      p.pid = pid;
      p.comm = "python3";
      for (int t : tids) {
        ThreadInfo ti;
        ti.tid = t;
        ti.comm = t == 205 ? "pt_feeder" : "python3";
        ti.state = 'S';
        p.threads.push_back(ti);
      }
      snap.processes.push_back(p);
    };
    proc(100, {100});
    proc(200, {200, 205});
    proc(300, {300});
    live.start_ns = kStart;
    live.end_ns = kStart + 8 * kS;
    auto ms = [](double m) { return kStart + static_cast<uint64_t>(m * 1e6); };
    auto wakeup = [&](int wakee, int wakee_pid, double at_ms, int waker_pid, int waker) {
      TraceEvent e;
      e.type = HT_EV_WAKEUP;
      e.ts_ns = ms(at_ms);
      e.tgid = wakee_pid;
      e.tid = wakee;
      e.waker_tgid = waker_pid;
      e.waker_tid = waker;
      live.recent_wakeups[wakee].push_back(e);
      live.last_waker[wakee] = e;
    };
    live.blocked[100] = {{ms(0), ms(500), "poll", -1, -1}, {ms(1000), ms(1600), "poll", -1, -1}};
    wakeup(100, 100, 490, 200, 205);
    wakeup(100, 100, 1590, 200, 205);
    wakeup(100, 100, 2000, 200, 205);  // in no kept wait
    live.last_waker[100] = live.recent_wakeups[100][1];
    live.blocked[205] = {{ms(100), ms(480), "futex 0x7000", -1, -1}};
    wakeup(205, 200, 470, 200, 200);
    live.blocked[200] = {{ms(200), ms(450), "read", -1, -1}, {ms(600), ms(700), "clock_nanosleep", -1, -1}};
    wakeup(200, 200, 440, 0, 0);
    // A timer interrupt that hit an unrelated task (9999) ends the sleep.
    wakeup(200, 200, 690, 9999, 9999);
    live.recent_wakeups[200].back().kstack_id = 7;
    live.kernel_stacks[7] = {{0xffffffff81000100ull, "hrtimer_wakeup+0x1e"},
                             {0xffffffff81000200ull, "asm_sysvec_apic_timer_interrupt+0x1a"}};
    live.blocked[300] = {{ms(0), ms(300), "read", -1, -1}};
    wakeup(300, 300, 290, 100, 100);
    d.profile = starved_profile();
    d.profile.paths[0].next[0].tids = {200};
    d.profile.paths[0].next[0].pids = {200};
    d.profile.paths[0].next[0].next.clear();
  }
};

TEST(ChromeTraceCriticalPath, EachWakeupThatEndedAPathWaitIsAFlowToItsEnd) {
  PathTrace t;
  json j = render_chrome_trace(t.snap, &t.d, &t.live);
  std::map<uint64_t, json> starts, finishes;
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> slices;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "X")
      slices[{e["pid"].get<int>(), e["tid"].get<int>()}].push_back(
          {e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()});
    if (e.value("cat", "") != "critical_path") continue;
    uint64_t id = e["id"].get<uint64_t>();
    if (e["ph"] == "s") {
      EXPECT_TRUE(starts.emplace(id, e).second) << id;
    } else if (e["ph"] == "f") {
      EXPECT_TRUE(finishes.emplace(id, e).second) << id;
    }
  }
  ASSERT_EQ(starts.size(), 5u);
  ASSERT_EQ(finishes.size(), 5u);
  std::multiset<std::pair<int, int>> pairs;  // (waker tid, wakee tid)
  for (const auto& [id, s] : starts) {
    ASSERT_TRUE(finishes.count(id)) << id;
    const json& f = finishes[id];
    EXPECT_EQ(f["bp"], "e");
    pairs.insert({s["tid"].get<int>(), f["tid"].get<int>()});
    // Both ends bind to a slice of their track.
    auto encloses = [&](const json& e) {
      for (const auto& [a, b] : slices[{e["pid"].get<int>(), e["tid"].get<int>()}])
        if (a <= e["ts"].get<double>() && e["ts"].get<double>() <= b) return true;
      return false;
    };
    EXPECT_TRUE(encloses(s)) << s.dump();
    EXPECT_TRUE(encloses(f)) << f.dump();
  }
  // The interrupt's flow starts on the interrupt track, not on the task it hit.
  EXPECT_EQ(pairs,
            (std::multiset<std::pair<int, int>>{{205, 100}, {205, 100}, {200, 205}, {0, 200}, {0, 200}}));
  for (const auto& [id, s] : starts)
    if (s["tid"] == 0) {
      EXPECT_EQ(s["pid"], kTraceInterruptPid);
    }
  // Main's flows end at its waits' ends.
  std::set<double> main_ends;
  for (const auto& [id, f] : finishes)
    if (f["tid"] == 100) main_ends.insert(f["ts"].get<double>());
  ASSERT_EQ(main_ends.size(), 2u);
  EXPECT_NEAR(*main_ends.begin(), (kStart + 500'000'000ull) / 1e3, 0.01);
  EXPECT_NEAR(*main_ends.rbegin(), (kStart + 1'600'000'000ull) / 1e3, 0.01);
  // The last wakeup of main is drawn once, on the path, not again as a plain wakeup flow.
  for (const auto& e : j["traceEvents"])
    if (e.value("cat", "") == "wakeup" && e["ph"] == "f") {
      EXPECT_NE(e["tid"], 100) << e.dump();
    }
}

TEST(ChromeTraceCriticalPath, MainThreadsGetTheirSharesByCause) {
  PathTrace t;
  json j = render_chrome_trace(t.snap, &t.d, &t.live);
  int counters = 0, instants = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "C" && e["name"] == "wall time by cause % (tid 100)") {
      ++counters;
      EXPECT_NEAR(e["args"]["dataloader"].get<double>(), 77.5, 1e-6);
      EXPECT_EQ(e["pid"], 100);
    }
    if (e["ph"] == "i" && e.value("cat", "") == "profile") {
      ++instants;
      EXPECT_EQ(e["tid"], 100);
      EXPECT_EQ(e["name"].get<std::string>().rfind("wall time: dataloader 78%, on-cpu 20%, other ", 0), 0u)
          << e["name"];
      EXPECT_EQ(e["args"]["path"][0]["label"], "workers 200, 201 (python3)");
    }
  }
  EXPECT_EQ(counters, 2);
  EXPECT_EQ(instants, 1);
  // Without a profile: no path flows, the last wakeups as before.
  t.d.profile = {};
  json plain = render_chrome_trace(t.snap, &t.d, &t.live);
  for (const auto& e : plain["traceEvents"]) EXPECT_NE(e.value("cat", ""), "critical_path");
}

}  // namespace
}  // namespace hangtrace
