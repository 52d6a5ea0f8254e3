#include "frames.h"
#include "hangtrace/collectives.h"

#include <gtest/gtest.h>

#include <string>

#include "hangtrace/jobs.h"
#include "hangtrace/snapshot_json.h"
#include "snapshot_builder.h"

namespace hangtrace {
namespace {

using namespace std::string_literals;

constexpr const char* kC10d = "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py";
constexpr const char* kLibTorchCpu = "/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13";

UserFrame native_frame(std::string function, std::string file = kLibTorchCpu) {
  UserFrame f;
  f.kind = UserFrame::Kind::Native;
  f.function = std::move(function);
  f.file = std::move(file);
  f.addr = 0x7f0000001000;
  return f;
}

// ---- environment ------------------------------------------------------------------

TEST(RankEnvironment, ReadsTheTorchrunVariables) {
  auto id =
      parse_rank_environment("PATH=/usr/bin\0RANK=3\0WORLD_SIZE=8\0LOCAL_RANK=1\0MASTER_ADDR=10.0.0.1\0"s);
  EXPECT_EQ(id.rank, 3);
  EXPECT_EQ(id.world_size, 8);
  EXPECT_EQ(id.local_rank, 1);
}

TEST(RankEnvironment, ReadsWhatSlurmAndMpiLaunchersSet) {
  auto slurm = parse_rank_environment("SLURM_JOB_ID=77\0SLURM_PROCID=5\0SLURM_NTASKS=8\0SLURM_LOCALID=1\0"s);
  EXPECT_EQ(slurm.rank, 5);
  EXPECT_EQ(slurm.world_size, 8);
  EXPECT_EQ(slurm.local_rank, 1);
  EXPECT_EQ(slurm.source, "SLURM_PROCID");
  EXPECT_TRUE(slurm.from_scheduler());
  auto ompi = parse_rank_environment(
      "OMPI_COMM_WORLD_RANK=2\0OMPI_COMM_WORLD_SIZE=4\0OMPI_COMM_WORLD_LOCAL_RANK=0\0PMIX_RANK=2\0"s);
  EXPECT_EQ(ompi.rank, 2);
  EXPECT_EQ(ompi.world_size, 4);
  EXPECT_EQ(ompi.local_rank, 0);
  EXPECT_EQ(ompi.source, "OMPI_COMM_WORLD_RANK");
  auto hydra = parse_rank_environment("PMI_RANK=3\0PMI_SIZE=16\0MPI_LOCALRANKID=3\0"s);
  EXPECT_EQ(hydra.rank, 3);
  EXPECT_EQ(hydra.world_size, 16);
  EXPECT_EQ(hydra.source, "PMI_RANK");
  // torchrun under srun: the rank is torchrun's, not the Slurm task's (one
  // per node), and the sizes are not mixed across families.
  auto both =
      parse_rank_environment("SLURM_PROCID=1\0SLURM_NTASKS=2\0RANK=6\0WORLD_SIZE=16\0LOCAL_RANK=2\0"s);
  EXPECT_EQ(both.rank, 6);
  EXPECT_EQ(both.world_size, 16);
  EXPECT_EQ(both.local_rank, 2);
  EXPECT_EQ(both.source, "RANK");
  EXPECT_FALSE(both.from_scheduler());
  // A task's size with a garbage rank is no rank.
  auto bad = parse_rank_environment("SLURM_PROCID=x1\0SLURM_NTASKS=2\0"s);
  EXPECT_FALSE(bad.rank);
  EXPECT_FALSE(bad.world_size);
  EXPECT_EQ(bad.source, "");
}

TEST(RankEnvironment, AbsentWhenNotADistributedJob) {
  auto id = parse_rank_environment("PATH=/usr/bin\0HOME=/root\0"s);
  EXPECT_FALSE(id.rank);
  EXPECT_FALSE(id.world_size);
  EXPECT_FALSE(id.local_rank);
  EXPECT_FALSE(parse_rank_environment("").rank);
}

TEST(RankEnvironment, NamesMustMatchExactly) {
  // GROUP_RANK, NODE_RANK, ROLE_RANK and friends are not the process's rank.
  auto id = parse_rank_environment("GROUP_RANK=1\0NODE_RANK=2\0MY_RANK=4\0RANKS=5\0LOCAL_WORLD_SIZE=4\0"s);
  EXPECT_FALSE(id.rank);
  EXPECT_FALSE(id.world_size);
}

TEST(RankEnvironment, MalformedValuesStayUnset) {
  auto id = parse_rank_environment("RANK=\0WORLD_SIZE=-2\0LOCAL_RANK=1x\0"s);
  EXPECT_FALSE(id.rank);
  EXPECT_FALSE(id.world_size);
  EXPECT_FALSE(id.local_rank);
  EXPECT_FALSE(parse_rank_environment("RANK=99999999999999999999\0"s).rank);
  EXPECT_FALSE(parse_rank_environment("RANK= 1\0"s).rank);
}

TEST(RankEnvironment, FirstOfDuplicatesWinsAsForGetenv) {
  EXPECT_EQ(parse_rank_environment("RANK=1\0RANK=2\0"s).rank, 1);
  EXPECT_EQ(parse_rank_environment("RANK=x\0RANK=2\0"s).rank, 2);
}

TEST(RankEnvironment, LastEntryWithoutTerminator) {
  EXPECT_EQ(parse_rank_environment("HOME=/\0RANK=7"s).rank, 7);
  EXPECT_EQ(parse_rank_environment("NOEQUALS\0RANK=0\0"s).rank, 0);
}

TEST(RankEnvironment, RoundTripsThroughSnapshotJsonAndIsOmittedWhenAbsent) {
  Snapshot s;
  s.target_pid = 10;
  ProcessInfo rank0;
  rank0.pid = 10;
  rank0.rank = 0;
  rank0.world_size = 2;
  rank0.local_rank = 0;
  ProcessInfo launcher;
  launcher.pid = 9;
  s.processes = {rank0, launcher};
  nlohmann::json j = snapshot_to_json(s);
  EXPECT_EQ(j["processes"][0]["rank"], 0);
  EXPECT_EQ(j["processes"][0]["world_size"], 2);
  EXPECT_EQ(j["processes"][0]["local_rank"], 0);
  EXPECT_FALSE(j["processes"][1].contains("rank"));
  EXPECT_FALSE(j["processes"][1].contains("world_size"));
  EXPECT_FALSE(j["processes"][1].contains("local_rank"));
  auto back = snapshot_from_json_text(j.dump());
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(back->processes[0].rank, 0);
  EXPECT_EQ(back->processes[0].world_size, 2);
  EXPECT_EQ(back->processes[0].local_rank, 0);
  EXPECT_FALSE(back->processes[1].rank);
  EXPECT_FALSE(back->processes[1].world_size);
  EXPECT_FALSE(back->processes[1].local_rank);
}

// ---- ranks from torch.multiprocessing.spawn's frames -------------------------------

constexpr const char* kSpawnPy = "/usr/lib/python3/dist-packages/torch/multiprocessing/spawn.py";

// A spawn child's main thread as the walk reads it: <module> ... _bootstrap,
// run, _wrap(fn, i, ...) with i read, the program's function.
std::vector<UserFrame> spawned_stack(std::optional<int64_t> index) {
  UserFrame wrap = testing::py("_wrap", kSpawnPy, 69);
  wrap.argument = index;
  return {testing::py("run_rank", "/job/train.py", 40),
          wrap,
          testing::py("BaseProcess.run", "/usr/lib/python3.11/multiprocessing/process.py", 108),
          testing::py("BaseProcess._bootstrap", "/usr/lib/python3.11/multiprocessing/process.py", 314),
          testing::py("spawn_main", "/usr/lib/python3.11/multiprocessing/spawn.py", 120),
          testing::py("<module>", "<string>", 1)};
}

TEST(SpawnRanks, TheArgumentReadIsOnlyTorchSpawnsWrapIndex) {
  EXPECT_EQ(identity_argument_position(kSpawnPy, "_wrap"), 1);
  EXPECT_EQ(identity_argument_position("/x/site-packages/torch/multiprocessing/spawn.py", "_wrap"), 1);
  EXPECT_EQ(identity_argument_position("/usr/lib/python3.11/multiprocessing/spawn.py", "_wrap"), -1);
  EXPECT_EQ(identity_argument_position(kSpawnPy, "start_processes"), -1);
  EXPECT_EQ(identity_argument_position("/job/spawn.py", "_wrap"), -1);
}

TEST(SpawnRanks, ChildrenOnOneHostAreRankedByTheirIndex) {
  testing::SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  b.thread(100, 100).python_stack = {testing::py("ProcessContext.join", kSpawnPy, 109),
                                     testing::py("start_processes", kSpawnPy, 198),
                                     testing::py("<module>", "/job/train.py", 60)};
  for (int i = 0; i < 2; ++i) {
    b.proc(200 + i, 100, ProcessRole::Descendant);
    b.thread(200 + i, 200 + i).python_stack = spawned_stack(i);
    // Their gloo connection to each other, on loopback.
    b.fd(200 + i, 9, FdKind::Socket, 900 + i);
  }
  b.tcp_pair(900, 41000, 901, 41001);
  // A DataLoader worker forked by rank 1 shows the same frame.
  b.proc(300, 201, ProcessRole::Descendant);
  b.thread(300, 300).python_stack = spawned_stack(1);
  // A child whose index did not read back, and one with RANK in its environment.
  b.proc(202, 100, ProcessRole::Descendant);
  b.thread(202, 202).python_stack = spawned_stack(std::nullopt);
  ProcessInfo& env_ranked = b.proc(203, 100, ProcessRole::Descendant);
  env_ranked.rank = 5;
  env_ranked.rank_source = "RANK";
  b.thread(203, 203).python_stack = spawned_stack(3);

  ranks_from_spawn_frames(b.s);
  const Snapshot& s = b.s;
  EXPECT_FALSE(s.process(100)->rank);
  for (int i = 0; i < 2; ++i) {
    const ProcessInfo& p = *s.process(200 + i);
    EXPECT_EQ(p.rank, i);
    EXPECT_EQ(p.local_rank, i);
    EXPECT_FALSE(p.world_size);  // nprocs is this node's count, not the group's
    EXPECT_EQ(p.rank_source, kSpawnIndexSource);
    EXPECT_TRUE(jobs::is_rank_process(s, p));
  }
  EXPECT_EQ(s.process(300)->rank, 1);
  EXPECT_FALSE(jobs::is_rank_process(s, *s.process(300)));  // rank 1's worker
  EXPECT_FALSE(s.process(202)->rank);
  EXPECT_EQ(s.process(203)->rank, 5);  // the environment wins
  EXPECT_EQ(s.process(203)->rank_source, "RANK");
  EXPECT_TRUE(jobs::is_launcher(s, *s.process(100)));
}

TEST(SpawnRanks, AChildConnectedToAnotherHostGetsItsLocalRankOnly) {
  testing::SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  b.proc(200, 100, ProcessRole::Descendant);
  b.thread(200, 200).python_stack = spawned_stack(1);
  b.fd(200, 9, FdKind::Socket, 900);
  b.s.sockets.push_back({900, 0, "tcp", "ESTABLISHED", "10.0.0.1:41000", "10.0.0.2:29500", 0, 0, 0, false});
  ranks_from_spawn_frames(b.s);
  const ProcessInfo& p = *b.s.process(200);
  EXPECT_EQ(p.local_rank, 1);
  EXPECT_FALSE(p.rank);  // node_rank * nprocs + 1, computed by the program
  EXPECT_EQ(p.rank_source, "");
}

TEST(SpawnRanks, TheArgumentRoundTripsThroughSnapshotJson) {
  testing::SnapshotBuilder b(200);
  b.proc(200, 1, ProcessRole::Target);
  b.thread(200, 200).python_stack = spawned_stack(3);
  auto back = snapshot_from_json_text(snapshot_to_json(b.s).dump());
  ASSERT_TRUE(back.ok()) << back.error();
  const auto& stack = back->processes[0].threads[0].python_stack;
  EXPECT_EQ(stack[1].argument, 3);
  EXPECT_FALSE(stack[0].argument);
  EXPECT_FALSE(snapshot_to_json(b.s)["processes"][0]["threads"][0]["python_stack"][0].contains("argument"));
}

// ---- collectives ------------------------------------------------------------------

// Rank 0's main thread in the scenario: all_reduce waits for gloo's work to
// finish (what hangtrace read from a real torch 1.13 process).
ThreadInfo gloo_main_thread_in_all_reduce() {
  ThreadInfo t;
  t.tid = 100;
  t.python_stack = {testing::py("all_reduce", kC10d, 1536),
                    testing::py("run_rank", "/work/tests/scenarios/workloads/gloo_allreduce_skip.py", 84),
                    testing::py("<module>", "/work/tests/scenarios/workloads/gloo_allreduce_skip.py", 96)};
  t.native_stack = {
      native_frame("syscall", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
      native_frame(
          "std::__atomic_futex_unsigned_base::_M_futex_wait_until(unsigned int*, unsigned int, bool, "
          "std::chrono::duration<long, std::ratio<1l, 1l> >, std::chrono::duration<long, "
          "std::ratio<1l, 1000000000l> >)",
          "/usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30"),
      native_frame("c10d::ProcessGroupGloo::AsyncWork::wait(std::chrono::duration<long, std::ratio<1l, "
                   "1000l> >)"),
      native_frame("_PyEval_EvalFrameDefault", "/usr/bin/python3.11"),
  };
  return t;
}

TEST(CollectiveInProgress, GlooAllReduceFromPythonAndNativeFrames) {
  auto call = collective_in_progress(gloo_main_thread_in_all_reduce());
  ASSERT_TRUE(call);
  EXPECT_EQ(call->op, "all_reduce");
  EXPECT_EQ(call->backend, "gloo");
  EXPECT_EQ(call->evidence, "py: all_reduce (torch/distributed/distributed_c10d.py:1536)");
}

TEST(CollectiveInProgress, PythonFramesAloneGiveTheOpWithoutABackend) {
  ThreadInfo t = gloo_main_thread_in_all_reduce();
  t.native_stack.clear();  // not unwound (no BPF, or the thread was running)
  auto call = collective_in_progress(t);
  ASSERT_TRUE(call);
  EXPECT_EQ(call->op, "all_reduce");
  EXPECT_EQ(call->backend, "");
}

TEST(CollectiveInProgress, TheInnermostCollectiveFrameNamesTheOp) {
  // all_gather_object exchanges sizes with all_gather first: that is the one
  // the thread waits in.
  ThreadInfo t;
  t.python_stack = {testing::py("all_gather", kC10d, 2240), testing::py("all_gather_object", kC10d, 1870),
                    testing::py("main", "/train.py", 10)};
  auto call = collective_in_progress(t);
  ASSERT_TRUE(call);
  EXPECT_EQ(call->op, "all_gather");
}

TEST(CollectiveInProgress, EachTorchCollectiveIsRecognized) {
  for (std::string op :
       {"all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
        "broadcast", "reduce", "barrier", "all_to_all", "all_to_all_single", "send", "recv", "gather",
        "scatter", "monitored_barrier", "broadcast_object_list", "all_gather_object", "_all_gather_base"}) {
    ThreadInfo t;
    t.python_stack = {testing::py(op, kC10d, 1), testing::py("main", "/train.py", 3)};
    auto call = collective_in_progress(t);
    ASSERT_TRUE(call) << op;
    EXPECT_EQ(call->op, op);
  }
}

TEST(CollectiveInProgress, InitRendezvousWaitIsABarrier) {
  ThreadInfo t;
  t.python_stack = {testing::py("_store_based_barrier", kC10d, 3300),
                    testing::py("init_process_group", kC10d, 760), testing::py("main", "/train.py", 3)};
  auto call = collective_in_progress(t);
  ASSERT_TRUE(call);
  EXPECT_EQ(call->op, "barrier");
  EXPECT_EQ(call->evidence, "py: _store_based_barrier (torch/distributed/distributed_c10d.py:3300)");
}

TEST(CollectiveInProgress, NotACollective) {
  ThreadInfo parked;  // rank 1 of the scenario: left the loop, sleeping
  parked.python_stack = {
      testing::py("wait_for_checkpoint_upload", "/work/tests/scenarios/workloads/gloo_allreduce_skip.py", 63),
      testing::py("run_rank", "/work/tests/scenarios/workloads/gloo_allreduce_skip.py", 87)};
  parked.native_stack = {native_frame("clock_nanosleep", "/usr/lib/x86_64-linux-gnu/libc.so.6")};
  EXPECT_FALSE(collective_in_progress(parked));

  // A helper of distributed_c10d that is not a collective, and a function of
  // the same name in the user's own code.
  ThreadInfo helper;
  helper.python_stack = {testing::py("get_world_size", kC10d, 900), testing::py("all_reduce", "/mine.py", 5)};
  EXPECT_FALSE(collective_in_progress(helper));

  EXPECT_FALSE(collective_in_progress(ThreadInfo{}));
}

TEST(CollectiveInProgress, IdleGlooThreadsAreNotInACollective) {
  // gloo's worker waiting for work to be queued, and its transport's epoll
  // loop: backend frames, but no collective running.
  ThreadInfo worker;
  worker.native_stack = {
      native_frame("pthread_cond_wait", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
      native_frame("std::condition_variable::wait(std::unique_lock<std::mutex>&)",
                   "/usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30"),
      native_frame("c10d::ProcessGroupGloo::runLoop(int)"),
  };
  EXPECT_FALSE(collective_in_progress(worker));
  ThreadInfo loop;
  loop.native_stack = {native_frame("epoll_wait", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
                       native_frame("gloo::transport::tcp::Loop::run()")};
  EXPECT_FALSE(collective_in_progress(loop));
}

TEST(CollectiveInProgress, GlooWorkerThreadRunningAnAllReduce) {
  // No Python frames: the op comes from ProcessGroupGloo's work class, not
  // from the transport's recv it waits in.
  ThreadInfo worker;
  worker.native_stack = {
      native_frame("pthread_cond_wait", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
      native_frame("gloo::transport::tcp::UnboundBuffer::waitRecv(int*, std::chrono::duration<long, "
                   "std::ratio<1l, 1000l> >)"),
      native_frame("gloo::allreduce(gloo::AllreduceOptions const&)", "/lib/libgloo.so.0"),
      native_frame("c10d::ProcessGroupGloo::AsyncWork::execute(c10::intrusive_ptr<c10d::ProcessGroupGloo::"
                   "AsyncWork, c10::detail::intrusive_target_default_null_type<c10d::ProcessGroupGloo::"
                   "AsyncWork> >)"),
      native_frame("c10d::ProcessGroupGloo::runLoop(int)"),
  };
  auto call = collective_in_progress(worker);
  ASSERT_TRUE(call);
  EXPECT_EQ(call->op, "all_reduce");
  EXPECT_EQ(call->backend, "gloo");
  EXPECT_EQ(call->evidence, "native: gloo::allreduce (libgloo.so.0)");
}

TEST(CollectiveInProgress, TemplateAndAnonymousNamespaceSymbols) {
  // With a full symbol table: the work classes of ProcessGroupGloo.cpp, and
  // templates whose demangled name starts with the return type.
  ThreadInfo worker;
  worker.native_stack = {
      native_frame("void gloo::gatherv<float>(gloo::GathervOptions&)"),
      native_frame("c10d::(anonymous namespace)::AsyncAllreduceWork::allreduce(std::vector<at::Tensor, "
                   "std::allocator<at::Tensor> >&)"),
  };
  auto call = collective_in_progress(worker);
  ASSERT_TRUE(call);
  EXPECT_EQ(call->op, "gather");
  EXPECT_EQ(call->backend, "gloo");
  EXPECT_EQ(call->evidence, "native: void gloo::gatherv<float> (libtorch_cpu.so.1.13)");
  worker.native_stack.erase(worker.native_stack.begin());
  call = collective_in_progress(worker);
  ASSERT_TRUE(call);
  EXPECT_EQ(call->op, "all_reduce");
  EXPECT_EQ(call->backend, "gloo");
  EXPECT_EQ(call->evidence,
            "native: c10d::(anonymous namespace)::AsyncAllreduceWork::allreduce (libtorch_cpu.so.1.13)");
}

TEST(CollectiveInProgress, GlooBackendFromItsLibrary) {
  ThreadInfo t;
  t.python_stack = {testing::py("broadcast", kC10d, 1400)};
  t.native_stack = {native_frame("", "/lib/libgloo.so.0")};  // a frame with no symbol
  auto call = collective_in_progress(t);
  ASSERT_TRUE(call);
  EXPECT_EQ(call->backend, "gloo");
}

TEST(CollectiveInProgress, GlooOpNamesDoNotMatchLongerOnes) {
  ThreadInfo worker;
  worker.native_stack = {native_frame("gloo::reduce_scatter_helper(int)"),
                         native_frame("c10d::(anonymous namespace)::AsyncReduceScatterWork::run()")};
  auto call = collective_in_progress(worker);
  ASSERT_TRUE(call);
  EXPECT_EQ(call->op, "reduce_scatter");
}

TEST(CollectiveInProgress, NcclBackendFromProcessGroupNcclFrames) {
  ThreadInfo t;
  t.python_stack = {testing::py("barrier", kC10d, 3140), testing::py("main", "/train.py", 3)};
  t.native_stack = {
      native_frame("cudaStreamSynchronize", "/usr/local/cuda/lib64/libcudart.so.13"),
      native_frame("c10d::ProcessGroupNCCL::WorkNCCL::synchronizeInternal(std::chrono::duration<long, "
                   "std::ratio<1l, 1000l> >)",
                   "/usr/lib/x86_64-linux-gnu/libtorch_cuda.so"),
  };
  auto call = collective_in_progress(t);
  ASSERT_TRUE(call);
  EXPECT_EQ(call->op, "barrier");
  EXPECT_EQ(call->backend, "nccl");
}

TEST(CollectiveInProgress, NcclApiCallWithoutPython) {
  ThreadInfo t;
  t.native_stack = {native_frame("ioctl", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
                    native_frame("pncclReduceScatter", "/usr/lib/x86_64-linux-gnu/libnccl.so.2"),
                    native_frame("main", "/opt/app")};
  auto call = collective_in_progress(t);
  ASSERT_TRUE(call);
  EXPECT_EQ(call->op, "reduce_scatter");
  EXPECT_EQ(call->backend, "nccl");
  EXPECT_EQ(call->evidence, "native: pncclReduceScatter (libnccl.so.2)");

  ThreadInfo reduce;
  reduce.native_stack = {native_frame("ncclReduce", "/usr/lib/x86_64-linux-gnu/libnccl.so.2")};
  call = collective_in_progress(reduce);
  ASSERT_TRUE(call);
  EXPECT_EQ(call->op, "reduce");
}

// ---- the process's backend -------------------------------------------------------

constexpr const char* kLibGloo = "/lib/libgloo.so.0.5.0";

// Rank 0 of the scenario as hangtrace saw it (torch 1.13, symbols from the
// dynamic tables only): the main thread waits in the generic c10d::Work::wait,
// one gloo worker runs the all_reduce, the other idles, the transport's loop
// polls.
ProcessInfo gloo_rank_in_all_reduce() {
  ProcessInfo p;
  p.pid = 100;
  p.rank = 0;
  ThreadInfo main_thread;
  main_thread.tid = 100;
  main_thread.python_stack = {testing::py("all_reduce", kC10d, 1541),
                              testing::py("run_rank", "/w/gloo_allreduce_skip.py", 80)};
  main_thread.native_stack = {
      native_frame("__futex_abstimed_wait_common", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
      native_frame("pthread_cond_wait", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
      native_frame("c10d::Work::wait(std::chrono::duration<long, std::ratio<1l, 1000l> >)"),
      native_frame("", "/usr/lib/x86_64-linux-gnu/libtorch_python.so.1.13.0"),
      native_frame("_PyEval_EvalFrameDefault", "/usr/bin/python3.11")};
  ThreadInfo running;
  running.tid = 105;
  running.native_stack = {
      native_frame("pthread_cond_clockwait", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
      native_frame("gloo::transport::tcp::UnboundBuffer::waitRecv(int*, std::chrono::duration<long, "
                   "std::ratio<1l, 1000l> >)",
                   kLibGloo),
      native_frame("", kLibGloo),
      native_frame(""),
      native_frame(
          "c10d::ProcessGroupGloo::AsyncWork::execute(c10::intrusive_ptr<c10d::ProcessGroupGloo::"
          "AsyncWork, c10::detail::intrusive_target_default_null_type<c10d::ProcessGroupGloo::AsyncWork> "
          ">)"),
      native_frame("c10d::ProcessGroupGloo::runLoop(int)")};
  ThreadInfo idle;
  idle.tid = 107;
  idle.native_stack = {native_frame("pthread_cond_wait", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
                       native_frame("c10d::ProcessGroupGloo::runLoop(int)")};
  ThreadInfo loop;
  loop.tid = 103;
  loop.native_stack = {native_frame("epoll_wait", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
                       native_frame("gloo::transport::tcp::Loop::run()", kLibGloo)};
  p.threads = {main_thread, loop, running, idle};
  return p;
}

TEST(CollectiveBackend, TheMainThreadsBackendComesFromGlooWorkers) {
  ProcessInfo p = gloo_rank_in_all_reduce();
  // Its own frames do not tell...
  auto own = collective_in_progress(p.threads[0]);
  ASSERT_TRUE(own);
  EXPECT_EQ(own->backend, "");
  // ...the worker running the collective does.
  auto call = collective_in_progress(p, p.threads[0]);
  ASSERT_TRUE(call);
  EXPECT_EQ(call->op, "all_reduce");
  EXPECT_EQ(call->backend, "gloo");
  EXPECT_EQ(call->evidence, "py: all_reduce (torch/distributed/distributed_c10d.py:1541)");
  EXPECT_EQ(call->backend_evidence,
            "native: gloo::transport::tcp::UnboundBuffer::waitRecv (libgloo.so.0.5.0) in thread 105");
  // gloo's threads themselves are in no collective the snapshot can name.
  for (size_t i = 1; i < p.threads.size(); ++i) EXPECT_FALSE(collective_in_progress(p, p.threads[i])) << i;
}

TEST(CollectiveBackend, IdleThreadsOfOneBackendAreEnough) {
  ProcessInfo p = gloo_rank_in_all_reduce();
  p.threads.erase(p.threads.begin() + 2);  // no worker running anything
  std::string evidence;
  EXPECT_EQ(collective_backend(p, &evidence), "gloo");
  EXPECT_EQ(evidence, "native: gloo::transport::tcp::Loop::run (libgloo.so.0.5.0) in thread 103");
}

TEST(CollectiveBackend, TwoIdleBackendsAreAmbiguousUnlessOneIsActive) {
  ProcessInfo p = gloo_rank_in_all_reduce();
  p.threads.erase(p.threads.begin() + 2);
  ThreadInfo watchdog;
  watchdog.tid = 110;
  watchdog.native_stack = {native_frame("pthread_cond_timedwait", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
                           native_frame("c10d::ProcessGroupNCCL::ncclCommWatchdog()",
                                        "/usr/lib/x86_64-linux-gnu/libtorch_cuda.so")};
  p.threads.push_back(watchdog);
  EXPECT_EQ(collective_backend(p), "");
  auto call = collective_in_progress(p, p.threads[0]);
  ASSERT_TRUE(call);
  EXPECT_EQ(call->backend, "");
  EXPECT_EQ(call->backend_evidence, "");

  ThreadInfo syncing;  // NCCL's work being waited for: NCCL is the one in use
  syncing.tid = 111;
  syncing.native_stack = {native_frame("cudaStreamSynchronize", "/usr/local/cuda/lib64/libcudart.so.13"),
                          native_frame("c10d::ProcessGroupNCCL::WorkNCCL::synchronizeStreams()",
                                       "/usr/lib/x86_64-linux-gnu/libtorch_cuda.so")};
  p.threads.push_back(syncing);
  EXPECT_EQ(collective_backend(p), "nccl");
}

TEST(CollectiveBackend, NoneInAProcessWithoutABackend) {
  ProcessInfo p;
  p.threads = {ThreadInfo{}};
  EXPECT_EQ(collective_backend(p), "");
}

TEST(CollectiveBackend, TheThreadsOwnBackendWins) {
  ProcessInfo p = gloo_rank_in_all_reduce();
  ThreadInfo t;
  t.tid = 120;
  t.python_stack = {testing::py("barrier", kC10d, 3140)};
  t.native_stack = {native_frame("c10d::ProcessGroupNCCL::barrier(c10d::BarrierOptions const&)",
                                 "/usr/lib/x86_64-linux-gnu/libtorch_cuda.so")};
  auto call = collective_in_progress(p, t);
  ASSERT_TRUE(call);
  EXPECT_EQ(call->backend, "nccl");
  EXPECT_EQ(call->backend_evidence, "");
}

}  // namespace
}  // namespace hangtrace
