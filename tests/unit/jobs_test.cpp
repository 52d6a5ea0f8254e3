// From named pids to jobs (jobs.h), on a fixture /proc: the spellings of
// --pid, the walk up to a job's root through launchers, forked workers and
// multiprocessing children, where it stops, host-wide discovery, the job's
// shape from a snapshot, and container ids from cgroup paths.
#include <gtest/gtest.h>

#include "fake_proc.h"
#include "hangtrace/analysis.h"
#include "hangtrace/jobs.h"
#include "snapshot_builder.h"

namespace hangtrace::jobs {
namespace {

using testing::FakeProc;

constexpr int kSelf = 999;  // hangtrace's own pid in the fixtures

std::vector<int> pids_of(const std::vector<std::string>& args, std::string* bad = nullptr) {
  std::string ignored;
  auto out = parse_pid_list(args, bad ? bad : &ignored);
  return out ? *out : std::vector<int>{-1};
}

TEST(Jobs, EverySpellingOfSeveralPids) {
  EXPECT_EQ(pids_of({"12"}), (std::vector<int>{12}));
  EXPECT_EQ(pids_of({"1", "2", "3"}), (std::vector<int>{1, 2, 3}));                  // --pid 1 2 3
  EXPECT_EQ(pids_of({"1,2,3"}), (std::vector<int>{1, 2, 3}));                        // -p 1,2,3
  EXPECT_EQ(pids_of({"8974\n8977\n8979\n"}), (std::vector<int>{8974, 8977, 8979}));  // "$(pgrep)" quoted
  EXPECT_EQ(pids_of({"3", "1,3", "2"}), (std::vector<int>{3, 1, 2}));                // repeats once, in order
  EXPECT_EQ(pids_of({"  "}), (std::vector<int>{}));
  for (std::string bad_arg : {"abc", "-5", "0", "1,,2", "1,", ",1", "12abc", "99999999999999999999", "1.5"}) {
    std::string bad;
    EXPECT_FALSE(parse_pid_list({"7", bad_arg}, &bad)) << bad_arg;
    EXPECT_FALSE(bad.empty()) << bad_arg;
  }
  std::string bad;
  parse_pid_list({"4,x,5"}, &bad);
  EXPECT_EQ(bad, "x");
}

TEST(Jobs, UnusablePidsSayWhy) {
  FakeProc proc;
  proc.add(2, 0, "kthreadd", {}, "", {}, 0x00208040);
  proc.add(50, 1, "sleep", {"/usr/bin/sleep", "100"});
  proc.add(kSelf, 1, "hangtrace", {"/usr/bin/hangtrace"});
  const procfs::ProcFs fs(proc.root.string());
  EXPECT_EQ(unusable_pid(fs, 50, kSelf), std::nullopt);
  EXPECT_EQ(unusable_pid(fs, 4242, kSelf), "no such process");
  EXPECT_NE(unusable_pid(fs, 2, kSelf).value_or("").find("kernel thread (kthreadd)"), std::string::npos);
  EXPECT_EQ(unusable_pid(fs, kSelf, kSelf), "is hangtrace itself");
}

// The shapes of real launches, each rooted in a shell.
struct Host {
  FakeProc proc;
  procfs::ProcFs fs{""};
  Host() {
    proc.add(1, 0, "systemd", {"/sbin/init"});
    proc.add(700, 1, "sshd", {"sshd: alice"});
    proc.add(800, 700, "bash", {"-bash"});
    // A DataLoader job: main and two forked workers (same command line).
    const std::vector<std::string> train = {"/usr/bin/python3", "train.py", "--epochs", "3"};
    proc.add(8974, 800, "python3", train);
    proc.add(8977, 8974, "python3", train);
    proc.add(8979, 8974, "python3", train);
    // torchrun (its script name as comm), two ranks it exec'd, a worker each.
    proc.add(9000, 800, "torchrun",
             {"/usr/bin/python3", "/usr/local/bin/torchrun", "--nproc_per_node", "2", "t.py"});
    for (int r = 0; r < 2; ++r) {
      proc.add(9001 + r, 9000, "python3", {"/usr/bin/python3", "-u", "t.py"});
      proc.environ(9001 + r, {"PATH=/bin", "RANK=" + std::to_string(r), "LOCAL_RANK=" + std::to_string(r),
                              "WORLD_SIZE=2"});
      proc.add(9011 + r, 9001 + r, "python3", {"/usr/bin/python3", "-u", "t.py"});
      proc.environ(9011 + r,
                   {"RANK=" + std::to_string(r), "LOCAL_RANK=" + std::to_string(r), "WORLD_SIZE=2"});
    }
    // python -m torch.distributed.run, under tmux.
    proc.add(600, 1, "tmux: server", {"tmux"});
    proc.add(601, 600, "zsh", {"-zsh"});
    proc.add(9100, 601, "python3",
             {"/usr/bin/python3", "-m", "torch.distributed.run", "--standalone", "t.py"});
    proc.add(9101, 9100, "python3", {"/usr/bin/python3", "-u", "t.py"});
    // mp.spawn children, and a custom launcher that sets RANK itself.
    proc.add(9200, 800, "python3", {"/usr/bin/python3", "spawn_main.py"});
    proc.add(
        9201, 9200, "python3",
        {"/usr/bin/python3", "-c", "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5)",
         "--multiprocessing-fork"});
    proc.add(9300, 800, "python3", {"/usr/bin/python3", "my_launcher.py"});
    proc.add(9301, 9300, "python3", {"/usr/bin/python3", "worker.py"});
    proc.environ(9301, {"RANK=3", "WORLD_SIZE=4"});
    // A test runner (or sweep script) that started a job is not part of it.
    proc.add(9400, 800, "python3", {"/usr/bin/python3", "-m", "unittest", "test_x"});
    proc.add(9401, 9400, "python3", {"/usr/bin/python3", "job.py"});
    proc.add(9402, 9401, "python3", {"/usr/bin/python3", "job.py"});
    // A container: the shim, the job as the namespace's pid 1, a worker.
    proc.add(5000, 1, "containerd-shim", {"/usr/bin/containerd-shim-runc-v2", "-namespace", "moby"});
    proc.add(5001, 5000, "python3", {"python3", "train.py"});
    proc.status(5001, 5000, "python3", {5001, 1});
    proc.add(5002, 5001, "python3", {"python3", "train.py"});
    proc.status(5002, 5001, "python3", {5002, 7});
    // unshare: no runtime we know, but the job is in another pid namespace.
    proc.add(5100, 800, "unshare", {"unshare", "--pid", "--fork", "python3", "j.py"});
    proc.add(5101, 5100, "python3", {"python3", "j.py"});
    proc.status(5101, 5100, "python3", {5101, 1});
    // Slurm, and hangtrace's own launch mode.
    proc.add(5200, 1, "slurmstepd", {"slurmstepd: [42.0]"});
    proc.add(5201, 5200, "python3", {"/usr/bin/python3", "train.py"});
    proc.add(kSelf, 800, "hangtrace", {"/usr/bin/hangtrace", "--", "python3", "l.py"});
    proc.add(5301, kSelf, "python3", {"python3", "l.py"});
    fs = procfs::ProcFs(proc.root.string());
  }
  JobRoot root(int pid) { return job_root_of(fs, pid, kSelf); }
};

TEST(Jobs, WorkersRanksAndLaunchersWalkUpToTheJobRoot) {
  Host h;
  EXPECT_EQ(h.root(8974).root, 8974);
  EXPECT_EQ(h.root(8974).stopped_at, "bash 800 (a shell)");
  EXPECT_EQ(h.root(8979).root, 8974);  // a forked DataLoader worker
  EXPECT_EQ(h.root(9012).root, 9000);  // a rank's worker -> rank -> torchrun
  EXPECT_EQ(h.root(9001).root, 9000);
  EXPECT_EQ(h.root(9000).stopped_at, "bash 800 (a shell)");
  EXPECT_EQ(h.root(9101).root, 9100);  // python -m torch.distributed.run
  EXPECT_EQ(h.root(9100).stopped_at, "zsh 601 (a shell)");
  EXPECT_EQ(h.root(9201).root, 9200);  // mp.spawn child
  EXPECT_EQ(h.root(9301).root, 9300);  // a rank of a launcher we do not know by name
}

TEST(Jobs, TheWalkStopsAtWhatIsNotPartOfTheJob) {
  Host h;
  EXPECT_EQ(h.root(9402).root, 9401);  // not the unittest runner above it
  EXPECT_EQ(h.root(9401).stopped_at, "python3 9400 (not a launcher of it)");
  EXPECT_EQ(h.root(5002).root, 5001);
  EXPECT_EQ(h.root(5001).stopped_at, "containerd-shim 5000 (a container runtime)");
  EXPECT_EQ(h.root(5101).root, 5101);
  EXPECT_EQ(h.root(5101).stopped_at, "unshare 5100 (outside the job's pid namespace)");
  EXPECT_EQ(h.root(5201).stopped_at, "slurmstepd 5200 (a batch scheduler)");
  EXPECT_EQ(h.root(5301).stopped_at, "hangtrace 999 (hangtrace itself)");
  EXPECT_EQ(h.root(1).stopped_at, "the top of the process tree");
}

TEST(Jobs, AParentLoopEndsTheWalk) {
  FakeProc proc;
  proc.add(10, 11, "python3", {"python3", "a.py"});
  proc.add(11, 10, "python3", {"python3", "a.py"});
  JobRoot r = job_root_of(procfs::ProcFs(proc.root.string()), 10, kSelf);
  EXPECT_EQ(r.stopped_at, "python3 10 (a loop in the parent chain)");
}

TEST(Jobs, PidsOfOneJobAreOneRequest) {
  Host h;
  // What `pgrep -f train` prints, plus a rank's worker and an unrelated job.
  auto jobs = group_by_job(h.fs, {8974, 8977, 8979, 9012, 9001, 5201}, kSelf);
  ASSERT_EQ(jobs.size(), 3u);
  EXPECT_EQ(jobs[0].root, 8974);
  EXPECT_EQ(jobs[0].given, (std::vector<int>{8974, 8977, 8979}));
  EXPECT_EQ(jobs[1].root, 9000);
  EXPECT_EQ(jobs[1].given, (std::vector<int>{9012, 9001}));
  EXPECT_EQ(jobs[2].root, 5201);
}

TEST(Jobs, ProgramOfACommandLine) {
  EXPECT_EQ(program_of("/usr/bin/python3 -u train.py --lr 1"), "train.py");
  EXPECT_EQ(program_of("python3 -X dev -W ignore -m torch.distributed.run --standalone t.py"),
            "torch.distributed.run");
  EXPECT_EQ(program_of("python3 -mtorch.distributed.launch t.py"), "torch.distributed.launch");
  EXPECT_EQ(program_of("python3 -c import x"), "-c");
  EXPECT_EQ(program_of("/usr/local/bin/deepspeed t.py"), "deepspeed");
  EXPECT_EQ(program_of(""), "");
}

TEST(Jobs, DiscoveryFindsLibtorchAndGpuHoldersOrWhatTheSelectorsPick) {
  FakeProc proc;
  proc.add(1, 0, "systemd", {"/sbin/init"});
  proc.add(10, 1, "python3", {"python3", "train.py"});
  std::ofstream(proc.root / "10" / "maps")
      << "7f0000000000-7f0000001000 r-xp 00000000 08:01 1234 /usr/lib/python3/dist-packages/torch/lib/"
         "libtorch_cpu.so\n";
  proc.add(20, 1, "jax", {"python3", "jax_train.py"}, "0::/kubepods/pod-a/c1\n",
           {"/dev/nvidiactl", "/dev/nvidia0"});
  proc.add(30, 1, "python3", {"python3", "web.py"}, "0::/user.slice\n", {"/dev/nvidiactl"});
  std::ofstream(proc.root / "30" / "maps") << "";
  proc.add(kSelf, 1, "hangtrace", {"hangtrace"}, "0::/user.slice\n", {"/dev/nvidia0"});
  const procfs::ProcFs fs(proc.root.string());
  auto any = daemon::JobMatcher::make({});
  ASSERT_TRUE(any);
  auto found = discover_training_processes(fs, *any, kSelf, std::chrono::milliseconds(500));
  ASSERT_TRUE(found) << found.error();
  EXPECT_EQ(found->pids, (std::vector<int>{10, 20}));
  EXPECT_EQ(found->reasons, (std::vector<std::string>{"maps libtorch_cpu.so", "holds /dev/nvidia0"}));
  auto web = daemon::JobMatcher::make({{R"(web\.py)"}, {}, false});
  ASSERT_TRUE(web);
  found = discover_training_processes(fs, *web, kSelf, std::chrono::milliseconds(500));
  ASSERT_TRUE(found);
  EXPECT_EQ(found->pids, (std::vector<int>{30}));
  auto pod = daemon::JobMatcher::make({{}, {"/kubepods/pod-a"}, false});
  ASSERT_TRUE(pod);
  found = discover_training_processes(fs, *pod, kSelf, std::chrono::milliseconds(500));
  ASSERT_TRUE(found);
  EXPECT_EQ(found->pids, (std::vector<int>{20}));
}

// torchrun 100 -> ranks 101, 102 (RANK set) -> a DataLoader worker each.
Snapshot torchrun_snapshot() {
  testing::SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target, "torchrun");
  for (int r = 0; r < 2; ++r) {
    auto& rank = b.proc(101 + r, 100, ProcessRole::Descendant);
    rank.rank = r;
    rank.local_rank = r;
    rank.world_size = 2;
    auto& worker = b.proc(111 + r, 101 + r, ProcessRole::Descendant);
    worker.rank = r;
    worker.local_rank = r;
    worker.world_size = 2;
    UserFrame f;
    f.kind = UserFrame::Kind::Python;
    f.file = "/usr/lib/python3/dist-packages/torch/utils/data/_utils/worker.py";
    f.function = "_worker_loop";
    b.thread(111 + r, 111 + r).python_stack.push_back(f);
  }
  return b.s;
}

TEST(Jobs, ShapeGroupsRanksWithTheirWorkers) {
  Snapshot s = torchrun_snapshot();
  JobShape shape = job_shape(s);
  EXPECT_EQ(shape.launcher, 100);
  ASSERT_EQ(shape.ranks.size(), 2u);
  EXPECT_EQ(shape.ranks[1].rank, 1);
  EXPECT_EQ(shape.ranks[1].pid, 102);
  EXPECT_EQ(shape.ranks[1].workers, (std::vector<int>{112}));
  EXPECT_EQ(shape.ranks[1].world_size, 2);
  EXPECT_EQ(member_role(s, 100), "the launcher of job 100 (torchrun)");
  EXPECT_EQ(member_role(s, 102), "rank 1 (local rank 1) of job 100");
  EXPECT_EQ(member_role(s, 112), "a DataLoader worker of rank 1 of job 100");
  EXPECT_EQ(job_role_label(s, s.process(102)), "rank 1");
  EXPECT_EQ(job_role_label(s, s.process(100)), "launcher");
  EXPECT_EQ(job_role_label(s, s.process(112)), "worker");
}

TEST(Jobs, ShapeOfAPlainDataLoaderJob) {
  testing::SnapshotBuilder b(10);
  b.proc(10, 1, ProcessRole::Target);
  b.proc(11, 10, ProcessRole::Descendant);
  b.proc(12, 11, ProcessRole::Descendant);
  Snapshot s = b.s;
  JobShape shape = job_shape(s);
  EXPECT_FALSE(shape.launcher);
  EXPECT_TRUE(shape.ranks.empty());
  EXPECT_EQ(member_role(s, 10), "the main process of job 10");
  EXPECT_EQ(member_role(s, 11), "a worker of job 10");
  EXPECT_EQ(member_role(s, 12), "a descendant of job 10 (child of 11)");
  EXPECT_EQ(member_role(s, 77), "not in job 10");
}

TEST(Jobs, ContainerIdsFromCgroupPaths) {
  const std::string id = "3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a";
  auto docker = container_from_cgroup("0::/system.slice/docker-" + id + ".scope\n");
  EXPECT_EQ(docker.runtime, "docker");
  EXPECT_EQ(docker.id, id);
  auto v1 = container_from_cgroup("12:memory:/docker/" + id + "\n11:pids:/docker/" + id + "\n");
  EXPECT_EQ(v1.runtime, "docker");
  EXPECT_EQ(v1.id, id);
  auto k8s = container_from_cgroup(
      "0::/kubepods.slice/kubepods-burstable.slice/"
      "kubepods-burstable-pod1a2b3c4d_0000_4e5f_8a9b_0c1d2e3f4a5b.slice/"
      "cri-containerd-" +
      id + ".scope\n");
  EXPECT_EQ(k8s.runtime, "containerd");
  EXPECT_EQ(k8s.id, id);
  EXPECT_EQ(k8s.pod_uid, "1a2b3c4d-0000-4e5f-8a9b-0c1d2e3f4a5b");
  auto cgroupfs = container_from_cgroup(
      "4:memory:/kubepods/besteffort/pod1a2b3c4d-0000-4e5f-8a9b-0c1d2e3f4a5b/" + id + "\n");
  EXPECT_EQ(cgroupfs.pod_uid, "1a2b3c4d-0000-4e5f-8a9b-0c1d2e3f4a5b");
  EXPECT_EQ(cgroupfs.id, id);
  EXPECT_EQ(container_from_cgroup("0::/user.slice/user-0.slice/session-1.scope\n").id, "");
  EXPECT_EQ(container_from_cgroup("0::/docker-" + id.substr(1) + ".scope\n").id, "");  // 63 digits: not an id
  EXPECT_EQ(container_from_cgroup("garbage without colons\n::\n").id, "");
}

}  // namespace
}  // namespace hangtrace::jobs
