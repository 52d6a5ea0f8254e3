// hangtrace doctor's /dev/shm and DataLoader checks over a fake host
// (doctor_fake_host.h): /dev/shm against workers x prefetch_factor x batch,
// the sharing strategy, ulimit -n, the workers' start method -- every verdict
// path, with the figures the finding must name.
#include <gtest/gtest.h>

#include "doctor_fake_host.h"

namespace hangtrace::doctor::testing {
namespace {

// ---- /dev/shm -----------------------------------------------------------------

TEST(DoctorShm, TooSmallForWorkersTimesPrefetchTimesBatchFails) {
  FakeHost host;
  add_loader_job(host, 2, 2, 20 * kMiB);
  auto r = host.run(100, 64 * kMiB, 24 * kMiB);
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
  auto r = host.run(100, 16 * kGiB, 16 * kGiB - 40 * kMiB);
  Check c = check_of(r, "dev-shm-size");
  EXPECT_EQ(c.verdict, Verdict::Ok) << c.finding;
  EXPECT_NE(c.finding.find("need ~80 MiB"), std::string::npos) << c.finding;
  EXPECT_TRUE(c.fix.empty());
}

TEST(DoctorShm, DockerDefaultWarnsEvenWhenTheBatchesFit) {
  FakeHost host;
  add_loader_job(host, 2, 1, 1 * kMiB);
  auto r = host.run(100, 64 * kMiB, 60 * kMiB);
  Check c = check_of(r, "dev-shm-size");
  EXPECT_EQ(c.verdict, Verdict::Warn) << c.finding;
  EXPECT_NE(c.finding.find("Docker's default"), std::string::npos) << c.finding;
  EXPECT_EQ(c.details["docker_default"], true);
}

TEST(DoctorShm, OverHalfOfWhatIsAvailableWarns) {
  FakeHost host;
  add_loader_job(host, 2, 1, 200 * kMiB);  // need 800 MiB of 1 GiB
  auto r = host.run(100, kGiB, kGiB - 200 * kMiB);
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
  auto r = host.run(100, 64 * kMiB, 64 * kMiB);
  Check c = check_of(r, "dev-shm-size");
  EXPECT_EQ(c.verdict, Verdict::Ok) << c.finding;
  EXPECT_NE(c.finding.find("no DataLoader worker"), std::string::npos) << c.finding;
  EXPECT_EQ(check_of(r, "start-method").verdict, Verdict::Skip);
}

TEST(DoctorShm, WorkersWithoutAMappedTensorAskForBatchBytes) {
  FakeHost host;
  add_loader_job(host, 2, 0, 0);
  auto r = host.run(100, 64 * kMiB, 64 * kMiB);
  Check c = check_of(r, "dev-shm-size");
  EXPECT_EQ(c.verdict, Verdict::Warn) << c.finding;  // Docker's 64 MiB with workers
  EXPECT_NE(c.finding.find("--batch-bytes"), std::string::npos) << c.finding;
}

TEST(DoctorShm, WithoutAPidTheHostsShmIsJudgedBySize) {
  FakeHost host;
  auto r = host.run(0, 64 * kMiB, 64 * kMiB);
  EXPECT_EQ(check_of(r, "dev-shm-size").verdict, Verdict::Warn);
  EXPECT_EQ(host.measured_path_, "/dev/shm");
  r = host.run(0, 32 * kGiB, 30 * kGiB);
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
  auto r = host.run(100);
  Check c = check_of(r, "sharing-strategy");
  EXPECT_EQ(c.details["strategy"], "file_descriptor") << c.finding;
  EXPECT_EQ(c.details["unlinked_segments"], 3);
}

TEST(DoctorSharing, NamedSegmentsOrTheShmManagerMeanFileSystem) {
  FakeHost host;
  FakeProcess main;
  main.maps += segment_line(0x7f1000000000, kMiB, 900, "/dev/shm/torch_100_1_0");
  host.add(main);
  auto r = host.run(100);
  EXPECT_EQ(check_of(r, "sharing-strategy").details["strategy"], "file_system");

  FakeHost host2;
  FakeProcess main2;
  host2.add(main2);
  FakeProcess manager;
  manager.pid = 150;
  manager.ppid = 100;
  manager.comm = "torch_shm_manag";
  manager.cmdline = NULS("/usr/bin/torch_shm_manager\0/torch_100_1\0");
  manager.exe = "/usr/bin/torch_shm_manager";
  host2.add(manager);
  r = host2.run(100);
  Check c = check_of(r, "sharing-strategy");
  EXPECT_EQ(c.details["strategy"], "file_system") << c.finding;
  EXPECT_EQ(c.details["torch_shm_manager"], true);
  // The manager is no DataLoader worker.
  EXPECT_EQ(check_of(r, "dev-shm-size").details["workers"], 0);
}

TEST(DoctorSharing, NoTorchInTheTargetIsSkipped) {
  FakeHost host;
  FakeProcess p;
  p.maps = "55d0c0000000-55d0c0001000 r-xp 00000000 fe:00 100 /usr/bin/bash\n";
  host.add(p);
  auto r = host.run(100);
  EXPECT_EQ(check_of(r, "sharing-strategy").verdict, Verdict::Skip);
  EXPECT_EQ(check_of(r, "torch-version").verdict, Verdict::Skip);
}

TEST(DoctorUlimit, LowNofileWithFileDescriptorSharingWarns) {
  FakeHost host;
  add_loader_job(host, 2, 1, kMiB);
  host.write(host.proc() + "/100/limits", limits_text("1024", "4096"));
  auto r = host.run(100);
  Check c = check_of(r, "ulimit-nofile");
  EXPECT_EQ(c.verdict, Verdict::Warn) << c.finding;
  EXPECT_NE(c.finding.find("1024"), std::string::npos) << c.finding;
  EXPECT_NE(c.fix.find("ulimit -n"), std::string::npos);
}

TEST(DoctorUlimit, OpenFdsAtTheLimitFail) {
  FakeHost host;
  FakeProcess p;
  p.open_fds = 19;
  p.limits = limits_text("20", "20");
  host.add(p);
  auto r = host.run(100);
  Check c = check_of(r, "ulimit-nofile");
  EXPECT_EQ(c.verdict, Verdict::Fail) << c.finding;
  EXPECT_EQ(c.details["most_open_fds"], 19);
}

TEST(DoctorUlimit, HighNofileIsOkAndUnlimitedParses) {
  FakeHost host;
  add_loader_job(host, 2, 1, kMiB);
  auto r = host.run(100);
  EXPECT_EQ(check_of(r, "ulimit-nofile").verdict, Verdict::Ok);
  auto lim = parse_limit(limits_text("unlimited", "unlimited"), "Max open files");
  ASSERT_TRUE(lim.ok()) << lim.error();
  EXPECT_FALSE(lim->soft.has_value());
  EXPECT_FALSE(parse_limit("Max open files  abc 12 files\n", "Max open files").ok());
  EXPECT_FALSE(parse_limit("", "Max open files").ok());
}

TEST(DoctorUlimit, WithoutAPidDoctorsOwnNofileIsReported) {
  FakeHost host;  // self: soft 1024
  auto r = host.run(0);
  Check c = check_of(r, "ulimit-nofile");
  EXPECT_EQ(c.verdict, Verdict::Warn) << c.finding;
  EXPECT_NE(c.finding.find("ulimit -n is 1024"), std::string::npos) << c.finding;
}

// ---- start method ---------------------------------------------------------------------

TEST(DoctorStartMethod, ForkedWorkersOfAThreadedMainWarn) {
  FakeHost host;
  add_loader_job(host, 2, 1, kMiB, /*main_threads=*/12);
  auto r = host.run(100);
  Check c = check_of(r, "start-method");
  EXPECT_EQ(c.verdict, Verdict::Warn) << c.finding;
  EXPECT_NE(c.finding.find("101,102"), std::string::npos) << c.finding;
  EXPECT_NE(c.finding.find("12 threads"), std::string::npos) << c.finding;
  EXPECT_NE(c.fix.find("multiprocessing_context='spawn'"), std::string::npos);
}

TEST(DoctorStartMethod, SpawnedWorkersAreOkAndCountForShm) {
  FakeHost host;
  FakeProcess main;
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
  auto r = host.run(100, 64 * kMiB, 34 * kMiB);
  Check sm = check_of(r, "start-method");
  EXPECT_EQ(sm.verdict, Verdict::Ok) << sm.finding;
  EXPECT_EQ(sm.details["method"], "spawn");
  Check shm = check_of(r, "dev-shm-size");
  EXPECT_EQ(shm.details["workers"], 3);
  EXPECT_EQ(shm.details["need_bytes"], 3 * 2 * 30 * kMiB);
  EXPECT_EQ(shm.verdict, Verdict::Fail);
}

}  // namespace
}  // namespace hangtrace::doctor::testing
