// hangtrace doctor's bad targets and its report (JSON shape, the table)
// over a fake host (doctor_fake_host.h).
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "doctor_fake_host.h"
#include "hangtrace/procfs.h"

namespace hangtrace::doctor::testing {
namespace {

// ---- bad targets, output ------------------------------------------------------------------------

TEST(DoctorTarget, MissingPidAndKernelThreadsAreErrors) {
  FakeHost host;
  auto r = run_doctor(host.inputs(4242));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), "no such process: 4242");
  FakeProcess k;
  k.pid = 2;
  k.comm = "kthreadd";
  k.flags = procfs::kPfKthread;
  host.add(k);
  r = run_doctor(host.inputs(2));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("kernel thread"), std::string::npos) << r.error();
  EXPECT_FALSE(validate_target(host.proc(), 2).ok());
  EXPECT_FALSE(validate_target(host.proc(), -5).ok());
}

TEST(DoctorOutput, JsonShapeAndTable) {
  FakeHost host;
  add_loader_job(host, 2, 2, 20 * kMiB);
  auto r = host.run(100, 64 * kMiB, 24 * kMiB);
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
}  // namespace hangtrace::doctor::testing
