// The daemon's bundles over HTTP and its job identity, on a real kernel: a
// rank of a torchrun job (its environment as torchrun sets it) hangs; the
// bundle names the job id, rank and host; /metrics carries one
// hangtrace_job_hung series for it; /bundles lists it only to a request with
// the token, and /bundles/NAME is that bundle, byte for byte, as an archive.
// A daemon without --serve-bundles serves none, and one asked to serve them
// beyond loopback without a token refuses to start.
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "hangtrace/bundle_archive.h"
#include "support.h"

namespace hangtrace::testing {
namespace {

constexpr const char* kToken = "s3cret-token-of-the-fleet-0123456789";

std::string bearer() { return std::string("Authorization: Bearer ") + kToken; }

TEST(DaemonHttp, AHungRanksBundleIsServedWithItsJobIdOnlyWithTheToken) {
  HANGTRACE_REQUIRE_BPF();
  TempDir dir{"hangtrace-daemon-http"};
  const std::string token_file = dir.file("token");
  std::ofstream(token_file) << kToken << "\n";
  chmod(token_file.c_str(), 0600);
  Workload daemon({"sh", "-c",
                   "exec " + hangtrace_path() + " daemon --match " + own_repro(dir, "repro_collector_pipe") +
                       " --hang-after 4 --check-every 0.5 --scan-every 0.2"
                       " --metrics 127.0.0.1:0 --serve-bundles --bundle-token-file " +
                       token_file + " --bundle-dir " + dir.file("bundles") + " 2>&1"});
  std::string ready = daemon.wait_for_line("hangtrace daemon: ready", std::chrono::seconds(60));
  const std::string base = daemon_served_base(ready);
  ASSERT_FALSE(base.empty()) << ready;
  ASSERT_NE(ready.find("bundles on " + base + "/bundles"), std::string::npos) << ready;

  Workload job({"env", "TORCHELASTIC_RUN_ID=llama-7b.run_3", "MASTER_ADDR=10.0.0.1", "MASTER_PORT=29500",
                "RANK=5", "WORLD_SIZE=8", "LOCAL_RANK=1", dir.file("repro_collector_pipe")});
  ASSERT_FALSE(job.wait_for_line("READY").empty());
  std::string written = daemon.wait_for_line("hangtrace daemon: bundle written: ", std::chrono::seconds(90));
  ASSERT_FALSE(written.empty()) << "no bundle";
  const std::string path = daemon_bundle_path(written);
  const std::string name = std::filesystem::path(path).filename().string();
  auto meta = nlohmann::json::parse(read_text_file(path + "/meta.json"), nullptr, false);
  ASSERT_FALSE(meta.is_discarded()) << path;
  EXPECT_EQ(meta["job_id"], "llama-7b.run_3");
  EXPECT_EQ(meta["job_id_source"], "torchelastic");
  EXPECT_EQ(meta["rank"], 5);
  EXPECT_FALSE(meta["hostname"].get<std::string>().empty());

  // One series for the hung job, brought up to date once a second, naming
  // its bundle (an alert's link to /bundles/NAME).
  const std::string series = "hangtrace_job_hung{bundle=\"" +
                             std::filesystem::path(path).filename().string() + "\",cause=\"" +
                             meta["cause"].get<std::string>() + "\",job_id=\"llama-7b.run_3\",rank=\"5\"}";
  std::string metrics;
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
       std::chrono::steady_clock::now() < deadline;) {
    metrics = http_get(base + "/metrics").body;
    if (metrics.find(series + " 1") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_NE(metrics.find(series + " 1"), std::string::npos) << metrics;

  EXPECT_EQ(http_get(base + "/bundles").status, 401);
  EXPECT_EQ(http_get(base + "/bundles", {"Authorization: Bearer not-the-token-at-all-000000"}).status, 401);
  HttpAnswer index = http_get(base + "/bundles", {bearer()});
  ASSERT_EQ(index.status, 200) << index.body;
  auto listed = nlohmann::json::parse(index.body, nullptr, false);
  ASSERT_FALSE(listed.is_discarded()) << index.body;
  ASSERT_EQ(listed["bundles"].size(), 1u) << listed.dump(1);
  EXPECT_EQ(listed["bundles"][0]["name"], name);
  EXPECT_EQ(listed["bundles"][0]["job_id"], "llama-7b.run_3");
  EXPECT_EQ(listed["bundles"][0]["rank"], 5);

  HttpAnswer tar = http_get(base + "/bundles/" + name, {bearer()});
  ASSERT_EQ(tar.status, 200);
  auto unpacked = read_bundle_tar(tar.body);
  ASSERT_TRUE(unpacked) << unpacked.error();
  EXPECT_EQ(unpacked->name, name);
  size_t files = 0;
  for (const auto& f : std::filesystem::directory_iterator(path)) {
    ++files;
    const std::string file = f.path().filename().string();
    ASSERT_TRUE(unpacked->files.count(file)) << file;
    EXPECT_EQ(unpacked->files[file], read_text_file(f.path().string())) << file;
  }
  EXPECT_EQ(unpacked->files.size(), files);
  // Only what the listing names: no way out of the bundle directory.
  for (const char* bad : {"/bundles/..", "/bundles/%2e%2e%2ftoken", "/bundles/..%2F..%2Fetc%2Fpasswd",
                          "/bundles/no-such-bundle", "/token"})
    EXPECT_EQ(http_get(base + bad, {bearer()}).status, 404) << bad;
  job.kill_all();
}

TEST(DaemonHttp, BundlesAreServedOnlyWhenAskedAndBeyondLoopbackOnlyWithAToken) {
  HANGTRACE_REQUIRE_BPF();
  TempDir dir{"hangtrace-daemon-http-off"};
  Workload daemon({"sh", "-c",
                   "exec " + hangtrace_path() +
                       " daemon --match nothing-matches-this --metrics 127.0.0.1:0 "
                       "--bundle-dir " +
                       dir.file("bundles") + " 2>&1"});
  std::string ready = daemon.wait_for_line("hangtrace daemon: ready", std::chrono::seconds(60));
  const std::string base = daemon_served_base(ready);
  ASSERT_FALSE(base.empty()) << ready;
  EXPECT_EQ(ready.find("bundles on http"), std::string::npos) << ready;
  EXPECT_EQ(http_get(base + "/bundles").status, 404);
  EXPECT_EQ(http_get(base + "/metrics").status, 200);

  CommandResult open = run_command({hangtrace_path(), "daemon", "--match", "x", "--metrics", "0.0.0.0:0",
                                    "--serve-bundles", "--bundle-dir", dir.file("bundles2")},
                                   std::chrono::seconds(30));
  EXPECT_EQ(open.exit_code, 1) << open.err;
  EXPECT_NE(open.err.find("--bundle-token-file"), std::string::npos) << open.err;
  const std::string loose = dir.file("loose-token");
  std::ofstream(loose) << kToken << "\n";
  chmod(loose.c_str(), 0644);
  CommandResult readable =
      run_command({hangtrace_path(), "daemon", "--match", "x", "--metrics", "0.0.0.0:0", "--serve-bundles",
                   "--bundle-token-file", loose, "--bundle-dir", dir.file("bundles3")},
                  std::chrono::seconds(30));
  EXPECT_EQ(readable.exit_code, 1) << readable.err;
  EXPECT_NE(readable.err.find("chmod 600"), std::string::npos) << readable.err;
}

}  // namespace
}  // namespace hangtrace::testing
