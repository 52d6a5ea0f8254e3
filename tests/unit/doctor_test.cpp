// hangtrace doctor's checks over a fake /proc and /sys built under a temp dir:
// every verdict path of each check, with the figures the finding must name.
#include "hangtrace/doctor.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <set>
#include <vector>

#include <fmt/format.h>

using namespace hangtrace;
using namespace hangtrace::doctor;
namespace fs = std::filesystem;

// A string literal with its embedded NULs (argv as /proc/PID/cmdline has it).
#define NULS(s) std::string(s, sizeof(s) - 1)

namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint32_t kPfKthread = 0x00200000;

std::string limits_text(const std::string& nofile_soft, const std::string& nofile_hard,
                        const std::string& memlock = "8388608") {
  return fmt::format(
      "Limit                     Soft Limit           Hard Limit           Units     \n"
      "Max cpu time              unlimited            unlimited            seconds   \n"
      "Max open files            {:<20} {:<20} files     \n"
      "Max locked memory         {:<20} {:<20} bytes     \n"
      "Max address space         unlimited            unlimited            bytes     \n",
      nofile_soft, nofile_hard, memlock, memlock);
}

// "KEY=VALUE\0..." from pairs.
std::string env_bytes(const std::vector<std::string>& entries) {
  std::string s;
  for (const auto& e : entries) s += e + '\0';
  return s;
}

std::string segment_line(uint64_t start, uint64_t bytes, uint64_t inode, const std::string& path) {
  return fmt::format("{:x}-{:x} rw-s 00000000 00:27 {:<10} {}\n", start, start + bytes, inode, path);
}

struct FakeProcess {
  int pid = 0, ppid = 1, threads = 1;
  uint32_t flags = 0x00400000;  // PF_RANDOMIZE, a user process
  std::string comm = "python3";
  std::string cmdline = NULS("/usr/bin/python3\0train.py\0");
  std::string exe = "/usr/bin/python3.11";
  std::string environ = env_bytes({"PATH=/usr/bin"});
  std::string limits = limits_text("65536", "65536");
  std::string maps =
      "55d0c0000000-55d0c0001000 r-xp 00000000 fe:00 100 /usr/bin/python3.11\n"
      "7f0000000000-7f0000001000 r-xp 00000000 fe:00 200 /usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13.0\n";
  int open_fds = 4;                   // fds 0..N-1, pointing at /dev/null
  std::vector<std::string> fd_extra;  // more fd link targets
};

class FakeHost {
 public:
  FakeHost() {
    char tmpl[] = "/tmp/hangtrace-doctor-test.XXXXXX";
    root_ = mkdtemp(tmpl);
    proc_ = root_ + "/proc";
    sys_ = root_ + "/sys";
    write(proc_ + "/self/limits", limits_text("1024", "524288", "8388608"));
    write(proc_ + "/self/status", "Name:\thangtrace\nUid:\t0\t0\t0\t0\nCapEff:\t000001ffffffffff\n");
    write(proc_ + "/sys/kernel/osrelease", "6.1.0-18-amd64\n");
    write(sys_ + "/kernel/btf/vmlinux", std::string(4096, 'b'));
  }
  ~FakeHost() { fs::remove_all(root_); }

  void write(const std::string& path, const std::string& text) {
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path, std::ios::binary) << text;
  }

  void add(const FakeProcess& p) {
    std::string dir = fmt::format("{}/{}", proc_, p.pid);
    write(dir + "/stat",
          fmt::format(
              "{} ({}) S {} {} {} 0 -1 {} 3268 6515 7 0 6 3 2 6 20 0 {} 0 44377 21303296 3779 "
              "18446744073709551615 94311138103296 94311138103637 140737146677488 0 0 0 0 16781312 2 0 0 "
              "0 17 1 0 0 0 0 0 94311138114992 94311138115608 94311976226816 140737146685573 "
              "140737146685648 140737146685648 140737146687439 0\n",
              p.pid, p.comm, p.ppid, p.pid, p.ppid, p.flags, p.threads));
    write(dir + "/cmdline", p.cmdline);
    write(dir + "/environ", p.environ);
    write(dir + "/limits", p.limits);
    write(dir + "/maps", p.maps);
    fs::create_directories(dir + "/fd");
    fs::create_symlink(p.exe, dir + "/exe");
    int fd = 0;
    for (; fd < p.open_fds; ++fd) fs::create_symlink("/dev/null", fmt::format("{}/fd/{}", dir, fd));
    for (const auto& target : p.fd_extra) fs::create_symlink(target, fmt::format("{}/fd/{}", dir, fd++));
  }

  DoctorInputs inputs(int pid, uint64_t shm_size, uint64_t shm_free) const {
    DoctorInputs in;
    in.pid = pid;
    in.proc_root = proc_;
    in.sys_root = sys_;
    in.default_torch_version_py = root_ + "/no-torch/version.py";
    in.online_cpus = 8;
    in.hangtrace_version = "0.1.0";
    in.libbpf_version = "1.1";
    in.hooks.not_attempted_why = "not root";
    in.statvfs = [shm_size, shm_free, this](const std::string& path) -> Result<FsUsage> {
      measured_path_ = path;
      return FsUsage{shm_size, shm_free};
    };
    return in;
  }

  const std::string& root() const { return root_; }
  const std::string& proc() const { return proc_; }
  const std::string& sys() const { return sys_; }
  mutable std::string measured_path_;

 private:
  std::string root_, proc_, sys_;
};

// A DataLoader job: main pid 100 with `workers` forked children (101, ...),
// the main process mapping `tensors` segments of `tensor_bytes` each.
void add_loader_job(FakeHost& host, int workers, int tensors, uint64_t tensor_bytes, int main_threads = 3) {
  FakeProcess main;
  main.pid = 100;
  main.threads = main_threads;
  for (int i = 0; i < tensors; ++i)
    main.maps += segment_line(0x7f1000000000 + i * 0x10000000ull, tensor_bytes, 500 + i,
                              fmt::format("/dev/shm/torch_101_{}_{} (deleted)", 1000 + i, i));
  host.add(main);
  for (int w = 0; w < workers; ++w) {
    FakeProcess worker = main;
    worker.pid = 101 + w;
    worker.ppid = 100;
    worker.threads = 1;
    worker.maps = FakeProcess().maps;
    host.add(worker);
  }
}

Check check_of(const DoctorReport& r, const std::string& id) {
  const Check* c = r.find(id);
  EXPECT_NE(c, nullptr) << "no check " << id;
  return c ? *c : Check{};
}

DoctorReport run_ok(const DoctorInputs& in) {
  auto r = run_doctor(in);
  EXPECT_TRUE(r.ok()) << r.error();
  return r.ok() ? *r : DoctorReport{};
}

// ---- /dev/shm -----------------------------------------------------------------

TEST(DoctorShm, TooSmallForWorkersTimesPrefetchTimesBatchFails) {
  FakeHost host;
  add_loader_job(host, 2, 2, 20 * kMiB);
  auto r = run_ok(host.inputs(100, 64 * kMiB, 24 * kMiB));
  Check c = check_of(r, "dev-shm-size");
  EXPECT_EQ(c.verdict, Verdict::Fail) << c.finding;
  EXPECT_NE(c.finding.find("64 MiB"), std::string::npos) << c.finding;
  EXPECT_NE(c.finding.find("80 MiB"), std::string::npos) << c.finding;
  EXPECT_NE(c.finding.find("2 workers"), std::string::npos) << c.finding;
  EXPECT_NE(c.finding.find("assumed"), std::string::npos) << c.finding;  // prefetch_factor was not given
  EXPECT_NE(c.fix.find("--shm-size"), std::string::npos);
  EXPECT_EQ(c.details["need_bytes"], 80 * kMiB);
  EXPECT_EQ(c.details["held_bytes"], 40 * kMiB);
  EXPECT_EQ(c.details["available_bytes"], 64 * kMiB);  // free + what the job holds
  EXPECT_EQ(c.details["workers"], 2);
  EXPECT_TRUE(r.any_fail());
  // The target's own mount namespace is what is measured.
  EXPECT_EQ(host.measured_path_, host.proc() + "/100/root/dev/shm");
}

TEST(DoctorShm, EnoughShmIsOk) {
  FakeHost host;
  add_loader_job(host, 2, 2, 20 * kMiB);
  auto r = run_ok(host.inputs(100, 16 * kGiB, 16 * kGiB - 40 * kMiB));
  Check c = check_of(r, "dev-shm-size");
  EXPECT_EQ(c.verdict, Verdict::Ok) << c.finding;
  EXPECT_NE(c.finding.find("need ~80 MiB"), std::string::npos) << c.finding;
  EXPECT_TRUE(c.fix.empty());
}

TEST(DoctorShm, DockerDefaultWarnsEvenWhenTheBatchesFit) {
  FakeHost host;
  add_loader_job(host, 2, 1, 1 * kMiB);
  auto r = run_ok(host.inputs(100, 64 * kMiB, 60 * kMiB));
  Check c = check_of(r, "dev-shm-size");
  EXPECT_EQ(c.verdict, Verdict::Warn) << c.finding;
  EXPECT_NE(c.finding.find("Docker's default"), std::string::npos) << c.finding;
  EXPECT_EQ(c.details["docker_default"], true);
}

TEST(DoctorShm, OverHalfOfWhatIsAvailableWarns) {
  FakeHost host;
  add_loader_job(host, 2, 1, 200 * kMiB);  // need 800 MiB of 1 GiB
  auto r = run_ok(host.inputs(100, kGiB, kGiB - 200 * kMiB));
  Check c = check_of(r, "dev-shm-size");
  EXPECT_EQ(c.verdict, Verdict::Warn) << c.finding;
  EXPECT_NE(c.finding.find("over half"), std::string::npos) << c.finding;
}

TEST(DoctorShm, CommandLineOverridesReplaceTheMeasuredBatchAndTheDefaultPrefetch) {
  FakeHost host;
  add_loader_job(host, 4, 1, 1 * kMiB);
  auto in = host.inputs(100, 2 * kGiB, 2 * kGiB);
  in.batch_bytes = 100 * kMiB;
  in.prefetch_factor = 8;  // 4 x 8 x 100 MiB = 3200 MiB > 2 GiB
  auto r = run_ok(in);
  Check c = check_of(r, "dev-shm-size");
  EXPECT_EQ(c.verdict, Verdict::Fail) << c.finding;
  EXPECT_EQ(c.details["need_bytes"], 3200 * kMiB);
  EXPECT_EQ(c.details["prefetch_factor_assumed"], false);
  EXPECT_EQ(c.details["batch_bytes_from"], "--batch-bytes");
  EXPECT_EQ(c.finding.find("assumed"), std::string::npos) << c.finding;
}

TEST(DoctorShm, NoWorkersNeedNoShm) {
  FakeHost host;
  add_loader_job(host, 0, 0, 0);
  auto r = run_ok(host.inputs(100, 64 * kMiB, 64 * kMiB));
  Check c = check_of(r, "dev-shm-size");
  EXPECT_EQ(c.verdict, Verdict::Ok) << c.finding;
  EXPECT_NE(c.finding.find("no DataLoader worker"), std::string::npos) << c.finding;
  EXPECT_EQ(check_of(r, "start-method").verdict, Verdict::Skip);
}

TEST(DoctorShm, WorkersWithoutAMappedTensorAskForBatchBytes) {
  FakeHost host;
  add_loader_job(host, 2, 0, 0);
  auto r = run_ok(host.inputs(100, 64 * kMiB, 64 * kMiB));
  Check c = check_of(r, "dev-shm-size");
  EXPECT_EQ(c.verdict, Verdict::Warn) << c.finding;  // Docker's 64 MiB with workers
  EXPECT_NE(c.finding.find("--batch-bytes"), std::string::npos) << c.finding;
}

TEST(DoctorShm, WithoutAPidTheHostsShmIsJudgedBySize) {
  FakeHost host;
  auto r = run_ok(host.inputs(0, 64 * kMiB, 64 * kMiB));
  EXPECT_EQ(check_of(r, "dev-shm-size").verdict, Verdict::Warn);
  EXPECT_EQ(host.measured_path_, "/dev/shm");
  r = run_ok(host.inputs(0, 32 * kGiB, 30 * kGiB));
  EXPECT_EQ(check_of(r, "dev-shm-size").verdict, Verdict::Ok);
  EXPECT_FALSE(r.any_fail());
}

TEST(DoctorShm, AnUnmeasurableShmFails) {
  FakeHost host;
  auto in = host.inputs(0, 0, 0);
  in.statvfs = [](const std::string&) -> Result<FsUsage> {
    return make_error("statvfs /dev/shm: No such file");
  };
  auto r = run_ok(in);
  EXPECT_EQ(check_of(r, "dev-shm-size").verdict, Verdict::Fail);
}

// ---- sharing strategy, ulimits --------------------------------------------------

TEST(DoctorSharing, UnlinkedSegmentsMeanFileDescriptor) {
  FakeHost host;
  add_loader_job(host, 2, 3, kMiB);
  auto r = run_ok(host.inputs(100, 16 * kGiB, 16 * kGiB));
  Check c = check_of(r, "sharing-strategy");
  EXPECT_EQ(c.details["strategy"], "file_descriptor") << c.finding;
  EXPECT_EQ(c.details["unlinked_segments"], 3);
}

TEST(DoctorSharing, NamedSegmentsOrTheShmManagerMeanFileSystem) {
  FakeHost host;
  FakeProcess main;
  main.pid = 100;
  main.maps += segment_line(0x7f1000000000, kMiB, 900, "/dev/shm/torch_100_1_0");
  host.add(main);
  auto r = run_ok(host.inputs(100, 16 * kGiB, 16 * kGiB));
  EXPECT_EQ(check_of(r, "sharing-strategy").details["strategy"], "file_system");

  FakeHost host2;
  FakeProcess main2;
  main2.pid = 100;
  host2.add(main2);
  FakeProcess manager;
  manager.pid = 150;
  manager.ppid = 100;
  manager.comm = "torch_shm_manag";
  manager.cmdline = NULS("/usr/bin/torch_shm_manager\0/torch_100_1\0");
  manager.exe = "/usr/bin/torch_shm_manager";
  host2.add(manager);
  r = run_ok(host2.inputs(100, 16 * kGiB, 16 * kGiB));
  Check c = check_of(r, "sharing-strategy");
  EXPECT_EQ(c.details["strategy"], "file_system") << c.finding;
  EXPECT_EQ(c.details["torch_shm_manager"], true);
  // The manager is no DataLoader worker.
  EXPECT_EQ(check_of(r, "dev-shm-size").details["workers"], 0);
}

TEST(DoctorSharing, NoTorchInTheTargetIsSkipped) {
  FakeHost host;
  FakeProcess p;
  p.pid = 100;
  p.maps = "55d0c0000000-55d0c0001000 r-xp 00000000 fe:00 100 /usr/bin/bash\n";
  host.add(p);
  auto r = run_ok(host.inputs(100, 16 * kGiB, 16 * kGiB));
  EXPECT_EQ(check_of(r, "sharing-strategy").verdict, Verdict::Skip);
  EXPECT_EQ(check_of(r, "torch-version").verdict, Verdict::Skip);
}

TEST(DoctorUlimit, LowNofileWithFileDescriptorSharingWarns) {
  FakeHost host;
  add_loader_job(host, 2, 1, kMiB);
  host.write(host.proc() + "/100/limits", limits_text("1024", "4096"));
  auto r = run_ok(host.inputs(100, 16 * kGiB, 16 * kGiB));
  Check c = check_of(r, "ulimit-nofile");
  EXPECT_EQ(c.verdict, Verdict::Warn) << c.finding;
  EXPECT_NE(c.finding.find("1024"), std::string::npos) << c.finding;
  EXPECT_NE(c.fix.find("ulimit -n"), std::string::npos);
}

TEST(DoctorUlimit, OpenFdsAtTheLimitFail) {
  FakeHost host;
  FakeProcess p;
  p.pid = 100;
  p.open_fds = 19;
  p.limits = limits_text("20", "20");
  host.add(p);
  auto r = run_ok(host.inputs(100, 16 * kGiB, 16 * kGiB));
  Check c = check_of(r, "ulimit-nofile");
  EXPECT_EQ(c.verdict, Verdict::Fail) << c.finding;
  EXPECT_EQ(c.details["most_open_fds"], 19);
}

TEST(DoctorUlimit, HighNofileIsOkAndUnlimitedParses) {
  FakeHost host;
  add_loader_job(host, 2, 1, kMiB);
  auto r = run_ok(host.inputs(100, 16 * kGiB, 16 * kGiB));
  EXPECT_EQ(check_of(r, "ulimit-nofile").verdict, Verdict::Ok);
  auto lim = parse_limit(limits_text("unlimited", "unlimited"), "Max open files");
  ASSERT_TRUE(lim.ok()) << lim.error();
  EXPECT_FALSE(lim->soft.has_value());
  EXPECT_FALSE(parse_limit("Max open files  abc 12 files\n", "Max open files").ok());
  EXPECT_FALSE(parse_limit("", "Max open files").ok());
}

TEST(DoctorUlimit, WithoutAPidDoctorsOwnNofileIsReported) {
  FakeHost host;  // self: soft 1024
  auto r = run_ok(host.inputs(0, 16 * kGiB, 16 * kGiB));
  Check c = check_of(r, "ulimit-nofile");
  EXPECT_EQ(c.verdict, Verdict::Warn) << c.finding;
  EXPECT_NE(c.finding.find("ulimit -n is 1024"), std::string::npos) << c.finding;
}

TEST(DoctorUlimit, MemlockMattersOnlyBefore511) {
  FakeHost host;
  host.write(host.proc() + "/self/limits", limits_text("65536", "65536", "65536"));
  auto r = run_ok(host.inputs(0, 16 * kGiB, 16 * kGiB));
  EXPECT_EQ(check_of(r, "ulimit-memlock").verdict, Verdict::Ok);  // 6.1: memcg accounting
  host.write(host.proc() + "/sys/kernel/osrelease", "5.10.0-28-amd64\n");
  r = run_ok(host.inputs(0, 16 * kGiB, 16 * kGiB));
  Check c = check_of(r, "ulimit-memlock");
  EXPECT_EQ(c.verdict, Verdict::Warn) << c.finding;
  EXPECT_NE(c.fix.find("ulimit -l unlimited"), std::string::npos);
  EXPECT_EQ(check_of(r, "kernel").verdict, Verdict::Ok);  // has the ring buffer (5.8)
  host.write(host.proc() + "/sys/kernel/osrelease", "4.19.0-25-amd64\n");
  r = run_ok(host.inputs(0, 16 * kGiB, 16 * kGiB));
  Check k = check_of(r, "kernel");
  EXPECT_EQ(k.verdict, Verdict::Warn);
  EXPECT_NE(k.finding.find("ring buffer"), std::string::npos) << k.finding;
}

// ---- environment ------------------------------------------------------------------

TEST(DoctorEnv, DistributedJobWithoutDebugVariablesGetsTheSeedsAdvice) {
  FakeHost host;
  FakeProcess p;
  p.pid = 100;
  p.environ = env_bytes({"RANK=1", "WORLD_SIZE=8", "LOCAL_RANK=1"});
  host.add(p);
  auto r = run_ok(host.inputs(100, 16 * kGiB, 16 * kGiB));
  Check debug = check_of(r, "nccl-debug");
  EXPECT_EQ(debug.verdict, Verdict::Warn);
  EXPECT_NE(debug.finding.find("rank 1 of 8"), std::string::npos) << debug.finding;
  EXPECT_NE(debug.fix.find("NCCL_DEBUG=INFO"), std::string::npos);
  Check tdd = check_of(r, "torch-distributed-debug");
  EXPECT_EQ(tdd.verdict, Verdict::Warn);
  EXPECT_NE(tdd.fix.find("TORCH_DISTRIBUTED_DEBUG=DETAIL"), std::string::npos);
  Check async = check_of(r, "nccl-async-error-handling");
  EXPECT_EQ(async.verdict, Verdict::Warn);
  // torch 1.13 (libtorch_cpu.so.1.13.0 mapped) reads the old name.
  EXPECT_NE(async.fix.find("export NCCL_ASYNC_ERROR_HANDLING=1"), std::string::npos) << async.fix;
  EXPECT_NE(async.fix.find("timeout="), std::string::npos);
  EXPECT_FALSE(r.any_fail());  // advice, not failure
}

TEST(DoctorEnv, DistributedJobWithTheVariablesSetIsOk) {
  FakeHost host;
  FakeProcess p;
  p.pid = 100;
  p.environ = env_bytes({"WORLD_SIZE=2", "RANK=0", "NCCL_DEBUG=INFO", "TORCH_DISTRIBUTED_DEBUG=DETAIL",
                         "TORCH_NCCL_ASYNC_ERROR_HANDLING=1"});
  host.add(p);
  auto r = run_ok(host.inputs(100, 16 * kGiB, 16 * kGiB));
  EXPECT_EQ(check_of(r, "nccl-debug").verdict, Verdict::Ok);
  EXPECT_EQ(check_of(r, "torch-distributed-debug").verdict, Verdict::Ok);
  Check async = check_of(r, "nccl-async-error-handling");
  EXPECT_EQ(async.verdict, Verdict::Ok) << async.finding;
  EXPECT_EQ(async.details["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "1");
}

TEST(DoctorEnv, AsyncErrorHandlingSetToZeroStillWarnsAndBlockingWaitCounts) {
  FakeHost host;
  FakeProcess p;
  p.pid = 100;
  p.environ = env_bytes({"WORLD_SIZE=2", "RANK=0", "NCCL_ASYNC_ERROR_HANDLING=0"});
  host.add(p);
  auto r = run_ok(host.inputs(100, 16 * kGiB, 16 * kGiB));
  EXPECT_EQ(check_of(r, "nccl-async-error-handling").verdict, Verdict::Warn);
  host.write(host.proc() + "/100/environ", env_bytes({"WORLD_SIZE=2", "RANK=0", "NCCL_BLOCKING_WAIT=1"}));
  r = run_ok(host.inputs(100, 16 * kGiB, 16 * kGiB));
  EXPECT_EQ(check_of(r, "nccl-async-error-handling").verdict, Verdict::Ok);
}

TEST(DoctorEnv, NotDistributedSkipsTheNcclChecksAndCudaLaunchBlockingWarns) {
  FakeHost host;
  FakeProcess p;
  p.pid = 100;
  p.environ = env_bytes({"CUDA_LAUNCH_BLOCKING=1", "OMP_NUM_THREADS=64"});
  host.add(p);
  auto r = run_ok(host.inputs(100, 16 * kGiB, 16 * kGiB));
  EXPECT_EQ(check_of(r, "nccl-debug").verdict, Verdict::Skip);
  EXPECT_EQ(check_of(r, "nccl-async-error-handling").verdict, Verdict::Skip);
  EXPECT_EQ(check_of(r, "cuda-launch-blocking").verdict, Verdict::Warn);
  Check omp = check_of(r, "omp-num-threads");
  EXPECT_EQ(omp.verdict, Verdict::Warn) << omp.finding;  // 64 > 8 online CPUs
  EXPECT_NE(omp.finding.find("8 online CPUs"), std::string::npos) << omp.finding;
}

TEST(DoctorEnv, WithoutAPidDoctorsOwnEnvironmentIsRead) {
  FakeHost host;
  auto in = host.inputs(0, 16 * kGiB, 16 * kGiB);
  in.self_environ = env_bytes({"WORLD_SIZE=4", "RANK=3"});
  auto r = run_ok(in);
  Check c = check_of(r, "nccl-debug");
  EXPECT_EQ(c.verdict, Verdict::Warn);
  EXPECT_NE(c.finding.find("rank 3 of 4"), std::string::npos) << c.finding;
  // No torch version known: the new variable name.
  EXPECT_NE(check_of(r, "nccl-async-error-handling").fix.find("TORCH_NCCL_ASYNC_ERROR_HANDLING=1"),
            std::string::npos);
}

TEST(DoctorEnv, EnvironValueIsGetenvsAnswer) {
  std::string env = env_bytes({"A=1", "AB=2", "A=3", "EMPTY="});
  EXPECT_EQ(environ_value(env, "A"), "1");
  EXPECT_EQ(environ_value(env, "AB"), "2");
  EXPECT_EQ(environ_value(env, "EMPTY"), "");
  EXPECT_FALSE(environ_value(env, "B").has_value());
}

// ---- start method ---------------------------------------------------------------------

TEST(DoctorStartMethod, ForkedWorkersOfAThreadedMainWarn) {
  FakeHost host;
  add_loader_job(host, 2, 1, kMiB, /*main_threads=*/12);
  auto r = run_ok(host.inputs(100, 16 * kGiB, 16 * kGiB));
  Check c = check_of(r, "start-method");
  EXPECT_EQ(c.verdict, Verdict::Warn) << c.finding;
  EXPECT_NE(c.finding.find("101,102"), std::string::npos) << c.finding;
  EXPECT_NE(c.finding.find("12 threads"), std::string::npos) << c.finding;
  EXPECT_NE(c.fix.find("multiprocessing_context='spawn'"), std::string::npos);
}

TEST(DoctorStartMethod, SpawnedWorkersAreOkAndCountForShm) {
  FakeHost host;
  FakeProcess main;
  main.pid = 100;
  main.threads = 8;
  main.maps += segment_line(0x7f1000000000, 30 * kMiB, 700, "/dev/shm/torch_101_5_0 (deleted)");
  host.add(main);
  for (int pid : {101, 102, 103}) {
    FakeProcess w;
    w.pid = pid;
    w.ppid = 100;
    w.cmdline = NULS("/usr/bin/python3\0-c\0from multiprocessing.spawn import spawn_main; spawn_main()\0");
    host.add(w);
  }
  FakeProcess tracker;  // spawn's resource tracker is no worker
  tracker.pid = 104;
  tracker.ppid = 100;
  tracker.cmdline = NULS("/usr/bin/python3\0-c\0from multiprocessing.resource_tracker import main;main(5)\0");
  host.add(tracker);
  auto r = run_ok(host.inputs(100, 64 * kMiB, 34 * kMiB));
  Check sm = check_of(r, "start-method");
  EXPECT_EQ(sm.verdict, Verdict::Ok) << sm.finding;
  EXPECT_EQ(sm.details["method"], "spawn");
  Check shm = check_of(r, "dev-shm-size");
  EXPECT_EQ(shm.details["workers"], 3);
  EXPECT_EQ(shm.details["need_bytes"], 3 * 2 * 30 * kMiB);
  EXPECT_EQ(shm.verdict, Verdict::Fail);
}

// ---- kernel, BTF, hooks, versions -----------------------------------------------------------

TEST(DoctorKernel, MissingBtfFails) {
  FakeHost host;
  fs::remove(host.sys() + "/kernel/btf/vmlinux");
  auto r = run_ok(host.inputs(0, 16 * kGiB, 16 * kGiB));
  Check c = check_of(r, "btf");
  EXPECT_EQ(c.verdict, Verdict::Fail) << c.finding;
  EXPECT_NE(c.fix.find("CONFIG_DEBUG_INFO_BTF"), std::string::npos);
  EXPECT_TRUE(r.any_fail());
}

TEST(DoctorKernel, PresentBtfAndReleaseAreOk) {
  FakeHost host;
  auto r = run_ok(host.inputs(0, 16 * kGiB, 16 * kGiB));
  EXPECT_EQ(check_of(r, "btf").verdict, Verdict::Ok);
  Check k = check_of(r, "kernel");
  EXPECT_EQ(k.verdict, Verdict::Ok);
  EXPECT_EQ(k.details["release"], "6.1.0-18-amd64");
  EXPECT_EQ(parse_kernel_release("6.18.44-fc-v657"), (std::pair<int, int>{6, 18}));
  EXPECT_FALSE(parse_kernel_release("garbage").has_value());
}

TEST(DoctorKernel, PrivilegesComeFromCapEff) {
  FakeHost host;
  auto r = run_ok(host.inputs(0, 16 * kGiB, 16 * kGiB));
  EXPECT_EQ(check_of(r, "privileges").verdict, Verdict::Ok);
  host.write(host.proc() + "/self/status", "Name:\thangtrace\nCapEff:\t0000000000000000\n");
  r = run_ok(host.inputs(0, 16 * kGiB, 16 * kGiB));
  Check c = check_of(r, "privileges");
  EXPECT_EQ(c.verdict, Verdict::Warn) << c.finding;
  EXPECT_NE(c.fix.find("sudo"), std::string::npos);
}

TEST(DoctorHooks, NotRootSkipsTracerErrorFailsMissingHooksWarn) {
  FakeHost host;
  auto in = host.inputs(0, 16 * kGiB, 16 * kGiB);
  auto r = run_ok(in);
  EXPECT_EQ(check_of(r, "bpf-hooks").verdict, Verdict::Skip);
  EXPECT_EQ(check_of(r, "bpf-hooks").finding, "not root");
  in.hooks = HookProbe{};
  in.hooks.attempted = true;
  in.hooks.error = "failed to load futex: Operation not permitted";
  r = run_ok(in);
  EXPECT_EQ(check_of(r, "bpf-hooks").verdict, Verdict::Fail);
  in.hooks = HookProbe{};
  in.hooks.attempted = true;
  in.hooks.active = 10;
  in.hooks.off = 1;
  in.hooks.off_hooks = {"sched tp_btf/sched_waking: tp_btf unavailable"};
  r = run_ok(in);
  Check c = check_of(r, "bpf-hooks");
  EXPECT_EQ(c.verdict, Verdict::Warn);
  EXPECT_NE(c.finding.find("sched_waking"), std::string::npos) << c.finding;
  in.hooks.off = 0;
  in.hooks.off_hooks.clear();
  r = run_ok(in);
  EXPECT_EQ(check_of(r, "bpf-hooks").verdict, Verdict::Ok);
}

TEST(DoctorVersions, TorchVersionPyBesideTheMappedTorchAndPythonFromLibpython) {
  FakeHost host;
  FakeProcess p;
  p.pid = 100;
  p.exe = "/opt/venv/bin/python";
  p.maps =
      "7f0000000000-7f0000001000 r-xp 00000000 fe:00 300 /opt/conda/lib/libpython3.10.so.1.0\n"
      "7f0000002000-7f0000003000 r-xp 00000000 fe:00 301 "
      "/opt/venv/lib/python3.10/site-packages/torch/lib/libtorch_cpu.so\n";
  host.add(p);
  fs::remove(host.proc() + "/100/exe");
  fs::create_symlink(p.exe, host.proc() + "/100/exe");
  // Read through the target's root: PROC/100/root/<path>.
  host.write(host.proc() + "/100/root/opt/venv/lib/python3.10/site-packages/torch/version.py",
             "__version__ = '2.1.2+cu121'\ndebug = False\n");
  auto r = run_ok(host.inputs(100, 16 * kGiB, 16 * kGiB));
  Check t = check_of(r, "torch-version");
  EXPECT_EQ(t.verdict, Verdict::Ok) << t.finding;
  EXPECT_EQ(t.details["version"], "2.1.2+cu121");
  Check py = check_of(r, "python-version");
  EXPECT_EQ(py.details["version"], "3.10") << py.finding;
  EXPECT_EQ(check_of(r, "hangtrace-version").details["version"], "0.1.0");
  EXPECT_EQ(check_of(r, "libbpf").details["version"], "1.1");
}

TEST(DoctorVersions, DistroTorchFromTheLibrarysName) {
  FakeHost host;
  add_loader_job(host, 0, 0, 0);
  auto r = run_ok(host.inputs(100, 16 * kGiB, 16 * kGiB));
  EXPECT_EQ(check_of(r, "torch-version").details["version"], "1.13.0");
  EXPECT_EQ(check_of(r, "python-version").details["version"], "3.11");  // /usr/bin/python3.11
  EXPECT_EQ(parse_torch_version_py("__version__ = \"1.13.1\"\n"), "1.13.1");
  EXPECT_FALSE(parse_torch_version_py("version = 1").has_value());
}

// ---- bad targets, output ------------------------------------------------------------------------

TEST(DoctorTarget, MissingPidAndKernelThreadsAreErrors) {
  FakeHost host;
  auto r = run_doctor(host.inputs(4242, 16 * kGiB, 16 * kGiB));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), "no such process: 4242");
  FakeProcess k;
  k.pid = 2;
  k.comm = "kthreadd";
  k.flags = kPfKthread;
  host.add(k);
  r = run_doctor(host.inputs(2, 16 * kGiB, 16 * kGiB));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("kernel thread"), std::string::npos) << r.error();
  EXPECT_FALSE(validate_target(host.proc(), 2).ok());
  EXPECT_FALSE(validate_target(host.proc(), -5).ok());
}

TEST(DoctorOutput, JsonShapeAndTable) {
  FakeHost host;
  add_loader_job(host, 2, 2, 20 * kMiB);
  auto r = run_ok(host.inputs(100, 64 * kMiB, 24 * kMiB));
  nlohmann::json j = report_to_json(r);
  EXPECT_EQ(j["schema"], "hangtrace.doctor/1");
  EXPECT_EQ(j["pid"], 100);
  ASSERT_TRUE(j["checks"].is_array());
  std::set<std::string> ids;
  for (const auto& c : j["checks"]) {
    ids.insert(c["id"].get<std::string>());
    EXPECT_TRUE(c["verdict"] == "ok" || c["verdict"] == "warn" || c["verdict"] == "fail" ||
                c["verdict"] == "skip");
    EXPECT_TRUE(c["finding"].is_string());
    EXPECT_TRUE(c["fix"].is_string());
    EXPECT_TRUE(c["details"].is_object());
  }
  EXPECT_EQ(ids.size(), j["checks"].size()) << "duplicate ids";
  for (const char* id : {"dev-shm-size", "sharing-strategy", "ulimit-memlock", "ulimit-nofile", "nccl-debug",
                         "torch-distributed-debug", "nccl-async-error-handling", "btf", "bpf-hooks", "kernel",
                         "libbpf", "torch-version", "python-version", "start-method"})
    EXPECT_TRUE(ids.count(id)) << id;
  EXPECT_EQ(j["summary"]["fail"], 1);
  int total = 0;
  for (const auto& [k, v] : j["summary"].items()) total += v.get<int>();
  EXPECT_EQ(static_cast<size_t>(total), j["checks"].size());
  std::string text = render_text(r);
  EXPECT_NE(text.find("FAIL  dev-shm-size"), std::string::npos) << text;
  EXPECT_NE(text.find("fix: give the job a bigger /dev/shm"), std::string::npos) << text;
  EXPECT_NE(text.find("1 fail"), std::string::npos) << text;
  EXPECT_EQ(format_bytes(64 * kMiB), "64 MiB");
  EXPECT_EQ(format_bytes(1536 * kMiB), "1.5 GiB");
  EXPECT_EQ(format_bytes(17), "17 B");
}

}  // namespace
