// Issue 36 on hand-built snapshots: ranks named by Slurm, a collective
// inside a rank-dependent branch (collective-mismatch), a rank still joining
// its process group (rendezvous-wait), a breakpoint in one rank
// (waits-for-input) explaining the others' collective wait.
#include <gtest/gtest.h>

#include "frames.h"
#include "hangtrace/analysis.h"
#include "hangtrace/collectives.h"
#include "hangtrace/jobs.h"
#include "snapshot_builder.h"

namespace hangtrace {
namespace {

using testing::in_syscall;
using testing::native;
using testing::py;
using testing::SnapshotBuilder;

const Finding* find_kind(const Diagnosis& d, const char* kind) {
  for (const auto& f : d.findings)
    if (std::string(finding_kind_name(f.kind)) == kind) return &f;
  return nullptr;
}

constexpr const char* kC10d = "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py";

// Launcher 100 with ranks 200 and 201 (SLURM_PROCID 0 and 1, world 2), each
// main thread blocked for `blocked_s` in the collective `ops[rank]`, called
// from train.py:30 + rank.
SnapshotBuilder ranks_in(const std::vector<std::string>& ops, double blocked_s) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  ThreadInfo& l = b.thread(100, 100);
  in_syscall(l, HT_NR_wait4, {static_cast<uint64_t>(-1), 0, 0});
  for (int rank = 0; rank < static_cast<int>(ops.size()); ++rank) {
    ProcessInfo& p = b.proc(200 + rank, 100, ProcessRole::Descendant);
    p.rank = rank;
    p.world_size = 2;
    p.rank_source = "SLURM_PROCID";
    ThreadInfo& t = b.futex_wait(200 + rank, 200 + rank, 0x5000, false, {}, std::nullopt, blocked_s);
    t.python_stack = {py(ops[rank], kC10d, 1500), py("wrapper", "/x/torch/distributed/c10d_logger.py", 70),
                      py("train", "/job/train.py", 30 + rank), py("<module>", "/job/train.py", 50)};
    b.running(200 + rank, 300 + rank);  // gloo's worker thread: what would wake the main thread
  }
  return b;
}

TEST(CollectiveMismatch, RanksInDifferentCollectivesEachNamedWithItsCaller) {
  Diagnosis d = diagnose(ranks_in({"barrier", "all_reduce"}, 30).s);
  const Finding* f = find_kind(d, "collective-mismatch");
  ASSERT_NE(f, nullptr) << d.verdict.summary;
  EXPECT_EQ(find_kind(d, "collective-wait"), nullptr);
  EXPECT_EQ(f->severity, Severity::Critical);
  EXPECT_EQ(f->confidence, Confidence::Certain);
  EXPECT_EQ(f->details["collectives"], (nlohmann::json{"all_reduce", "barrier"}));
  ASSERT_EQ(f->details["ranks"].size(), 2u);
  EXPECT_EQ(f->details["ranks"][0]["caller"], "train.py:30");
  EXPECT_EQ(f->details["ranks"][1]["caller"], "train.py:31");
  EXPECT_NE(f->summary.find("rank 0 (pid 200) in barrier at train.py:30, rank 1 (pid 201) in all_reduce at "
                            "train.py:31"),
            std::string::npos)
      << f->summary;
  EXPECT_EQ(d.verdict.status, "hang");
  // The same op on every rank is no mismatch.
  Diagnosis same = diagnose(ranks_in({"all_reduce", "all_reduce"}, 30).s);
  EXPECT_EQ(find_kind(same, "collective-mismatch"), nullptr);
  // Waits shorter than --stall-after: a warning, probable.
  Diagnosis brief = diagnose(ranks_in({"barrier", "all_reduce"}, 0.2).s);
  const Finding* w = find_kind(brief, "collective-mismatch");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->severity, Severity::Warning);
  EXPECT_EQ(w->confidence, Confidence::Probable);
}

TEST(CollectiveMismatch, RanksNamedBySlurmAreTheJobsRanks) {
  SnapshotBuilder b = ranks_in({"all_reduce", "all_reduce"}, 30);
  jobs::JobShape shape = jobs::job_shape(b.s);
  ASSERT_EQ(shape.ranks.size(), 2u);
  EXPECT_EQ(shape.ranks[0].source, "SLURM_PROCID");
  EXPECT_EQ(shape.launcher, 100);
}

// Rank 0 (pid 200) in init_process_group, the TCPStore master waiting for
// its workers; it listens on 29500 and accepted its own client only.
SnapshotBuilder rank_joining(double age_s) {
  SnapshotBuilder b(200);
  ProcessInfo& p = b.proc(200, 1, ProcessRole::Target);
  p.rank = 0;
  p.world_size = 2;
  p.rank_source = "RANK";
  p.age_s = age_s;
  ThreadInfo& t = b.thread(200, 200, 'S', 0.004);
  in_syscall(t, HT_NR_clock_nanosleep, {0, 0, 0x7000, 0});
  t.memory.timeout_s = 0.01;
  t.python_stack = {py("_create_c10d_store", "/x/torch/distributed/rendezvous.py", 177),
                    py("init_process_group", kC10d, 754), py("main", "/job/train.py", 12)};
  t.native_stack = {native("c10d::TCPStore::waitForWorkers()", "/x/libtorch_cpu.so", 0x1000, 0x1000, "")};
  b.fd(200, 5, FdKind::Socket, 900);
  b.fd(200, 6, FdKind::Socket, 901);
  b.fd(200, 7, FdKind::Socket, 902);
  b.tcp_listen(900, "0.0.0.0:29500");
  b.tcp_pair(901, 29500, 902, 40000);
  return b;
}

TEST(RendezvousWait, ARankInTheStoresWaitForWorkersCountsWhoJoined) {
  Diagnosis d = diagnose(rank_joining(42).s);
  const Finding* f = find_kind(d, "rendezvous-wait");
  ASSERT_NE(f, nullptr) << d.verdict.summary;
  EXPECT_EQ(d.findings.front().kind, FindingKind::RendezvousWait) << d.verdict.summary;
  EXPECT_EQ(f->severity, Severity::Critical);
  EXPECT_EQ(f->confidence, Confidence::Probable);
  EXPECT_EQ(f->details["stage"], "TCPStore::waitForWorkers");
  EXPECT_EQ(f->details["store"]["port"], 29500);
  EXPECT_EQ(f->details["store"]["accepted"], 1);
  EXPECT_EQ(f->details["caller"], "train.py:12");
  EXPECT_NE(f->summary.find("rank 0 (pid 200)"), std::string::npos) << f->summary;
  EXPECT_NE(f->summary.find("accepted 1 connection of world size 2"), std::string::npos) << f->summary;
  EXPECT_EQ(d.verdict.status, "hang");
  // A process younger than --stall-after may still see its ranks join.
  Diagnosis young = diagnose(rank_joining(3).s);
  const Finding* w = find_kind(young, "rendezvous-wait");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->severity, Severity::Warning);
  // Nor is a rank that joined (its collectives are collective-wait's).
  SnapshotBuilder joined = rank_joining(42);
  joined.s.processes[0].threads[0].python_stack = {py("all_reduce", kC10d, 1500),
                                                   py("main", "/job/train.py", 20)};
  joined.s.processes[0].threads[0].native_stack.clear();
  EXPECT_EQ(find_kind(diagnose(joined.s), "rendezvous-wait"), nullptr);
}

TEST(LauncherRendezvous, TorchrunsOptionsBeforeTheProgramsOwn) {
  auto r = launcher_rendezvous("python3",
                               "/usr/bin/python3 -u -m torch.distributed.run --nnodes 2 --node_rank 0 "
                               "--nproc_per_node 2 --master_addr 10.0.0.5 --master_port 29511 train.py "
                               "--nnodes 7 --rdzv_backend c10d");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->nnodes, "2");
  EXPECT_EQ(r->backend, "static");
  EXPECT_EQ(r->endpoint, "10.0.0.5:29511");
  EXPECT_EQ(r->fixed_nodes(), 2);

  r = launcher_rendezvous(
      "torchrun",
      "/usr/local/bin/torchrun --nnodes=1:4 --rdzv-backend=c10d --rdzv-endpoint=node0:29400 "
      "--standalone_not_an_option=x train.py");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->nnodes, "1:4");
  EXPECT_EQ(r->backend, "c10d");
  EXPECT_EQ(r->endpoint, "node0:29400");
  EXPECT_FALSE(r->fixed_nodes());  // elastic: any of 1 to 4

  r = launcher_rendezvous("torchrun", "torchrun --standalone --nproc_per_node=8 train.py");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->backend, "c10d");
  EXPECT_EQ(r->endpoint, "localhost:29400");
  EXPECT_EQ(r->fixed_nodes(), 1);  // "1:1"

  r = launcher_rendezvous("python3",
                          "python3 -m torch.distributed.launch --nproc_per_node 2 --use_env train.py");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->endpoint, "127.0.0.1:29500");
  EXPECT_EQ(r->nnodes, "1:1");

  EXPECT_FALSE(launcher_rendezvous("python3", "python3 train.py --nnodes 2"));
  EXPECT_FALSE(launcher_rendezvous("python3", "python3 -m torch.distributed.other --nnodes 2"));
  EXPECT_FALSE(launcher_rendezvous("", ""));
  EXPECT_FALSE((LauncherRendezvous{"0", "static", "x"}.fixed_nodes()));
  EXPECT_FALSE((LauncherRendezvous{"2:x", "static", "x"}.fixed_nodes()));
  EXPECT_EQ((LauncherRendezvous{"3:3", "static", "x"}.fixed_nodes()), 3);
}

// torchrun's agent on node 0 of 2 (static backend): before it starts any
// rank its TCPStore waits for node 1's agent, which never comes.
TEST(RendezvousWait, ALaunchersAgentWaitingForANodeSaysWhichRendezvous) {
  SnapshotBuilder b(100);
  ProcessInfo& agent = b.proc(100, 1, ProcessRole::Target);
  agent.cmdline =
      "/usr/bin/python3 -u -m torch.distributed.run --nnodes 2 --node_rank 0 --master_addr 127.0.0.1 "
      "--master_port 29511 train.py";
  agent.age_s = 30;
  ThreadInfo& t = b.thread(100, 100, 'S', 0.004);
  in_syscall(t, HT_NR_clock_nanosleep, {0, 0, 0x7000, 0});
  t.memory.timeout_s = 0.01;
  const std::string rdzv = "/x/torch/distributed/elastic/rendezvous/static_tcp_rendezvous.py";
  t.python_stack = {
      py("StaticTCPRendezvous.next_rendezvous", rdzv, 55),
      py("SimpleElasticAgent._rendezvous", "/x/torch/distributed/elastic/agent/server/api.py", 469),
      py("main", "/x/torch/distributed/run.py", 762)};
  t.native_stack = {native("c10d::TCPStore::waitForWorkers()", "/x/libtorch_cpu.so", 0x1000, 0x1000, "")};
  b.fd(100, 5, FdKind::Socket, 900);
  b.fd(100, 6, FdKind::Socket, 901);
  b.fd(100, 7, FdKind::Socket, 902);
  b.tcp_listen(900, "0.0.0.0:29511");
  b.tcp_pair(901, 29511, 902, 40000);

  Diagnosis d = diagnose(b.s);
  const Finding* f = find_kind(d, "rendezvous-wait");
  ASSERT_NE(f, nullptr) << d.verdict.summary;
  EXPECT_EQ(d.findings.front().kind, FindingKind::RendezvousWait) << d.verdict.summary;
  EXPECT_EQ(f->severity, Severity::Critical);
  EXPECT_EQ(f->details["launcher"]["nnodes"], "2");
  EXPECT_EQ(f->details["launcher"]["backend"], "static");
  EXPECT_EQ(f->details["launcher"]["endpoint"], "127.0.0.1:29511");
  EXPECT_NE(f->summary.find("torch.distributed.run's rendezvous (static at 127.0.0.1:29511, --nnodes 2"),
            std::string::npos)
      << f->summary;
  EXPECT_NE(f->summary.find("accepted 1 connection of 2 nodes"), std::string::npos) << f->summary;
  EXPECT_NE(f->summary.find("nodes that should have joined have not"), std::string::npos) << f->summary;
  ASSERT_FALSE(f->advice.empty());
  EXPECT_NE(f->advice.front().find("--node_rank"), std::string::npos) << f->advice.front();
}

// Rank 0 stopped in pdb reading stdin (a pipe the launcher holds and never
// writes); rank 1 waits for it in all_reduce.
SnapshotBuilder breakpoint_in_rank_0(bool stdin_is_terminal) {
  SnapshotBuilder b = ranks_in({"all_reduce", "all_reduce"}, 30);
  ProcessInfo& r0 = *b.find(200);
  ThreadInfo& t = r0.threads[0];
  in_syscall(t, HT_NR_read, {0, 0x1000, 8192});
  t.python_stack = {py("Cmd.cmdloop", "/usr/lib/python3.11/cmd.py", 126),
                    py("Pdb._cmdloop", "/usr/lib/python3.11/pdb.py", 321),
                    py("Bdb.trace_dispatch", "/usr/lib/python3.11/bdb.py", 90),
                    py("train", "/job/train.py", 40)};
  if (stdin_is_terminal) {
    b.file_fd(200, 0, "/dev/pts/4", 7).kind = FdKind::Device;
  } else {
    b.fd(200, 0, FdKind::Pipe, 812, O_RDONLY, 0);
    b.fd(100, 9, FdKind::Pipe, 812, O_WRONLY);
  }
  return b;
}

TEST(WaitsForInput, ABreakpointInOneRankIsTheRootOfTheOthersCollectiveWait) {
  for (bool terminal : {false, true}) {
    Diagnosis d = diagnose(breakpoint_in_rank_0(terminal).s);
    ASSERT_FALSE(d.findings.empty());
    const Finding& top = d.findings.front();
    EXPECT_EQ(top.kind, FindingKind::WaitsForInput) << d.verdict.summary;
    EXPECT_EQ(top.pids, std::vector<int>{200});
    EXPECT_EQ(top.severity, Severity::Critical);
    EXPECT_EQ(top.details["debugger"], "pdb");
    EXPECT_EQ(top.details["fd"], 0);
    EXPECT_EQ(top.details["terminal"], terminal);
    EXPECT_NE(top.details["source"].get<std::string>().find(terminal ? "a terminal (/dev/pts/4)" : "a pipe"),
              std::string::npos)
        << top.details.dump();
    EXPECT_NE(top.summary.find("rank 0"), std::string::npos) << top.summary;
    const Finding* wait = find_kind(d, "collective-wait");
    ASSERT_NE(wait, nullptr);
    EXPECT_EQ(wait->caused_by, top.id) << "terminal: " << terminal;
  }
}

TEST(WaitsForInput, StdinReadOutsideADebuggerIsTheProgramsData) {
  SnapshotBuilder b = breakpoint_in_rank_0(false);
  b.find(200)->threads[0].python_stack = {py("load", "/job/train.py", 8)};
  EXPECT_EQ(find_kind(diagnose(b.s), "waits-for-input"), nullptr);
}

}  // namespace
}  // namespace hangtrace
