// The job id ranks on different hosts share (job_identity.h), from their
// environments and command lines.
#include "hangtrace/job_identity.h"

#include <gtest/gtest.h>

#include <string>

namespace hangtrace {
namespace {

std::string env(std::initializer_list<const char*> entries) {
  std::string out;
  for (const char* e : entries) {
    out += e;
    out += '\0';
  }
  return out;
}

TEST(JobIdentity, TorchelasticRunIdNamesTheJobAsItIs) {
  JobIdentity id = job_identity(env({"PATH=/bin", "TORCHELASTIC_RUN_ID=llama-7b.run_3",
                                     "MASTER_ADDR=10.0.0.1", "MASTER_PORT=29500", "WORLD_SIZE=16"}),
                                "python train.py");
  EXPECT_EQ(id.source, "torchelastic");
  EXPECT_EQ(id.id, "llama-7b.run_3");
}

TEST(JobIdentity, TorchrunsDefaultRunIdFallsBackToTheRendezvous) {
  // torchrun's --rdzv-id defaults to "none": every job would share it.
  JobIdentity id = job_identity(
      env({"TORCHELASTIC_RUN_ID=none", "MASTER_ADDR=10.0.0.1", "MASTER_PORT=29500", "WORLD_SIZE=2"}),
      "train.py");
  EXPECT_EQ(id.source, "rendezvous");
  EXPECT_EQ(id.id.rfind("rdzv-", 0), 0u) << id.id;
  EXPECT_EQ(id.id.size(), 5u + 16u);
}

TEST(JobIdentity, ABatchSystemsJobNamesItOnEveryNode) {
  // torchrun under srun: torchrun's default run id, Slurm's job and step.
  JobIdentity slurm = job_identity(env({"TORCHELASTIC_RUN_ID=none", "SLURM_JOB_ID=48213", "SLURM_STEP_ID=2",
                                        "MASTER_ADDR=10.0.0.1", "MASTER_PORT=29500"}),
                                   "train.py");
  EXPECT_EQ(slurm.source, "slurm");
  EXPECT_EQ(slurm.id, "slurm-48213.2");
  EXPECT_EQ(job_identity(env({"SLURM_JOB_ID=48213"}), "train.py").id, "slurm-48213");
  JobIdentity pmix =
      job_identity(env({"PMIX_NAMESPACE=prterun-node1-12345@1", "OMPI_COMM_WORLD_RANK=3"}), "train.py");
  EXPECT_EQ(pmix.source, "pmix");
  EXPECT_EQ(pmix.id.rfind("pmix-", 0), 0u) << pmix.id;
  EXPECT_EQ(pmix.id.find('@'), std::string::npos) << "hashed: not a plain id";
}

TEST(JobIdentity, RanksOfOneRendezvousShareTheIdWhateverTheirLocalRank) {
  auto rank = [](const char* rank_env, const std::string& cmdline) {
    return job_identity(env({"MASTER_ADDR=node-a.cluster", "MASTER_PORT=29500", "WORLD_SIZE=4", rank_env}),
                        cmdline);
  };
  JobIdentity r0 = rank("RANK=0", "python -u train.py --local_rank=0 --epochs 3");
  JobIdentity r1 = rank("RANK=1", "python -u train.py --local_rank 1 --epochs 3");
  JobIdentity r3 = rank("RANK=3", "python -u train.py --local-rank=3 --epochs 3");
  EXPECT_FALSE(r0.id.empty());
  EXPECT_EQ(r0.id, r1.id);
  EXPECT_EQ(r0.id, r3.id);
  // Another port, world size or script is another job.
  EXPECT_NE(job_identity(env({"MASTER_ADDR=node-a.cluster", "MASTER_PORT=29501", "WORLD_SIZE=4"}),
                         "python -u train.py --epochs 3")
                .id,
            r0.id);
  EXPECT_NE(job_identity(env({"MASTER_ADDR=node-a.cluster", "MASTER_PORT=29500", "WORLD_SIZE=8"}),
                         "python -u train.py --epochs 3")
                .id,
            r0.id);
  EXPECT_NE(rank("RANK=0", "python -u eval.py --epochs 3").id, r0.id);
  // The address itself never leaves the host in the id.
  EXPECT_EQ(r0.id.find("node-a"), std::string::npos);
}

TEST(JobIdentity, NoRendezvousNoId) {
  EXPECT_EQ(job_identity(env({"PATH=/bin", "RANK=0"}), "python train.py").id, "");
  EXPECT_EQ(job_identity(env({"MASTER_ADDR=", "MASTER_PORT=29500"}), "python train.py").id, "");
  EXPECT_EQ(job_identity("", "").source, "");
}

TEST(JobIdentity, AHostileRunIdIsHashedToALabelSafeId) {
  const std::string long_id(300, 'x');
  for (const std::string& raw :
       {std::string("job\"} 1\nfake_metric{a=\"b"), long_id, std::string("\x1b[31mred")}) {
    std::string bytes = "TORCHELASTIC_RUN_ID=" + raw;
    bytes += '\0';
    JobIdentity id = job_identity(bytes, "");
    EXPECT_EQ(id.source, "torchelastic");
    ASSERT_EQ(id.id.size(), 4u + 16u) << id.id;
    EXPECT_EQ(id.id.rfind("run-", 0), 0u) << id.id;
  }
}

TEST(JobIdentity, TheFirstOfDuplicateVariablesIsTheOneTheProcessSaw) {
  EXPECT_EQ(environ_value(env({"A=1", "AB=2", "A=3"}), "A"), "1");
  EXPECT_EQ(environ_value(env({"AB=2"}), "A"), std::nullopt);
  EXPECT_EQ(environ_value(env({"A="}), "A"), "");
  EXPECT_EQ(environ_value(std::string("A=1"), "A"), "1");  // no final NUL
  EXPECT_EQ(job_cmdline("python  -m torch.distributed.launch --local_rank=2 train.py --local_rank 2 --lr 3"),
            "python -m torch.distributed.launch train.py --lr 3");
}

}  // namespace
}  // namespace hangtrace
