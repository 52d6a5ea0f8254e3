// Postmortem exports from a fixture built in code: folded stacks (exact),
// speedscope and Chrome trace JSON (structure), the SVG flame graph (frames).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <set>

#include "hangtrace/analysis.h"
#include "hangtrace/exports.h"

namespace hangtrace {
namespace {

using nlohmann::json;

std::vector<KernelFrame> kstack(std::initializer_list<const char*> innermost_first) {
  std::vector<KernelFrame> out;
  uint64_t addr = 0xffffffff81000000ull;
  for (const char* s : innermost_first) out.push_back({addr += 0x100, s});
  return out;
}

ThreadInfo blocked_thread(int tid, const char* comm, uint64_t off_cpu_ns, std::vector<KernelFrame> stack) {
  ThreadInfo t;
  t.tid = tid;
  t.comm = comm;
  t.state = 'S';
  KernelTaskView k;
  k.on_cpu = false;
  k.off_cpu_ns = off_cpu_ns;
  k.stack = std::move(stack);
  t.kernel = k;
  return t;
}

// python3 (100): its main thread waits in a futex under Python and native
// frames for 2 s; pt_worker (101) reads a pipe for 0.5 s, after a 250 ms live
// wait that pt_data_worker (200) ended; a busy thread runs. The worker
// process (200) waits in epoll for 1.5 ms. A loader (300) was OOM-killed.
Snapshot fixture() {
  Snapshot s;
  s.target_pid = 100;
  s.sampled_at_monotonic_ns = 10'000'000'000ull;
  ProcessInfo main;
  main.pid = 100;
  main.comm = "python3";
  main.role = ProcessRole::Target;
  ThreadInfo t100 =
      blocked_thread(100, "python3", 2'000'000'000ull,
                     kstack({"futex_wait_queue+0x5f", "futex_wait+0x10", "do_futex+0x1", "__x64_sys_futex",
                             "do_syscall_64+0x3b", "entry_SYSCALL_64_after_hwframe+0x6e"}));
  const std::string dl = "/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py";
  t100.python_stack = {{UserFrame::Kind::Python, "_try_get_data", dl, 1133, 0},
                       {UserFrame::Kind::Python, "__next__", dl, 630, 0},
                       {UserFrame::Kind::Python, "<module>", "/tmp/train.py", 12, 0}};
  t100.native_stack = {
      {UserFrame::Kind::Native, "pthread_cond_wait", "/lib/x86_64-linux-gnu/libc.so.6", 0, 0x7f00},
      {UserFrame::Kind::Native, "", "/usr/lib/libpython3.11.so", 0, 0x1234}};
  main.threads.push_back(t100);
  main.threads.push_back(blocked_thread(101, "pt_worker", 500'000'000ull,
                                        kstack({"pipe_read+0x1", "vfs_read+0x2", "ksys_read+0x3"})));
  ThreadInfo busy;
  busy.tid = 102;
  busy.comm = "busy";
  busy.state = 'R';
  busy.kernel = KernelTaskView{};
  busy.kernel->on_cpu = true;
  main.threads.push_back(busy);
  s.processes.push_back(main);

  ProcessInfo worker;
  worker.pid = 200;
  worker.ppid = 100;
  worker.comm = "pt_data_worker";
  worker.role = ProcessRole::Descendant;
  worker.threads.push_back(blocked_thread(200, "pt_data_worker", 1'500'000ull,
                                          kstack({"do_epoll_wait+0x9", "__x64_sys_epoll_wait"})));
  s.processes.push_back(worker);
  return s;
}

LiveObservation live_fixture() {
  LiveObservation live;
  live.start_ns = 8'000'000'000ull;
  live.end_ns = 10'000'000'000ull;
  live.duration_s = 2;
  live.blocked[101].push_back({8'100'000'000ull, 8'350'000'000ull, "read pipe:[123]"});
  TraceEvent w;
  w.ts_ns = 8'350'000'000ull;
  w.tgid = 100;
  w.tid = 101;
  w.comm = "pt_worker";
  w.waker_tgid = 200;
  w.waker_tid = 200;
  w.waker_comm = "pt_data_worker";
  live.last_waker[101] = w;
  ProcessDeath d;
  d.pid = 300;
  d.comm = "loader";
  d.ts_ns = 9'000'000'000ull;
  d.signal = 9;
  d.exit_code = 9;
  d.oom_victim = true;
  live.deaths.push_back(d);
  return live;
}

// A wakeup of `tid` at `ts_ns` by the single-threaded process `waker`, with
// the waker's kernel and user stack ids.
TraceEvent wakeup_of(int tid, uint64_t ts_ns, int waker, const char* comm, int32_t kstack_id,
                     int32_t ustack_id) {
  TraceEvent e;
  e.tid = tid;
  e.ts_ns = ts_ns;
  e.waker_tgid = e.waker_tid = waker;
  e.waker_comm = comm;
  e.kstack_id = kstack_id;
  e.ustack_id = ustack_id;
  return e;
}

constexpr uint64_t kTotalUs = 1500 + 500000 + 250000 + 2000000;

TEST(Exports, FoldedTextIsExact) {
  Snapshot s = fixture();
  LiveObservation live = live_fixture();
  FoldedProfile f = build_folded(s, nullptr, &live);
  EXPECT_EQ(
      render_folded(f),
      "pt_data_worker/200;pt_data_worker/200;__x64_sys_epoll_wait;do_epoll_wait 1500\n"
      "python3/100;pt_worker/101;ksys_read;vfs_read;pipe_read 500000\n"
      "python3/100;pt_worker/101;read pipe:[123];--;pt_data_worker/200 250000\n"
      "python3/100;python3/100;<module> (train.py:12);__next__ (dataloader.py:630);"
      "_try_get_data (dataloader.py:1133);libpython3.11.so+0x1234;pthread_cond_wait;"
      "entry_SYSCALL_64_after_hwframe;do_syscall_64;__x64_sys_futex;do_futex;futex_wait;futex_wait_queue "
      "2000000\n");
  EXPECT_EQ(f.total_us(), kTotalUs);
  // Frame kinds decide the colours.
  const FoldedStack& main = f.stacks.back();
  EXPECT_EQ(main.frames[0].kind, FrameKind::Synthetic);
  EXPECT_EQ(main.frames[2].kind, FrameKind::Python);
  EXPECT_EQ(main.frames[5].kind, FrameKind::Native);
  EXPECT_EQ(main.frames.back().kind, FrameKind::Kernel);
}

TEST(Exports, FoldedWithoutLiveAndSeparatorsInNames) {
  Snapshot s = fixture();
  s.processes[0].threads[1].comm = "a;b";
  FoldedProfile f = build_folded(s, nullptr, nullptr);
  EXPECT_EQ(f.total_us(), 1500u + 500000u + 2000000u);
  EXPECT_NE(render_folded(f).find("python3/100;a:b/101;ksys_read"), std::string::npos) << render_folded(f);
  // Identical stacks are merged.
  s.processes[0].threads.push_back(s.processes[0].threads[1]);
  EXPECT_EQ(build_folded(s, nullptr, nullptr).stacks.size(), 3u);
}

TEST(Exports, FoldedFromTheDiagnosisSkipsNothingBlocked) {
  Snapshot s = fixture();
  LiveObservation live = live_fixture();
  Diagnosis d = diagnose(s, {}, &live);
  FoldedProfile f = build_folded(s, &d, &live);
  for (const auto& st : f.stacks) EXPECT_NE(st.tid, 102) << "a running thread has no blocked time";
  EXPECT_GT(f.total_us(), 0u);
}

TEST(Exports, SpeedscopeIsStructurallyValid) {
  Snapshot s = fixture();
  LiveObservation live = live_fixture();
  json j = render_speedscope(build_folded(s, nullptr, &live), "fixture");
  EXPECT_EQ(j["$schema"], "https://www.speedscope.app/file-format-schema.json");
  const json& frames = j["shared"]["frames"];
  ASSERT_TRUE(frames.is_array());
  ASSERT_FALSE(frames.empty());
  for (const auto& fr : frames) EXPECT_TRUE(fr["name"].is_string());
  ASSERT_EQ(j["profiles"].size(), 3u);  // one per thread with blocked time
  uint64_t sum = 0;
  std::set<std::string> names;
  for (const auto& p : j["profiles"]) {
    EXPECT_EQ(p["type"], "sampled");
    EXPECT_EQ(p["unit"], "microseconds");
    ASSERT_EQ(p["samples"].size(), p["weights"].size());
    uint64_t profile_sum = 0;
    for (const auto& stack : p["samples"]) {
      ASSERT_FALSE(stack.empty());
      for (const auto& i : stack) {
        ASSERT_TRUE(i.is_number_unsigned());
        EXPECT_LT(i.get<size_t>(), frames.size());
      }
    }
    for (const auto& w : p["weights"]) profile_sum += w.get<uint64_t>();
    EXPECT_EQ(p["endValue"].get<uint64_t>() - p["startValue"].get<uint64_t>(), profile_sum);
    sum += profile_sum;
    names.insert(p["name"]);
  }
  EXPECT_EQ(sum, kTotalUs);
  EXPECT_TRUE(names.count("pt_worker/101 in python3/100")) << j["profiles"].dump();
  bool python_with_file = false;
  for (const auto& fr : frames)
    python_with_file |=
        fr.value("line", 0) == 1133 && fr.value("file", "").find("dataloader.py") != std::string::npos;
  EXPECT_TRUE(python_with_file);
}

const json* find_event(const json& events, const std::function<bool(const json&)>& pred) {
  for (const auto& e : events)
    if (pred(e)) return &e;
  return nullptr;
}

TEST(Exports, ChromeTraceHasTracksSlicesFlowsAndDeaths) {
  Snapshot s = fixture();
  LiveObservation live = live_fixture();
  json j = json::parse(render_chrome_trace(s, nullptr, &live).dump());
  const json& ev = j["traceEvents"];
  ASSERT_TRUE(ev.is_array());
  auto meta = [&](const char* what, int pid, int tid) -> std::string {
    const json* e = find_event(ev, [&](const json& e) {
      return e["ph"] == "M" && e["name"] == what && e["pid"] == pid && (tid < 0 || e["tid"] == tid);
    });
    return e ? (*e)["args"]["name"].get<std::string>() : "";
  };
  EXPECT_EQ(meta("process_name", 100, -1), "python3 (pid 100) [target]");
  EXPECT_EQ(meta("process_name", 200, -1), "pt_data_worker (pid 200)");
  EXPECT_EQ(meta("thread_name", 100, 101), "pt_worker 101");
  EXPECT_EQ(meta("thread_name", 200, 200), "pt_data_worker 200");
  auto slice = [&](int tid, double ts) {
    return find_event(ev, [&](const json& e) { return e["ph"] == "X" && e["tid"] == tid && e["ts"] == ts; });
  };
  // The live interval and the current waits (sample time 10 s minus blocked time).
  const json* x = slice(101, 8'100'000.0);
  ASSERT_TRUE(x);
  EXPECT_EQ((*x)["dur"].get<double>(), 250'000.0);
  EXPECT_EQ((*x)["name"], "read pipe:[123]");
  x = slice(101, 9'500'000.0);
  ASSERT_TRUE(x);
  EXPECT_EQ((*x)["dur"].get<double>(), 500'000.0);
  EXPECT_EQ((*x)["pid"], 100);
  x = slice(100, 8'000'000.0);
  ASSERT_TRUE(x);
  EXPECT_EQ((*x)["dur"].get<double>(), 2'000'000.0);
  EXPECT_EQ((*x)["args"]["python_stack"][0], "_try_get_data (dataloader.py:1133)");
  x = slice(200, 9'998'500.0);
  ASSERT_TRUE(x);
  EXPECT_EQ((*x)["dur"].get<double>(), 1'500.0);
  EXPECT_FALSE(find_event(ev, [](const json& e) { return e["ph"] == "X" && e["tid"] == 102; }))
      << "the running thread has no wait";
  // One flow, waker 200 -> wakee 101, at the wakeup.
  std::vector<const json*> starts, finishes;
  for (const auto& e : ev) {
    if (e["ph"] == "s") starts.push_back(&e);
    if (e["ph"] == "f") finishes.push_back(&e);
  }
  ASSERT_EQ(starts.size(), 1u);
  ASSERT_EQ(finishes.size(), 1u);
  EXPECT_EQ((*starts[0])["id"], (*finishes[0])["id"]);
  EXPECT_EQ((*starts[0])["tid"], 200);
  EXPECT_EQ((*finishes[0])["tid"], 101);
  EXPECT_EQ((*finishes[0])["bp"], "e");
  EXPECT_EQ((*starts[0])["ts"].get<double>(), 8'350'000.0);
  EXPECT_TRUE(slice(200, 8'350'000.0)) << "the flow's start needs an enclosing slice on the waker";
  // The death, as an instant event on its own track.
  const json* death = find_event(ev, [](const json& e) { return e["ph"] == "i" && e["pid"] == 300; });
  ASSERT_TRUE(death);
  EXPECT_EQ((*death)["name"], "killed by SIGKILL (OOM killer)");
  EXPECT_EQ((*death)["ts"].get<double>(), 9'000'000.0);
  EXPECT_EQ(meta("process_name", 300, -1), "loader (pid 300)");
  EXPECT_EQ(j["otherData"]["gpu_pid_base"], kTraceGpuPidBase);
}

TEST(Exports, ChromeTraceNamesWaitsFromTheDiagnosis) {
  Snapshot s = fixture();
  // A futex wait the analysis can describe.
  ThreadInfo& t = s.processes[0].threads[0];
  t.syscall.mode = SyscallState::Mode::InSyscall;
  t.syscall.nr = HT_NR_futex;
  t.syscall.args[0] = 0x7f0000001040;
  t.syscall.args[1] = 0x80;  // FUTEX_WAIT_PRIVATE
  Diagnosis d = diagnose(s);
  json j = render_chrome_trace(s, &d, nullptr);
  const auto& w = d.graph.threads.at(100);
  const json* x =
      find_event(j["traceEvents"], [](const json& e) { return e["ph"] == "X" && e["tid"] == 100; });
  ASSERT_TRUE(x);
  EXPECT_EQ((*x)["name"], w.summary.empty() ? w.syscall_text : w.summary);
  EXPECT_EQ((*x)["args"]["wait_class"], "futex");
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t pos = s.find(what); pos != std::string::npos; pos = s.find(what, pos + 1)) ++n;
  return n;
}

TEST(Exports, FlameGraphHasOneGroupPerFrameAndTheScript) {
  Snapshot s = fixture();
  LiveObservation live = live_fixture();
  std::string svg = render_flamegraph_svg(build_folded(s, nullptr, &live));
  // all (1) + pt_data_worker (2 + 2 kernel) + python3/100 (1) + pt_worker
  // (1 + 3 kernel + live wait, "--", waker) + python3/100 thread (1 + 3 Python
  // + 2 native + 6 kernel) = 25.
  EXPECT_EQ(count(svg, "<g class=\"f\""), 25u);
  EXPECT_EQ(count(svg, "<rect "), 25u + 1u);  // + the background
  EXPECT_EQ(count(svg, "<title>"), 25u);
  EXPECT_EQ(count(svg, "<script"), 1u);
  // The script and the style (export/flamegraph.js, .css) are embedded whole.
  EXPECT_NE(svg.find("function unzoom()"), std::string::npos);
  EXPECT_NE(svg.find("})();\n]]></script>\n</svg>\n"), std::string::npos);
  EXPECT_NE(svg.find("g.parent rect { opacity: 0.55; }\n  #title"), std::string::npos);
  EXPECT_NE(svg.find("id=\"search\""), std::string::npos);
  EXPECT_NE(svg.find("data-n=\"_try_get_data (dataloader.py:1133)\""), std::string::npos);
  EXPECT_NE(svg.find("data-n=\"&lt;module&gt; (train.py:12)\""), std::string::npos);
  // The root spans the whole width.
  EXPECT_NE(
      svg.find("<g class=\"f\" data-x=\"0.000000000\" data-w=\"1.000000000\" data-d=\"0\" data-n=\"all\""),
      std::string::npos);
  // Deterministic.
  EXPECT_EQ(svg, render_flamegraph_svg(build_folded(s, nullptr, &live)));
  // Four kinds, four colour families: at least three distinct fills among frames here.
  std::set<std::string> fills;
  for (size_t pos = svg.find("fill=\"rgb("); pos != std::string::npos; pos = svg.find("fill=\"rgb(", pos + 1))
    fills.insert(svg.substr(pos, svg.find('"', pos + 6) - pos));
  EXPECT_GE(fills.size(), 4u);
}

// Live waits with stack ids: the wait's own user and kernel stacks, then
// after "--" the waker's kernel and user stacks innermost first and the waker
// (offwaketime's layout); a wakeup from interrupt context names no task and
// keeps no user stack. Only waits a recorded wakeup fell into get one.
TEST(Exports, LiveWaitsCarryTheirStacksAndTheirWakersStacks) {
  Snapshot s;
  s.target_pid = 100;
  LiveObservation live;
  live.start_ns = 1'000'000'000ull;
  live.end_ns = 5'000'000'000ull;
  BlockedInterval read_wait{1'100'000'000ull, 1'300'000'000ull, "read fd 3", 7, 8};
  BlockedInterval sleep_wait{1'400'000'000ull, 1'500'000'000ull, "clock_nanosleep", 9, -1};
  BlockedInterval unwoken{2'000'000'000ull, 2'010'000'000ull, "read fd 3", 7, 8};
  live.blocked[101] = {read_wait, sleep_wait, unwoken};
  live.kernel_stacks[7] = {{1, "__schedule+0x1"}, {2, "anon_pipe_read+0x2"}, {3, "ksys_read"}};
  live.kernel_stacks[9] = {{1, "__schedule+0x1"}, {4, "do_nanosleep+0x3"}};
  live.kernel_stacks[11] = {{5, "try_to_wake_up+0x9"}, {6, "anon_pipe_write+0x4"}};
  live.kernel_stacks[12] = {
      {5, "try_to_wake_up+0x9"}, {7, "hrtimer_wakeup"}, {8, "asm_sysvec_apic_timer_interrupt"}};
  UserFrame libc_read;
  libc_read.addr = 0x7f0000f82ad;
  libc_read.file = "/usr/lib/x86_64-linux-gnu/libc.so.6";
  libc_read.module_offset = 0xf82ad;
  UserFrame main_fn;
  main_fn.function = "main";
  live.user_stacks[{101, 8}] = {libc_read, main_fn};
  UserFrame libc_write = libc_read;
  libc_write.function = "write";
  live.user_stacks[{200, 13}] = {libc_write};
  live.user_stacks[{300, 14}] = {main_fn};  // the interrupted task's: not the waker's
  TraceEvent by_writer = wakeup_of(101, 1'299'000'000ull, 200, "writer", 11, 13);
  TraceEvent by_timer = wakeup_of(101, 1'499'000'000ull, 300, "cc1plus", 12, 14);
  live.recent_wakeups[101] = {by_writer, by_timer};
  live.last_waker[101] = by_timer;
  EXPECT_EQ(render_folded(build_folded(s, nullptr, &live)),
            "?/101;?/101;do_nanosleep;__schedule;--;try_to_wake_up;hrtimer_wakeup;"
            "asm_sysvec_apic_timer_interrupt;interrupt 100000\n"
            "?/101;?/101;main;libc.so.6+0xf82ad;ksys_read;anon_pipe_read;__schedule 10000\n"
            "?/101;?/101;main;libc.so.6+0xf82ad;ksys_read;anon_pipe_read;__schedule;--;try_to_wake_up;"
            "anon_pipe_write;write;writer/200 200000\n");
}

// Without a live interval the waker goes on the current wait; a wakeup from
// before that wait began is marked as earlier.
TEST(Exports, WakerOnTheCurrentWait) {
  Snapshot s = fixture();
  LiveObservation live = live_fixture();
  live.blocked.clear();
  std::string folded = render_folded(build_folded(s, nullptr, &live));
  EXPECT_NE(folded.find("pipe_read;--;earlier: pt_data_worker/200 500000\n"), std::string::npos) << folded;
  live.last_waker[101].ts_ns = 9'700'000'000ull;  // during the current wait (from 9.5 s)
  folded = render_folded(build_folded(s, nullptr, &live));
  EXPECT_NE(folded.find("pipe_read;--;pt_data_worker/200 500000\n"), std::string::npos) << folded;
}

TEST(Exports, OddBytesInNamesKeepTheSvgWellFormed) {
  Snapshot s = fixture();
  s.processes[0].threads[1].comm = std::string("bad\xff<&>\x01") + "\xc3\xa9";
  std::string svg = render_flamegraph_svg(build_folded(s, nullptr, nullptr));
  EXPECT_NE(svg.find("bad?&lt;&amp;&gt; \xc3\xa9/101"), std::string::npos);
  EXPECT_EQ(svg.find('\xff'), std::string::npos);
}

TEST(Exports, EmptyProfileStillRenders) {
  Snapshot s;
  s.target_pid = 1;
  FoldedProfile f = build_folded(s, nullptr, nullptr);
  EXPECT_EQ(render_folded(f), "");
  EXPECT_NE(render_flamegraph_svg(f).find("</svg>"), std::string::npos);
  EXPECT_TRUE(render_speedscope(f, "x")["profiles"].empty());
  EXPECT_TRUE(render_chrome_trace(s, nullptr, nullptr)["traceEvents"].is_array());
}

}  // namespace
}  // namespace hangtrace
