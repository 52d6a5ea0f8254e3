// hangtrace doctor end to end: a real PyTorch DataLoader under Docker's 64 MiB
// /dev/shm (a tmpfs in a private mount namespace), whose workers x prefetch x
// batch cannot fit, and a healthy one with small batches under the same
// /dev/shm; plus the host checklist without a pid.
#include <unistd.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support.h"

namespace hangtrace::testing {
namespace {

constexpr uint64_t kShm = 64ull << 20;

std::string workload_path() {
  return std::string(HANGTRACE_FIXTURES_DIR) + "/../../scenarios/workloads/doctor_loader.py";
}

std::string missing_torch() {
  if (access("/usr/bin/unshare", X_OK) != 0) return "needs unshare(1)";
  auto r = run_command({"/usr/bin/python3", "-c", "import torch"});
  if (r.exit_code != 0) return "needs python3 with torch: " + r.err;
  return "";
}

#define REQUIRE_TORCH()                                \
  do {                                                 \
    std::string why_torch = missing_torch();           \
    if (!why_torch.empty()) GTEST_SKIP() << why_torch; \
  } while (0)

// The loader in its own mount namespace, /dev/shm a 64 MiB tmpfs.
std::vector<std::string> small_shm_loader(const std::string& tensor_mib) {
  return {"unshare",
          "-m",
          "--propagation",
          "private",
          "sh",
          "-c",
          "mount -t tmpfs -o size=64m tmpfs /dev/shm && exec \"$@\"",
          "small-shm",
          "/usr/bin/python3",
          workload_path(),
          "--tensors",
          "2",
          "--tensor-mib",
          tensor_mib};
}

struct DoctorRun {
  CommandResult cmd;
  nlohmann::json report;
  const nlohmann::json* check(const std::string& id) const {
    if (!report.is_object() || !report["checks"].is_array()) return nullptr;
    for (const auto& c : report["checks"])
      if (c.value("id", "") == id) return &c;
    return nullptr;
  }
  std::string dump() const {
    return "exit " + std::to_string(cmd.exit_code) + "\nstderr: " + cmd.err + "\nstdout: " + cmd.out;
  }
};

DoctorRun run_doctor(const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {hangtrace_path(), "doctor", "--json", "-"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  DoctorRun r;
  r.cmd = run_command(argv, std::chrono::seconds(60));
  r.report = nlohmann::json::parse(r.cmd.out, nullptr, false);
  return r;
}

// "READY main=12 ..." -> 12.
int ready_main_pid(const std::string& line) {
  auto pos = line.find("main=");
  return pos == std::string::npos ? -1 : std::stoi(line.substr(pos + 5));
}

TEST(CliDoctor, DataLoaderThatCannotFitInDockersShmFails) {
  HANGTRACE_REQUIRE_BPF();
  REQUIRE_TORCH();
  // 2 workers x prefetch 2 x (2 x 20 MiB) per batch: far over 64 MiB, though
  // the parked job holds only one batch (40 MiB) right now.
  Workload job(small_shm_loader("20"));
  std::string line = job.wait_for_line("READY", std::chrono::seconds(120));
  ASSERT_FALSE(line.empty()) << "the loader never got ready";
  ASSERT_NE(line.find("shm_size=" + std::to_string(kShm)), std::string::npos) << line;
  int main_pid = ready_main_pid(line);
  ASSERT_EQ(main_pid, job.pid()) << line;  // unshare and sh exec'd python

  DoctorRun r = run_doctor({"--pid", std::to_string(main_pid)});
  ASSERT_TRUE(r.report.is_object()) << r.dump();
  EXPECT_EQ(r.cmd.exit_code, 2) << r.dump();
  EXPECT_EQ(r.report["pid"], main_pid);
  const nlohmann::json* shm = r.check("dev-shm-size");
  ASSERT_NE(shm, nullptr) << r.dump();
  EXPECT_EQ((*shm)["verdict"], "fail") << shm->dump(2);
  std::string finding = (*shm)["finding"];
  EXPECT_NE(finding.find("64 MiB"), std::string::npos) << finding;
  const auto& d = (*shm)["details"];
  EXPECT_EQ(d["size_bytes"], kShm) << shm->dump(2);
  EXPECT_EQ(d["workers"], 2) << shm->dump(2);
  EXPECT_EQ(d["batch_bytes"], 20ull << 20) << shm->dump(2);  // the largest segment: one tensor
  EXPECT_EQ(d["need_bytes"], 80ull << 20) << shm->dump(2);
  EXPECT_GE(d["held_bytes"].get<uint64_t>(), 40ull << 20) << shm->dump(2);
  EXPECT_NE((*shm)["fix"].get<std::string>().find("--shm-size"), std::string::npos);

  const nlohmann::json* sharing = r.check("sharing-strategy");
  ASSERT_NE(sharing, nullptr);
  EXPECT_EQ((*sharing)["details"]["strategy"], "file_descriptor") << sharing->dump(2);
  const nlohmann::json* method = r.check("start-method");
  ASSERT_NE(method, nullptr);
  EXPECT_EQ((*method)["details"]["method"], "fork") << method->dump(2);
  const nlohmann::json* torch = r.check("torch-version");
  ASSERT_NE(torch, nullptr);
  EXPECT_EQ((*torch)["verdict"], "ok") << torch->dump(2);
  job.kill_all();
}

TEST(CliDoctor, SmallBatchesInTheSameShmDoNotFail) {
  HANGTRACE_REQUIRE_BPF();
  REQUIRE_TORCH();
  Workload job(small_shm_loader("0.0625"));  // 2 x 64 KiB per batch
  std::string line = job.wait_for_line("READY", std::chrono::seconds(120));
  ASSERT_FALSE(line.empty()) << "the loader never got ready";
  int main_pid = ready_main_pid(line);
  ASSERT_GT(main_pid, 0) << line;

  DoctorRun r = run_doctor({"--pid", std::to_string(main_pid)});
  ASSERT_TRUE(r.report.is_object()) << r.dump();
  EXPECT_TRUE(r.cmd.exit_code == 0 || r.cmd.exit_code == 2) << r.dump();
  const nlohmann::json* shm = r.check("dev-shm-size");
  ASSERT_NE(shm, nullptr) << r.dump();
  EXPECT_NE((*shm)["verdict"], "fail") << shm->dump(2);
  EXPECT_EQ((*shm)["details"]["size_bytes"], kShm) << shm->dump(2);
  EXPECT_EQ((*shm)["details"]["need_bytes"], 2 * 2 * (64ull << 10)) << shm->dump(2);
  // Docker's default size with workers is still worth a warning.
  EXPECT_EQ((*shm)["verdict"], "warn") << shm->dump(2);
  job.kill_all();
}

TEST(CliDoctor, HostChecklistWithoutAPid) {
  HANGTRACE_REQUIRE_BPF();
  DoctorRun r = run_doctor({});
  ASSERT_TRUE(r.report.is_object()) << r.dump();
  EXPECT_TRUE(r.cmd.exit_code == 0 || r.cmd.exit_code == 2) << r.dump();
  EXPECT_TRUE(r.report["pid"].is_null());
  const nlohmann::json* btf = r.check("btf");
  ASSERT_NE(btf, nullptr) << r.dump();
  EXPECT_EQ((*btf)["verdict"], "ok") << btf->dump(2);
  const nlohmann::json* hooks = r.check("bpf-hooks");
  ASSERT_NE(hooks, nullptr);
  EXPECT_NE((*hooks)["verdict"], "skip") << hooks->dump(2);  // root: the tracer was started
  EXPECT_GT((*hooks)["details"]["active"].get<int>(), 0) << hooks->dump(2);

  // The text table, and the exit status agreeing with it.
  auto text = run_command({hangtrace_path(), "doctor", "--no-hooks"});
  EXPECT_NE(text.out.find("OK    btf"), std::string::npos) << text.out;
  EXPECT_EQ(text.exit_code == 2, text.out.find("FAIL ") != std::string::npos) << text.out;
}

TEST(CliDoctor, BadTargetsAreOneLine) {
  auto r = run_command({hangtrace_path(), "doctor", "--pid", "999999999"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "hangtrace: no such process: 999999999\n");
  EXPECT_TRUE(r.out.empty()) << r.out;
  if (read_text_file("/proc/2/comm") == "kthreadd\n") {  // not so in a pid namespace
    r = run_command({hangtrace_path(), "doctor", "--pid", "2"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("kernel thread"), std::string::npos) << r.err;
  }
  r = run_command({hangtrace_path(), "doctor", "--pid", "abc"});
  EXPECT_EQ(r.exit_code, 1);
  r = run_command({hangtrace_path(), "doctor", "--prefetch-factor", "0"});
  EXPECT_EQ(r.exit_code, 1);
}

}  // namespace
}  // namespace hangtrace::testing
