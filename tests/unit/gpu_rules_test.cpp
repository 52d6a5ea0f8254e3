// gpu-wait, gpu-starved and collective-wait on hand-built observations: what
// the uprobes, CUPTI and NVML would have recorded, paired with the snapshot's
// host waits.
#include <gtest/gtest.h>

#include <algorithm>

#include "frames.h"
#include "hangtrace/abi.h"
#include "hangtrace/analysis.h"
#include "hangtrace/exports.h"
#include "hangtrace/report.h"
#include "snapshot_builder.h"

namespace hangtrace {
namespace {

constexpr uint64_t kSec = 1'000'000'000ull;
constexpr int64_t kFutex = HT_NR_futex;

// A thread blocked in `nr` (a private futex wait by default) for `blocked_s`.
ThreadInfo blocked_thread(int tid, const std::string& comm, double blocked_s, int64_t nr = kFutex) {
  return testing::thread_in_syscall(tid, comm, blocked_s, nr,
                                    {0x7f0000001000ull, testing::kFutexWaitBitsetPrivate});
}

ThreadInfo running_thread(int tid, const std::string& comm) {
  return testing::thread_on_cpu(tid, comm, 250'000'000);  // it spins
}

ProcessInfo process(int pid, int ppid, ProcessRole role, std::vector<ThreadInfo> threads) {
  ProcessInfo p;
  p.pid = pid;
  p.ppid = ppid;
  p.role = role;
  p.comm = "python3";
  p.state = 'S';
  p.is_python = true;
  p.threads = std::move(threads);
  return p;
}

Snapshot snapshot(int target, std::vector<ProcessInfo> processes, uint64_t sampled_at_ns) {
  Snapshot s;
  s.target_pid = target;
  s.sample_window_s = 0.25;
  s.sampled_at_monotonic_ns = sampled_at_ns;
  s.processes = std::move(processes);
  return s;
}

// A live window of `seconds` ending at `end_ns`.
LiveObservation window(uint64_t end_ns, double seconds) {
  LiveObservation o;
  o.end_ns = end_ns;
  o.start_ns = end_ns - static_cast<uint64_t>(seconds * 1e9);
  o.duration_s = seconds;
  return o;
}

GpuActivity kernel(uint32_t correlation, uint64_t start_ns, uint64_t dur_ns,
                   const std::string& name = "gemm") {
  GpuActivity a;
  a.kind = HT_GPU_ACT_KERNEL;
  a.correlation_id = correlation;
  a.start_ns = start_ns;
  a.end_ns = start_ns + dur_ns;
  a.name = name;
  a.stream_id = 7;
  return a;
}

GpuActivity launch_call(int pid, int tid, uint32_t correlation, uint64_t start_ns) {
  GpuActivity a;
  a.kind = HT_GPU_ACT_DRIVER_API;
  a.name = "cuLaunchKernel";
  a.pid = pid;
  a.tid = tid;
  a.correlation_id = correlation;
  a.start_ns = start_ns;
  a.end_ns = start_ns + 5'000;
  return a;
}

void record_kernel(LiveObservation& o, const GpuActivity& a) {
  o.gpu.activity.push_back(a);
  ++o.gpu.activity_records;
  KernelDurations& d = o.gpu.kernel_durations[a.name];
  ++d.count;
  d.total_ns += a.end_ns - a.start_ns;
  d.max_ns = std::max(d.max_ns, a.end_ns - a.start_ns);
  d.recent_ns.push_back(a.end_ns - a.start_ns);
}

NvmlSample nvml(uint64_t ts, unsigned util) {
  NvmlSample s;
  s.ts_ns = ts;
  s.gpu_util_pct = util;
  s.has_utilization = s.has_power = s.has_memory = true;
  s.power_mw = 71'000;
  s.mem_used_bytes = 70ull << 30;
  s.mem_total_bytes = 140ull << 30;
  return s;
}

const Finding* find_kind(const Diagnosis& d, const std::string& kind) {
  for (const auto& f : d.findings)
    if (finding_kind_name(f.kind) == kind) return &f;
  return nullptr;
}

TEST(GpuWait, SynchronizeSeenByUprobesWithALaunchThatNeverFinished) {
  Snapshot s =
      snapshot(100, {process(100, 1, ProcessRole::Target, {running_thread(100, "python3")})}, 95 * kSec);
  LiveObservation o = window(100 * kSec, 5);
  o.gpu.libraries = {"/usr/lib/x86_64-linux-gnu/libcuda.so.1: 40 uprobes"};
  GpuThreadState t;
  t.pid = t.tid = 100;
  t.comm = "python3";
  t.in_fn = HT_GPU_CTX_SYNCHRONIZE;
  t.in_since_ns = 30 * kSec;
  t.launches = 6;
  t.last_launch_ns = 29 * kSec;
  t.last_sync_end_ns = 20 * kSec;
  o.gpu.threads = {t};
  for (uint32_t c = 1; c <= 5; ++c) {
    o.gpu.activity.push_back(launch_call(100, 100, c, (20 + c) * kSec));
    record_kernel(o, kernel(c, (20 + c) * kSec + 10'000, 2'000'000));
  }
  o.gpu.activity.push_back(launch_call(100, 100, 6, 29 * kSec));  // its kernel never came back

  Diagnosis d = diagnose(s, {}, &o);
  const Finding* f = find_kind(d, "gpu-wait");
  ASSERT_NE(f, nullptr) << d.verdict.summary;
  EXPECT_EQ(f->severity, Severity::Critical);  // 70 s, and 35000x the longest kernel
  EXPECT_EQ(f->confidence, Confidence::Certain);
  EXPECT_EQ(f->details["call"], "cuCtxSynchronize");
  EXPECT_EQ(f->details["source"], "uprobe");
  EXPECT_NEAR(f->details["waited_s"].get<double>(), 70.0, 0.01);
  EXPECT_EQ(f->details["pending_launches"], 1);
  EXPECT_NEAR(f->details["oldest_pending_s"].get<double>(), 71.0, 0.01);
  EXPECT_EQ(f->details["longest_kernel_ns"], 2'000'000u);
  EXPECT_NE(f->summary.find("has not finished"), std::string::npos) << f->summary;
  EXPECT_NE(f->summary.find("1000x the longest kernel"), std::string::npos) << f->summary;
  EXPECT_EQ(d.verdict.status, "hang");
}

TEST(GpuWait, AShortSynchronizeIsNoFinding) {
  Snapshot s =
      snapshot(100, {process(100, 1, ProcessRole::Target, {running_thread(100, "python3")})}, 95 * kSec);
  LiveObservation o = window(100 * kSec, 5);
  GpuThreadState t;
  t.pid = t.tid = 100;
  t.in_fn = HT_GPU_STREAM_SYNCHRONIZE;
  t.in_since_ns = 98 * kSec;  // 2 s: a long step, not a hang
  o.gpu.threads = {t};
  Diagnosis d = diagnose(s, {}, &o);
  EXPECT_EQ(find_kind(d, "gpu-wait"), nullptr);
}

// Attached long after the synchronize began: only the stack shows it.
TEST(GpuWait, SynchronizeThatBeganBeforeAttachIsFoundInTheNativeStack) {
  ThreadInfo main = blocked_thread(100, "python3", 600);
  UserFrame cu;
  cu.function = "cuStreamSynchronize_ptsz";
  cu.file = "/usr/lib/x86_64-linux-gnu/libcuda.so.1";
  UserFrame rt;
  rt.function = "cudaStreamSynchronize";
  main.native_stack = {cu, rt};
  Snapshot s = snapshot(100, {process(100, 1, ProcessRole::Target, {main})}, 95 * kSec);
  Diagnosis d = diagnose(s);
  const Finding* f = find_kind(d, "gpu-wait");
  ASSERT_NE(f, nullptr) << d.verdict.summary;
  EXPECT_EQ(f->details["call"], "cuStreamSynchronize");
  EXPECT_EQ(f->details["source"], "native stack");
  EXPECT_EQ(f->severity, Severity::Critical);  // 10 minutes
  EXPECT_NEAR(f->details["waited_s"].get<double>(), 600.0, 0.01);
}

TEST(GpuWait, TorchCudaSynchronizeInThePythonStackIsProbable) {
  ThreadInfo main = blocked_thread(100, "python3", 20);
  UserFrame sync;
  sync.kind = UserFrame::Kind::Python;
  sync.function = "synchronize";
  sync.file = "/usr/lib/python3/dist-packages/torch/cuda/__init__.py";
  sync.line = 566;
  main.python_stack = {sync};
  Snapshot s = snapshot(100, {process(100, 1, ProcessRole::Target, {main})}, 95 * kSec);
  Diagnosis d = diagnose(s);
  const Finding* f = find_kind(d, "gpu-wait");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->confidence, Confidence::Probable);
  EXPECT_EQ(f->severity, Severity::Warning);  // 20 s: long, not yet critical
  EXPECT_EQ(f->details["source"], "python stack");
}

// The seed's "GPU memory full, 0% utilization": the thread that launches the
// kernels waits on a lock.
LiveObservation starved_window(unsigned util) {
  LiveObservation o = window(100 * kSec, 5);
  o.gpu.libraries = {"/usr/lib/x86_64-linux-gnu/libcuda.so.1: 40 uprobes"};
  o.gpu.cuda_pids = {100};
  GpuThreadState feeder;
  feeder.pid = 100;
  feeder.tid = 101;
  feeder.comm = "feeder";
  feeder.launches = 5000;
  feeder.last_launch_ns = 80 * kSec;
  o.gpu.threads = {feeder};
  o.gpu.nvml_devices = {{0, "NVIDIA H200"}};
  for (uint64_t t = 96; t <= 100; ++t) o.gpu.nvml.push_back(nvml(t * kSec, util));
  return o;
}

// The main thread waits for a child; thread 101, which launched the kernels, waits on a lock.
Snapshot starved_snapshot() {
  return snapshot(100,
                  {process(100, 1, ProcessRole::Target,
                           {blocked_thread(100, "python3", 30, 61), blocked_thread(101, "feeder", 20)})},
                  95 * kSec);
}

TEST(GpuStarved, IdleGpuWhoseFeederWaitsOnALock) {
  Snapshot s = starved_snapshot();
  LiveObservation o = starved_window(0);
  Diagnosis d = diagnose(s, {}, &o);
  const Finding* f = find_kind(d, "gpu-starved");
  ASSERT_NE(f, nullptr) << d.verdict.summary;
  EXPECT_EQ(f->details["feeder_tid"], 101);
  ASSERT_FALSE(f->chain.empty());
  EXPECT_EQ(f->chain[0].from, "GPU");
  EXPECT_NE(f->chain[0].to.find("101"), std::string::npos) << f->chain[0].to;
  ASSERT_GE(f->chain.size(), 2u);
  EXPECT_EQ(f->chain[1].edge, "waits on");  // into the host wait chain
  bool nvml_line = false;
  for (const auto& e : f->evidence)
    nvml_line |= e.find("NVML: GPU 0 (NVIDIA H200) utilization at most 0%") == 0;
  EXPECT_TRUE(nvml_line);
  EXPECT_NE(f->summary.find("the thread that feeds it"), std::string::npos);
}

// Launch mode's window spans the whole run: the GPU was busy before the
// feeder blocked, idle since.
TEST(GpuStarved, IdlenessIsJudgedOnTheEndOfALongWindow) {
  Snapshot s = starved_snapshot();
  LiveObservation o = starved_window(0);
  o.start_ns = 40 * kSec;
  o.duration_s = 60;
  for (uint64_t t = 41; t <= 80; ++t) o.gpu.nvml.push_front(nvml(t * kSec, 98));
  std::sort(o.gpu.nvml.begin(), o.gpu.nvml.end(), [](auto& a, auto& b) { return a.ts_ns < b.ts_ns; });
  Diagnosis d = diagnose(s, {}, &o);
  const Finding* f = find_kind(d, "gpu-starved");
  ASSERT_NE(f, nullptr) << d.verdict.summary;
  bool nvml_line = false;
  for (const auto& e : f->evidence)
    nvml_line |= e.find("utilization at most 0% in 5 samples over the last 5.0 s") != std::string::npos;
  EXPECT_TRUE(nvml_line) << nlohmann::json(f->evidence).dump(1);
}

TEST(GpuStarved, NotWhenTheGpuIsBusy) {
  Snapshot s = starved_snapshot();
  LiveObservation o = starved_window(97);
  Diagnosis d = diagnose(s, {}, &o);
  EXPECT_EQ(find_kind(d, "gpu-starved"), nullptr);
}

TEST(GpuStarved, NotWhenNothingCanTellIdleness) {
  Snapshot s =
      snapshot(100, {process(100, 1, ProcessRole::Target, {blocked_thread(100, "python3", 30)})}, 95 * kSec);
  Diagnosis d = diagnose(s);  // no live window: no GPU reading at all
  EXPECT_EQ(find_kind(d, "gpu-starved"), nullptr);
}

using testing::py;

// The launcher: main 100 waits for its children (wait4), the ranks.
ProcessInfo launcher() {
  return process(100, 1, ProcessRole::Target, {blocked_thread(100, "python3", 50, 61)});
}

// `p` as rank `rank` of a world of 2 (its environment says so).
ProcessInfo as_rank(ProcessInfo p, int rank) {
  p.rank = rank;
  p.world_size = 2;
  return p;
}

// Rank `rank` (pid 200 + rank), a child of the launcher, inside all_reduce for 40 s.
ProcessInfo rank_in_all_reduce(int rank) {
  ThreadInfo t = blocked_thread(200 + rank, "python3", 40);
  t.python_stack = {py("all_reduce", "/x/torch/distributed/distributed_c10d.py", 1536)};
  return as_rank(process(200 + rank, 100, ProcessRole::Descendant, {t}), rank);
}

TEST(CollectiveWait, GlooRankInAllReduceWhilePeerRankIsElsewhere) {
  ThreadInfo r0 = blocked_thread(200, "python3", 40);
  r0.python_stack = {
      py("all_reduce", "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py", 1536),
      py("train", "/job/train.py", 30)};
  ThreadInfo r1 = blocked_thread(300, "python3", 41, 0);
  r1.python_stack = {py("save_checkpoint", "/job/train.py", 12), py("train", "/job/train.py", 34)};
  ProcessInfo p0 = as_rank(process(200, 100, ProcessRole::Descendant, {r0}), 0);
  ProcessInfo p1 = as_rank(process(300, 100, ProcessRole::Descendant, {r1}), 1);
  Snapshot s = snapshot(100, {launcher(), p0, p1}, 95 * kSec);
  Diagnosis d = diagnose(s);
  const Finding* f = find_kind(d, "collective-wait");
  ASSERT_NE(f, nullptr) << d.verdict.summary;
  EXPECT_EQ(f->details["collective"], "all_reduce");
  ASSERT_EQ(f->details["waiting"].size(), 1u);
  EXPECT_EQ(f->details["waiting"][0]["pid"], 200);
  EXPECT_EQ(f->details["waiting"][0]["rank"], 0);
  ASSERT_EQ(f->details["absent"].size(), 1u);
  EXPECT_EQ(f->details["absent"][0]["pid"], 300);
  EXPECT_EQ(f->details["absent"][0]["rank"], 1);
  EXPECT_NE(f->details["absent"][0]["doing"].get<std::string>().find("save_checkpoint"), std::string::npos);
  EXPECT_NE(f->summary.find("rank 0 (pid 200)"), std::string::npos) << f->summary;
  EXPECT_NE(f->summary.find("rank 1 (pid 300)"), std::string::npos) << f->summary;
  EXPECT_EQ(f->confidence, Confidence::Certain);
  EXPECT_EQ(f->severity, Severity::Critical);
  EXPECT_EQ(d.verdict.status, "hang");
}

TEST(CollectiveWait, NoFindingWhenEveryRankIsInTheCollective) {
  std::vector<ProcessInfo> procs = {launcher(), rank_in_all_reduce(0), rank_in_all_reduce(1)};
  Diagnosis d = diagnose(snapshot(100, procs, 95 * kSec));
  EXPECT_EQ(find_kind(d, "collective-wait"), nullptr);
}

// DataLoader workers inherit RANK from their rank's environment: a worker
// busy elsewhere is not a rank absent from the collective.
TEST(CollectiveWait, WorkersWithTheirRanksEnvironmentAreNotRanks) {
  std::vector<ProcessInfo> procs = {launcher()};
  for (int r = 0; r < 2; ++r) {
    procs.push_back(rank_in_all_reduce(r));
    ThreadInfo wt = blocked_thread(300 + r, "pt_data_worker", 41, 0);
    wt.python_stack = {py("_worker_loop", "/x/torch/utils/data/_utils/worker.py", 308)};
    procs.push_back(as_rank(process(300 + r, 200 + r, ProcessRole::Descendant, {wt}), r));
  }
  Diagnosis d = diagnose(snapshot(100, procs, 95 * kSec));
  EXPECT_EQ(find_kind(d, "collective-wait"), nullptr) << d.verdict.summary;
}

// One rank per host (torchrun --nproc-per-node 1): its peers run on other
// hosts, whose snapshots alone can say which one is not in the collective.
TEST(CollectiveWait, RanksOnOtherHostsArePointedAtOncePastStallAfter) {
  auto alone = [](int world, double blocked_s) {
    ThreadInfo t = blocked_thread(200, "python3", blocked_s);
    t.python_stack = {py("all_reduce", "/x/torch/distributed/distributed_c10d.py", 1536)};
    // With gloo's own threads: a lone thread on a private futex is another finding.
    ProcessInfo p = as_rank(process(200, 1, ProcessRole::Target, {t, running_thread(201, "python3")}), 0);
    p.world_size = world;
    return snapshot(200, {p}, 95 * kSec);
  };
  Diagnosis d = diagnose(alone(4, 40));
  const Finding* f = find_kind(d, "collective-wait");
  ASSERT_NE(f, nullptr) << d.verdict.summary;
  EXPECT_EQ(f->severity, Severity::Warning);
  EXPECT_EQ(f->confidence, Confidence::Probable);
  EXPECT_EQ(f->details["remote_ranks"], nlohmann::json({1, 2, 3}));
  EXPECT_EQ(f->details["remote_rank_count"], 3);
  EXPECT_EQ(f->details["absent"], nlohmann::json::array());
  EXPECT_EQ(f->details["waiting"][0]["rank"], 0);
  EXPECT_NE(f->summary.find("rank 0 (pid 200) has waited"), std::string::npos) << f->summary;
  EXPECT_NE(f->summary.find("in all_reduce for the ranks on other hosts (ranks 1-3 of world size 4)"),
            std::string::npos)
      << f->summary;
  ASSERT_FALSE(f->advice.empty());
  EXPECT_NE(f->advice.front().find("hangtrace merge --prometheus URL --job ID"), std::string::npos);
  EXPECT_EQ(d.verdict.status, "suspect") << d.verdict.summary;

  // A healthy job's rank sits in all_reduce briefly: nothing to say.
  EXPECT_EQ(find_kind(diagnose(alone(4, 2)), "collective-wait"), nullptr);
  // The only rank of its world: no peer to wait for.
  EXPECT_EQ(find_kind(diagnose(alone(1, 40)), "collective-wait"), nullptr);
  // A WORLD_SIZE from a hostile environment is counted, never listed.
  Diagnosis hostile = diagnose(alone(2147483647, 40));
  const Finding* huge = find_kind(hostile, "collective-wait");
  ASSERT_NE(huge, nullptr);
  EXPECT_EQ(huge->details["remote_ranks"], nlohmann::json::array());
  EXPECT_EQ(huge->details["remote_rank_count"], 2147483646);
  EXPECT_NE(huge->summary.find("(2147483646 ranks of world size 2147483647)"), std::string::npos)
      << huge->summary;
}

// NCCL collectives return at once; the rank that never issued #57 is the
// one with fewer calls.
TEST(CollectiveWait, NcclRankBehindByItsCallCount) {
  std::vector<ProcessInfo> procs = {launcher()};
  for (int r = 0; r < 2; ++r)
    procs.push_back(
        as_rank(process(200 + r, 100, ProcessRole::Descendant, {running_thread(200 + r, "python3")}), r));
  LiveObservation o = window(100 * kSec, 5);
  GpuThreadState in_call;
  in_call.pid = in_call.tid = 200;
  in_call.in_fn = HT_GPU_NCCL_ALL_REDUCE;
  in_call.in_since_ns = 96 * kSec;
  in_call.collectives = 57;
  GpuThreadState behind;
  behind.pid = behind.tid = 201;
  behind.collectives = 56;
  o.gpu.threads = {in_call, behind};
  Diagnosis d = diagnose(snapshot(100, procs, 95 * kSec), {}, &o);
  const Finding* f = find_kind(d, "collective-wait");
  ASSERT_NE(f, nullptr) << d.verdict.summary;
  EXPECT_EQ(f->details["backend"], "nccl");
  EXPECT_EQ(f->details["waiting"][0]["pid"], 200);
  EXPECT_EQ(f->details["absent"][0]["pid"], 201);
  EXPECT_EQ(f->details["absent"][0]["nccl_calls"], 56);
}

TEST(GpuReport, LiveJsonCarriesTheGpuSide) {
  Snapshot s =
      snapshot(100, {process(100, 1, ProcessRole::Target, {running_thread(100, "python3")})}, 95 * kSec);
  LiveObservation o = starved_window(0);
  o.gpu.nvml_status = "";
  o.gpu.cupti_status = {"CUPTI activity enabled (kernel, memcpy, memset, sync, driver, runtime)"};
  Diagnosis d = diagnose(s, {}, &o);
  nlohmann::json j = render_json(s, d, &o);
  const auto& g = j["live"]["gpu"];
  EXPECT_EQ(g["threads"][0]["launches"], 5000);
  EXPECT_EQ(g["nvml"]["samples"].size(), 5u);
  EXPECT_EQ(g["nvml"]["devices"][0]["name"], "NVIDIA H200");
  EXPECT_EQ(g["cuda_pids"][0], 100);
  std::string text = render_text(s, d, {}, &o);
  EXPECT_NE(text.find("GPU 0 (NVIDIA H200): utilization 0-0% over 5 samples"), std::string::npos) << text;
  EXPECT_NE(text.find("5000 launches"), std::string::npos) << text;
}

// Kineto's conventions: kernels on (device, stream) tracks, a flow from the
// launch on its host thread to the kernel, host CUDA calls on their thread.
TEST(GpuTimeline, KernelsOnDeviceStreamTracksWithLaunchFlows) {
  Snapshot s =
      snapshot(100, {process(100, 1, ProcessRole::Target, {running_thread(100, "python3")})}, 95 * kSec);
  LiveObservation o = window(100 * kSec, 5);
  o.gpu.activity.push_back(launch_call(100, 100, 42, 96 * kSec));
  GpuActivity k = kernel(42, 96 * kSec + 20'000, 3'000'000, "_Z4gemmPfS_i");
  k.device_id = 1;
  record_kernel(o, k);
  GpuCall sync;
  sync.pid = sync.tid = 100;
  sync.fn = HT_GPU_STREAM_SYNCHRONIZE;
  sync.start_ns = 97 * kSec;
  sync.end_ns = 98 * kSec;
  o.gpu.calls.push_back(sync);
  GpuThreadState t;
  t.pid = t.tid = 100;
  t.in_fn = HT_GPU_NCCL_ALL_REDUCE;
  t.in_since_ns = 99 * kSec;
  t.collectives = 3;
  o.gpu.threads = {t};
  nlohmann::json trace = render_chrome_trace(s, nullptr, &o);
  const nlohmann::json *kernel_event = nullptr, *launch = nullptr, *flow_start = nullptr, *flow_end = nullptr,
                       *sync_event = nullptr, *ongoing = nullptr;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "X" && e["cat"] == "kernel") kernel_event = &e;
    if (e["ph"] == "X" && e["cat"] == "cuda_driver") launch = &e;
    if (e["ph"] == "s" && e["cat"] == "ac2g") flow_start = &e;
    if (e["ph"] == "f" && e["cat"] == "ac2g") flow_end = &e;
    if (e["ph"] == "X" && e["name"] == "cuStreamSynchronize") sync_event = &e;
    if (e["ph"] == "X" && e["name"] == "ncclAllReduce #3") ongoing = &e;
  }
  ASSERT_TRUE(kernel_event && launch && flow_start && flow_end && sync_event && ongoing) << trace.dump(1);
  EXPECT_EQ((*kernel_event)["pid"], kTraceGpuPidBase + 1);
  EXPECT_EQ((*kernel_event)["tid"], 8);  // stream 7
  EXPECT_EQ((*kernel_event)["name"], "gemm(float*, float*, int)");
  EXPECT_DOUBLE_EQ((*kernel_event)["dur"].get<double>(), 3000.0);
  EXPECT_EQ((*launch)["pid"], 100);
  EXPECT_EQ((*flow_start)["id"], 42);
  EXPECT_EQ((*flow_end)["id"], 42);
  EXPECT_EQ((*flow_start)["tid"], 100);
  EXPECT_EQ((*flow_end)["pid"], kTraceGpuPidBase + 1);
  EXPECT_EQ((*flow_end)["bp"], "e");
  EXPECT_EQ((*sync_event)["cat"], "cuda_host_wait");
  EXPECT_TRUE((*ongoing)["args"]["ongoing"].get<bool>());
  EXPECT_DOUBLE_EQ((*ongoing)["dur"].get<double>(), 1e6);
  bool stream_named = false;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["pid"] == kTraceGpuPidBase + 1 && e["tid"] == 8)
      stream_named = e["args"]["name"].get<std::string>().starts_with("stream 7");
  EXPECT_TRUE(stream_named);
}

}  // namespace
}  // namespace hangtrace
