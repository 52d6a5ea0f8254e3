// hangtrace doctor's environment checks over a fake host
// (doctor_fake_host.h): the NCCL and torch.distributed advice,
// CUDA_LAUNCH_BLOCKING, OMP_NUM_THREADS; environ_value.
#include <gtest/gtest.h>

#include "doctor_fake_host.h"

namespace hangtrace::doctor::testing {
namespace {

TEST(DoctorEnv, DistributedJobWithoutDebugVariablesGetsTheSeedsAdvice) {
  FakeHost host;
  host.add_target_with_environ({"RANK=1", "WORLD_SIZE=8", "LOCAL_RANK=1"});
  auto r = host.run(100);
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
  host.add_target_with_environ({"WORLD_SIZE=2", "RANK=0", "NCCL_DEBUG=INFO", "TORCH_DISTRIBUTED_DEBUG=DETAIL",
                                "TORCH_NCCL_ASYNC_ERROR_HANDLING=1"});
  auto r = host.run(100);
  EXPECT_EQ(check_of(r, "nccl-debug").verdict, Verdict::Ok);
  EXPECT_EQ(check_of(r, "torch-distributed-debug").verdict, Verdict::Ok);
  Check async = check_of(r, "nccl-async-error-handling");
  EXPECT_EQ(async.verdict, Verdict::Ok) << async.finding;
  EXPECT_EQ(async.details["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "1");
}

TEST(DoctorEnv, AsyncErrorHandlingSetToZeroStillWarnsAndBlockingWaitCounts) {
  FakeHost host;
  host.add_target_with_environ({"WORLD_SIZE=2", "RANK=0", "NCCL_ASYNC_ERROR_HANDLING=0"});
  auto r = host.run(100);
  EXPECT_EQ(check_of(r, "nccl-async-error-handling").verdict, Verdict::Warn);
  host.write(host.proc() + "/100/environ", env_bytes({"WORLD_SIZE=2", "RANK=0", "NCCL_BLOCKING_WAIT=1"}));
  r = host.run(100);
  EXPECT_EQ(check_of(r, "nccl-async-error-handling").verdict, Verdict::Ok);
}

TEST(DoctorEnv, NotDistributedSkipsTheNcclChecksAndCudaLaunchBlockingWarns) {
  FakeHost host;
  host.add_target_with_environ({"CUDA_LAUNCH_BLOCKING=1", "OMP_NUM_THREADS=64"});
  auto r = host.run(100);
  EXPECT_EQ(check_of(r, "nccl-debug").verdict, Verdict::Skip);
  EXPECT_EQ(check_of(r, "nccl-async-error-handling").verdict, Verdict::Skip);
  EXPECT_EQ(check_of(r, "cuda-launch-blocking").verdict, Verdict::Warn);
  Check omp = check_of(r, "omp-num-threads");
  EXPECT_EQ(omp.verdict, Verdict::Warn) << omp.finding;  // 64 > 8 online CPUs
  EXPECT_NE(omp.finding.find("8 online CPUs"), std::string::npos) << omp.finding;
}

TEST(DoctorEnv, WithoutAPidDoctorsOwnEnvironmentIsRead) {
  FakeHost host;
  auto in = host.inputs(0);
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

}  // namespace
}  // namespace hangtrace::doctor::testing
