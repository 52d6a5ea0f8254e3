// CUDA driver and NCCL host calls, live (root + BTF), without a GPU: the
// test's stub libcuda.so.1 and libnccl.so.2 export the real names with the
// real argument lists, repro_gpu_calls dlopen()s them as PyTorch dlopen()s
// libcuda, and the gpu concern's uprobes fire for real. The stub
// cuCtxSynchronize blocks until the test says so (HT_STUB_CUDA_SYNC_FD=0:
// one byte from the repro's stdin), so the "in cuCtxSynchronize since T"
// state of a thread that has not returned is asserted as a hang shows it.
#include <signal.h>
#include <sys/syscall.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "hangtrace/abi.h"
#include "hangtrace/gpu.h"
#include "hangtrace/live.h"
#include "live_records.h"
#include "live_tracer.h"
#include "support.h"

namespace hangtrace::testing {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kStream = 0x5151;
constexpr uint64_t kComm = 0x1234;
// Functions of the table in live_gpu.cpp that each stub defines (all of them).
constexpr int kStubCudaFunctions = 45;
constexpr int kNcclFunctions = 10;

// The repro on the stub libraries, printed its LOADED line. With
// `hold_sync`, its cuCtxSynchronize waits for a release().
struct GpuRepro {
  std::unique_ptr<Workload> w;
  int pid = -1, tid = -1;
  std::unique_ptr<LiveTracer> tracer;  // trace()'s

  explicit GpuRepro(bool hold_sync,
                    std::vector<std::string> args = {HT_STUB_CUDA_LIBRARY, HT_STUB_NCCL_LIBRARY}) {
    std::vector<std::string> argv{repro_path("repro_gpu_calls")};
    argv.insert(argv.end(), args.begin(), args.end());
    if (hold_sync) setenv("HT_STUB_CUDA_SYNC_FD", "0", 1);
    w = std::make_unique<Workload>(argv, /*gated_stdin=*/true);
    unsetenv("HT_STUB_CUDA_SYNC_FD");
    std::string loaded = w->wait_for_line("LOADED", 20s);
    pid = field(loaded, "pid");
    tid = field(loaded, "tid");
  }

  // Starts tracing the repro (before it makes its calls), streaming host
  // waits of at least `min_block_ns`.
  void trace(uint64_t min_block_ns = LiveOptions{}.min_block_ns) {
    ASSERT_GT(pid, 0);
    LiveOptions opt;
    opt.tgids = {pid};
    opt.min_block_ns = min_block_ns;
    auto started = LiveTracer::start(opt);
    ASSERT_TRUE(started) << started.error();
    tracer = std::move(*started);
  }
};

// What LiveSession does on each re-read of /proc/PID/maps: every file the
// process maps executable goes to the tracer.
void notice_maps(LiveTracer& t, int pid) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  std::set<std::string> files;
  for (std::string line; std::getline(maps, line);) {
    std::istringstream in(line);
    std::string range, perms, offset, dev, inode, path;
    in >> range >> perms >> offset >> dev >> inode;
    std::getline(in >> std::ws, path);
    if (perms.size() > 2 && perms[2] == 'x' && !path.empty() && path[0] == '/') files.insert(path);
  }
  for (const auto& f : files) t.notice_mapped_file(pid, f);
}

std::vector<HookStatus> gpu_hooks(const LiveTracer& t) {
  std::vector<HookStatus> out;
  for (const auto& h : t.hooks())
    if (h.concern == "gpu") out.push_back(h);
  return out;
}

// As `hangtrace --list-hooks` prints them.
std::string hook_listing(const LiveTracer& t) {
  std::ostringstream os;
  for (const auto& h : gpu_hooks(t))
    os << "  " << h.concern << " " << (h.active ? "active" : "inactive") << " " << h.attach << " " << h.reason
       << "\n";
  return os.str();
}

LiveObservation gpu_state(const LiveTracer& t) {
  LiveObservation o;
  t.contribute(o);
  return o;
}

const GpuThreadState* thread_of(const LiveObservation& o, int tid) {
  for (const auto& s : o.gpu.threads)
    if (s.tid == tid) return &s;
  return nullptr;
}

std::vector<GpuCall> gpu_calls(const Collected& c, int tgid) {
  std::vector<GpuCall> out;
  for (const auto& r : c.records) {
    if (Collected::header(r).type != HT_EV_GPU_CALL || static_cast<int>(Collected::header(r).tgid) != tgid)
      continue;
    auto e = decode_event(r.data(), r.size());
    if (e) out.push_back(e->gpu_call);
  }
  return out;
}

std::vector<GpuCall> calls_of(const std::vector<GpuCall>& calls, uint32_t fn) {
  std::vector<GpuCall> out;
  for (const auto& c : calls)
    if (c.fn == fn) out.push_back(c);
  return out;
}

std::string describe(const std::vector<GpuCall>& calls) {
  std::ostringstream os;
  for (const auto& c : calls)
    os << "  " << gpu_fn_name(c.fn) << " seq " << c.seq << " tid " << c.tid << " count " << c.count
       << " datatype " << c.datatype << " peer " << c.peer << " comm 0x" << std::hex << c.handle
       << " stream 0x" << c.stream << std::dec << " ret " << c.ret << " " << (c.end_ns - c.start_ns) / 1000
       << " us\n";
  return os.str();
}

std::string describe(const GpuThreadState* s) {
  if (!s) return "(no state)";
  std::ostringstream os;
  os << "tid " << s->tid << " pid " << s->pid << " comm " << s->comm << " in " << gpu_fn_name(s->in_fn)
     << " since " << s->in_since_ns << " launches " << s->launches << " syncs " << s->syncs << " collectives "
     << s->collectives << " group depth " << s->nccl_group_depth;
  return os.str();
}

// Polls (collecting records) until thread `tid` is inside `fn`; its state then.
std::optional<GpuThreadState> wait_until_in(LiveTracer& t, Collected& c, int tid, uint32_t fn) {
  std::optional<GpuThreadState> seen;
  poll_until(t, c, [&] {
    auto o = gpu_state(t);
    const GpuThreadState* s = thread_of(o, tid);
    if (s && s->in_fn == fn) seen = *s;
    return seen.has_value();
  });
  return seen;
}

// Lets the traced repro make its calls; its thread's state once it is inside
// cuCtxSynchronize (records collected meanwhile), nullopt if it never is.
std::optional<GpuThreadState> run_until_synchronizing(GpuRepro& repro, Collected& c) {
  repro.w->release();
  if (repro.w->wait_for_line("syncing", 20s) != "syncing") return std::nullopt;
  return wait_until_in(*repro.tracer, c, repro.tid, HT_GPU_CTX_SYNCHRONIZE);
}

// Holds the repro in its cuCtxSynchronize for at least `hold` (collecting
// records meanwhile), releases it and waits for its "done"; how long it was
// held, from its entry.
uint64_t hold_then_release(LiveTracer& t, Collected& c, GpuRepro& repro, uint64_t in_since_ns,
                           std::chrono::milliseconds hold) {
  ::hangtrace::testing::drain(t, c, hold);
  uint64_t held = monotonic_now_ns() - in_since_ns;
  repro.w->release();
  EXPECT_EQ(repro.w->wait_for_line("done", 20s), "done");
  return held;
}

TEST(LiveGpu, HooksWaitForALibraryThenOnePerLibrary) {
  HANGTRACE_REQUIRE_BPF();
  GpuRepro repro(false);
  ASSERT_NO_FATAL_FAILURE(repro.trace());
  auto& t = *repro.tracer;

  auto hooks = gpu_hooks(t);
  ASSERT_EQ(hooks.size(), 1u) << hook_listing(t);
  EXPECT_FALSE(hooks[0].active);
  EXPECT_EQ(hooks[0].program, "gpu_call_enter");
  EXPECT_EQ(hooks[0].reason, "standby: no traced process maps libcuda or libnccl (yet)");

  t.notice_mapped_file(repro.pid, "/proc/self/exe-is-not-a-library");
  t.notice_mapped_file(repro.pid, repro_path("repro_gpu_calls"));
  EXPECT_EQ(gpu_hooks(t).size(), 1u) << hook_listing(t);

  notice_maps(t, repro.pid);
  notice_maps(t, repro.pid);  // a re-read: the same files, nothing attached twice
  std::cout << hook_listing(t);
  hooks = gpu_hooks(t);
  ASSERT_EQ(hooks.size(), 2u) << hook_listing(t);
  std::set<std::string> attaches;
  for (const auto& h : hooks) {
    EXPECT_TRUE(h.active) << h.attach << ": " << h.reason;
    EXPECT_EQ(h.reason, "");
    attaches.insert(h.attach);
  }
  std::string cuda = HT_STUB_CUDA_LIBRARY, nccl = HT_STUB_NCCL_LIBRARY;
  EXPECT_TRUE(attaches.count("uprobe:" + cuda + " (" + std::to_string(kStubCudaFunctions) + " functions)"))
      << hook_listing(t);
  EXPECT_TRUE(attaches.count("uprobe:" + nccl + " (" + std::to_string(kNcclFunctions) + " functions)"))
      << hook_listing(t);

  auto o = gpu_state(t);
  std::set<std::string> libraries(o.gpu.libraries.begin(), o.gpu.libraries.end());
  EXPECT_TRUE(libraries.count(cuda + ": " + std::to_string(kStubCudaFunctions) + " uprobes"));
  EXPECT_TRUE(libraries.count(nccl + ": " + std::to_string(kNcclFunctions) + " uprobes"));
  EXPECT_TRUE(o.gpu.cuda_pids.count(repro.pid));
  EXPECT_TRUE(o.gpu.threads.empty()) << "no call made yet";
}

TEST(LiveGpu, ThreadInCtxSynchronizeItsCallsAndNothingOfAnUntracedProcess) {
  HANGTRACE_REQUIRE_BPF();
  GpuRepro repro(true);
  ASSERT_GT(repro.tid, 0);
  ASSERT_NO_FATAL_FAILURE(repro.trace(0));  // every host wait streamed, the quick copies too
  auto& t = *repro.tracer;
  notice_maps(t, repro.pid);
  ASSERT_EQ(gpu_hooks(t).size(), 2u) << hook_listing(t);

  // The same calls from a process outside the traced set, on the same
  // probed files (pid -1 uprobes fire for it too): the programs must drop them.
  GpuRepro untraced(false);
  ASSERT_GT(untraced.pid, 0);
  untraced.w->release();
  ASSERT_EQ(untraced.w->wait_for_line("syncing", 20s), "syncing");
  ASSERT_EQ(untraced.w->wait_for_line("done", 20s), "done");

  Collected c;
  const uint64_t t0 = monotonic_now_ns();
  repro.w->release();
  ASSERT_EQ(repro.w->wait_for_line("syncing", 20s), "syncing");
  auto in_sync = wait_until_in(t, c, repro.tid, HT_GPU_CTX_SYNCHRONIZE);
  ASSERT_TRUE(in_sync) << describe(thread_of(gpu_state(t), repro.tid));
  const GpuThreadState& s = *in_sync;
  const uint64_t seen_at = monotonic_now_ns();

  // The thread blocked in cuCtxSynchronize, as a hang shows it.
  EXPECT_EQ(s.pid, repro.pid);
  EXPECT_EQ(s.comm, "repro_gpu_calls");
  EXPECT_GE(s.in_since_ns, t0);
  EXPECT_LE(s.in_since_ns, seen_at);
  EXPECT_EQ(s.in_stream, 0u);
  // 100 cuLaunchKernel, 1 cuLaunchKernelEx, and the kernels the 3 ncclAllReduce
  // and the ncclBcast launched inside.
  EXPECT_EQ(s.launches, 105u);
  EXPECT_GE(s.last_launch_ns, t0);
  EXPECT_LE(s.last_launch_ns, s.in_since_ns);
  EXPECT_EQ(s.syncs, 5u) << "3 cuMemcpyHtoD, 1 cuMemsetD32, the cuCtxSynchronize";
  EXPECT_GE(s.last_sync_end_ns, t0);
  EXPECT_LE(s.last_sync_end_ns, s.in_since_ns);
  // 3 ncclAllReduce, 1 ncclBcast (which calls ncclBroadcast: one transfer), 1 ncclSend.
  EXPECT_EQ(s.collectives, 5u);
  EXPECT_EQ(s.last_collective_fn, static_cast<uint32_t>(HT_GPU_NCCL_SEND));
  EXPECT_EQ(s.last_collective_count, 256u);
  EXPECT_EQ(s.last_collective_comm, kComm);
  EXPECT_EQ(s.last_collective_datatype, 2);  // ncclInt32
  EXPECT_LE(s.last_collective_ns, s.in_since_ns);
  EXPECT_EQ(s.nccl_group_depth, 1u);

  uint64_t held = hold_then_release(t, c, repro, s.in_since_ns, 300ms);
  ASSERT_TRUE(poll_until(t, c, [&] {
    return !calls_of(gpu_calls(c, repro.pid), HT_GPU_CTX_SYNCHRONIZE).empty();
  })) << c.summary();
  ::hangtrace::testing::drain(t, c);
  auto calls = gpu_calls(c, repro.pid);
  std::cout << describe(calls);

  auto sync = calls_of(calls, HT_GPU_CTX_SYNCHRONIZE);
  ASSERT_EQ(sync.size(), 1u) << describe(calls);
  EXPECT_EQ(sync[0].tid, repro.tid);
  EXPECT_EQ(sync[0].start_ns, s.in_since_ns);
  EXPECT_GE(sync[0].end_ns - sync[0].start_ns, held);
  EXPECT_EQ(sync[0].ret, 0);
  EXPECT_GE(sync[0].ustack_id, 0);
  EXPECT_FALSE(t.stack(sync[0].ustack_id).empty());

  std::vector<GpuCall> nccl;
  for (const auto& call : calls)
    if (gpu_fn_is_nccl(call.fn)) nccl.push_back(call);
  ASSERT_EQ(nccl.size(), 5u) << describe(calls);
  for (size_t i = 0; i < nccl.size(); ++i) {
    EXPECT_EQ(nccl[i].seq, i + 1) << describe(nccl);
    EXPECT_EQ(nccl[i].handle, kComm) << describe(nccl);
    EXPECT_EQ(nccl[i].stream, kStream) << describe(nccl);  // ncclAllReduce's 7th: on the stack
    EXPECT_EQ(nccl[i].tid, repro.tid);
    EXPECT_GE(nccl[i].ustack_id, 0);
  }
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(nccl[i].fn, static_cast<uint32_t>(HT_GPU_NCCL_ALL_REDUCE)) << describe(nccl);
    EXPECT_EQ(nccl[i].count, 1024u);
    EXPECT_EQ(nccl[i].datatype, 7);  // ncclFloat32
    EXPECT_EQ(nccl[i].peer, -1);
  }
  EXPECT_EQ(nccl[3].fn, static_cast<uint32_t>(HT_GPU_NCCL_BROADCAST)) << describe(nccl);
  EXPECT_EQ(nccl[3].count, 64u);
  EXPECT_EQ(nccl[3].datatype, 0);  // ncclInt8
  EXPECT_EQ(nccl[3].peer, 2);      // the root
  EXPECT_EQ(nccl[4].fn, static_cast<uint32_t>(HT_GPU_NCCL_SEND)) << describe(nccl);
  EXPECT_EQ(nccl[4].count, 256u);
  EXPECT_EQ(nccl[4].datatype, 2);
  EXPECT_EQ(nccl[4].peer, 1);

  auto copies = calls_of(calls, HT_GPU_MEMCPY);
  ASSERT_EQ(copies.size(), 3u) << describe(calls);
  for (const auto& copy : copies) EXPECT_EQ(copy.count, 4096u);
  auto fills = calls_of(calls, HT_GPU_MEMSET);
  ASSERT_EQ(fills.size(), 1u) << describe(calls);
  EXPECT_EQ(fills[0].count, 1024u) << "cuMemsetD32 of 256 words";
  EXPECT_TRUE(calls_of(calls, HT_GPU_LAUNCH_KERNEL).empty()) << "launches are counted, not streamed";
  EXPECT_EQ(calls.size(), 10u) << describe(calls);

  auto after = gpu_state(t);
  const GpuThreadState* done = thread_of(after, repro.tid);
  ASSERT_NE(done, nullptr);
  EXPECT_EQ(done->in_fn, 0u) << describe(done);
  EXPECT_EQ(done->last_sync_end_ns, sync[0].end_ns);

  EXPECT_TRUE(gpu_calls(c, untraced.pid).empty()) << describe(gpu_calls(c, untraced.pid));
  EXPECT_EQ(c.count_tgid(untraced.pid), 0u);
  for (const auto& other : after.gpu.threads) EXPECT_NE(other.pid, untraced.pid) << describe(&other);
}

TEST(LiveGpu, QuickHostWaitsAreNotStreamedNcclCallsAlwaysAre) {
  HANGTRACE_REQUIRE_BPF();
  GpuRepro repro(true);
  const uint64_t min_block_ns = 100'000'000;
  ASSERT_NO_FATAL_FAILURE(repro.trace(min_block_ns));
  auto& t = *repro.tracer;
  notice_maps(t, repro.pid);

  Collected c;
  auto in_sync = run_until_synchronizing(repro, c);
  ASSERT_TRUE(in_sync) << describe(thread_of(gpu_state(t), repro.tid));
  uint64_t held = hold_then_release(t, c, repro, in_sync->in_since_ns, 200ms);
  ASSERT_GE(held, min_block_ns);
  ASSERT_TRUE(poll_until(t, c, [&] {
    return !calls_of(gpu_calls(c, repro.pid), HT_GPU_CTX_SYNCHRONIZE).empty();
  })) << c.summary();
  ::hangtrace::testing::drain(t, c);
  auto calls = gpu_calls(c, repro.pid);
  EXPECT_TRUE(calls_of(calls, HT_GPU_MEMCPY).empty()) << describe(calls);
  EXPECT_TRUE(calls_of(calls, HT_GPU_MEMSET).empty()) << describe(calls);
  EXPECT_EQ(calls_of(calls, HT_GPU_CTX_SYNCHRONIZE).size(), 1u) << describe(calls);
  size_t nccl = 0;
  for (const auto& call : calls) nccl += gpu_fn_is_nccl_transfer(call.fn);
  EXPECT_EQ(nccl, 5u) << describe(calls);
}

// A call whose return is never seen (the thread left it by siglongjmp; in
// the field, a call already running when its return probe went in) must not
// hold the thread "in" it: the calls the thread makes afterwards are its
// own, not nested in the dead one.
TEST(LiveGpu, ACallLeftWithoutItsReturnDoesNotSwallowTheNext) {
  HANGTRACE_REQUIRE_BPF();
  GpuRepro repro(true, {"--unseen-return", HT_STUB_CUDA_LIBRARY});
  ASSERT_GT(repro.tid, 0);
  ASSERT_NO_FATAL_FAILURE(repro.trace());
  auto& t = *repro.tracer;
  notice_maps(t, repro.pid);

  Collected c;
  auto first = run_until_synchronizing(repro, c);
  ASSERT_TRUE(first) << describe(thread_of(gpu_state(t), repro.tid));
  ASSERT_EQ(kill(repro.pid, SIGUSR1), 0);
  ASSERT_EQ(repro.w->wait_for_line("resumed", 20s), "resumed");
  ASSERT_EQ(repro.w->wait_for_line("syncing again", 20s), "syncing again");

  std::optional<GpuThreadState> second;
  ASSERT_TRUE(poll_until(t, c,
                         [&] {
                           auto o = gpu_state(t);
                           const GpuThreadState* s = thread_of(o, repro.tid);
                           if (s && s->in_fn == HT_GPU_CTX_SYNCHRONIZE && s->in_since_ns > first->in_since_ns)
                             second = *s;
                           return second.has_value();
                         }))
      << "still in the first call: " << describe(thread_of(gpu_state(t), repro.tid));
  EXPECT_EQ(second->launches, first->launches + 1);
  EXPECT_GE(second->in_since_ns, second->last_launch_ns);
  EXPECT_EQ(second->syncs, first->syncs + 1);

  // The second call returns, and the thread is in none.
  repro.w->release();
  ASSERT_EQ(repro.w->wait_for_line("done", 20s), "done");
  ASSERT_TRUE(poll_until(t, c, [&] {
    auto o = gpu_state(t);
    const GpuThreadState* s = thread_of(o, repro.tid);
    return s && s->in_fn == 0;
  })) << describe(thread_of(gpu_state(t), repro.tid));
}

// The real libnccl.so.2 loads without a GPU: its symbols must resolve and
// its calls fire the probes, with arguments where nccl.h says they are.
TEST(LiveGpu, RealNcclCallsAreSeen) {
  HANGTRACE_REQUIRE_BPF();
  const std::string real = HT_REAL_NCCL_LIBRARY;
  if (real.empty()) GTEST_SKIP() << "no libnccl.so.2 in /usr/local/cuda/lib64 at configure time";
  GpuRepro repro(false, {"--nccl", real});
  ASSERT_NO_FATAL_FAILURE(repro.trace());
  auto& t = *repro.tracer;
  notice_maps(t, repro.pid);
  std::cout << hook_listing(t);
  auto hooks = gpu_hooks(t);
  ASSERT_EQ(hooks.size(), 1u) << hook_listing(t);
  EXPECT_TRUE(hooks[0].active) << hook_listing(t);
  EXPECT_NE(hooks[0].attach.find("(" + std::to_string(kNcclFunctions) + " functions)"), std::string::npos)
      << hook_listing(t);

  Collected c;
  repro.w->release();
  std::string done = repro.w->wait_for_line("done", 20s);
  ASSERT_NE(done, "");
  ASSERT_TRUE(poll_until(t, c, [&] { return !gpu_calls(c, repro.pid).empty(); })) << c.summary();
  auto calls = gpu_calls(c, repro.pid);
  ASSERT_EQ(calls.size(), 1u) << describe(calls);
  EXPECT_EQ(calls[0].fn, static_cast<uint32_t>(HT_GPU_NCCL_ALL_REDUCE));
  EXPECT_EQ(calls[0].seq, 1u);
  EXPECT_EQ(calls[0].count, 4u);
  EXPECT_EQ(calls[0].datatype, 7);
  EXPECT_EQ(calls[0].handle, 0u);
  EXPECT_EQ(calls[0].stream, kStream);
  EXPECT_EQ(done, "done ncclAllReduce=" + std::to_string(calls[0].ret));

  auto o = gpu_state(t);
  const GpuThreadState* s = thread_of(o, repro.tid);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->in_fn, 0u) << describe(s);
  EXPECT_EQ(s->collectives, 1u) << describe(s);
  EXPECT_EQ(s->nccl_group_depth, 1u) << describe(s) << ": two ncclGroupStart, one ncclGroupEnd";
  EXPECT_EQ(s->launches, 0u) << describe(s);
}

// As the live window runs it (ModuleRescan::Window), the tracer finds the
// libraries in the traced process's own maps: nothing is handed in, and a
// process it follows later is read too.
TEST(LiveGpu, TheTracerFindsTheLibrariesItself) {
  HANGTRACE_REQUIRE_BPF();
  GpuRepro first(false), later(false);
  ASSERT_GT(first.pid, 0);
  ASSERT_GT(later.pid, 0);
  LiveOptions opt;
  opt.module_rescan = ModuleRescan::Window;
  opt.tgids = {first.pid};
  auto started = LiveTracer::start(opt);
  ASSERT_TRUE(started) << started.error();
  auto& t = **started;
  auto hooks = gpu_hooks(t);
  ASSERT_EQ(hooks.size(), 2u) << hook_listing(t);
  for (const auto& h : hooks) EXPECT_TRUE(h.active) << h.attach << ": " << h.reason;
  EXPECT_TRUE(gpu_state(t).gpu.cuda_pids.count(first.pid));
  EXPECT_TRUE(t.mapped_modules().any_maps_cuda());
  const std::vector<Mapping>* code = t.mapped_modules().code_maps(first.pid);
  ASSERT_NE(code, nullptr);
  EXPECT_TRUE(std::any_of(code->begin(), code->end(),
                          [](const Mapping& m) { return m.path == HT_STUB_CUDA_LIBRARY; }));

  EXPECT_FALSE(gpu_state(t).gpu.cuda_pids.count(later.pid));
  t.trace_tgid(later.pid);
  EXPECT_TRUE(gpu_state(t).gpu.cuda_pids.count(later.pid));
  EXPECT_EQ(gpu_hooks(t).size(), 2u) << "the same files: nothing attached twice\n" << hook_listing(t);
}

}  // namespace
}  // namespace hangtrace::testing
