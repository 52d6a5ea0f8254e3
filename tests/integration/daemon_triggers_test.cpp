// The daemon's incident triggers on real deaths of a tracked worker
// (tests/integration/repro/repro_dying_worker.cpp): a real SIGBUS and a
// non-zero exit each get a bundle naming the worker; a worker stopped with
// SIGTERM (an ordinary stop) gets none.
#include <filesystem>
#include <nlohmann/json.hpp>

#include "support.h"

namespace hangtrace::testing {
namespace {

class DaemonTriggers : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why = missing_privileges();
    if (!why.empty()) GTEST_SKIP() << why;
    daemon_ = std::make_unique<Workload>(std::vector<std::string>{"sh", "-c",
                                                                  "exec " + hangtrace_path() +
                                                                      " daemon --match " + job_path_ +
                                                                      " --hang-after 600 --scan-every 0.2 "
                                                                      "--metrics '' -v --bundle-dir " +
                                                                      bundles_.path.string() + " 2>&1"});
    ASSERT_FALSE(daemon_->wait_for_line("hangtrace daemon: ready", std::chrono::seconds(60)).empty());
  }

  // Starts the job, waits until the daemon tracks it and its worker, lets the
  // worker die; returns {main, worker}.
  std::pair<int, int> run_job(Workload& job) {
    std::vector<int> pids = parse_ready_pids(job.wait_for_line("READY"));
    EXPECT_EQ(pids.size(), 2u);
    if (pids.size() != 2) return {0, 0};
    std::string tracking = daemon_->wait_for_line(
        "hangtrace daemon: tracking job " + std::to_string(pids[0]) + " ", std::chrono::seconds(30));
    EXPECT_NE(tracking.find("2 process(es)"), std::string::npos) << tracking;
    job.release();
    EXPECT_FALSE(job.wait_for_line("REAPED").empty());
    return {pids[0], pids[1]};
  }

  nlohmann::json next_bundle_meta(std::string* line_out = nullptr) {
    std::string line = daemon_->wait_for_line("hangtrace daemon: bundle written: ", std::chrono::seconds(60));
    if (line_out) *line_out = line;
    if (line.empty()) return nullptr;
    const std::string path = daemon_bundle_path(line);
    return nlohmann::json::parse(read_text_file(path + "/meta.json"), nullptr, false);
  }

  TempDir bundles_{"hangtrace-daemon-triggers"};
  // The job's own name: the cases run side by side, each with a daemon.
  TempDir job_dir_{"hangtrace-daemon-triggers-job"};
  const std::string job_path_ = own_repro(job_dir_, "repro_dying_worker");
  std::unique_ptr<Workload> daemon_;
};

TEST_F(DaemonTriggers, RealSigbusOfAWorker) {
  Workload job({job_path_, "sigbus"}, true);
  auto [main, worker] = run_job(job);
  nlohmann::json meta = next_bundle_meta();
  ASSERT_TRUE(meta.is_object());
  EXPECT_EQ(meta["trigger"], "sigbus");
  EXPECT_EQ(meta["job_pid"], main);
  EXPECT_NE(meta["note"].get<std::string>().find("process " + std::to_string(worker)), std::string::npos)
      << meta;
}

TEST_F(DaemonTriggers, NonZeroExitOfAWorker) {
  Workload job({job_path_, "exit3"}, true);
  auto [main, worker] = run_job(job);
  nlohmann::json meta = next_bundle_meta();
  ASSERT_TRUE(meta.is_object());
  EXPECT_EQ(meta["trigger"], "abnormal-exit");
  EXPECT_EQ(meta["job_pid"], main);
  EXPECT_NE(meta["note"].get<std::string>().find("process " + std::to_string(worker)), std::string::npos)
      << meta;
}

TEST_F(DaemonTriggers, SigtermIsAnOrdinaryStop) {
  Workload job({job_path_, "term"}, true);
  auto [main, worker] = run_job(job);
  // The worker's exit record is in once the daemon lets it go; then the job
  // ends (its main process killed here) with no bundle on the way.
  std::string left = daemon_->wait_for_line(
      "hangtrace daemon: job " + std::to_string(main) + ": process " + std::to_string(worker) + " leaves",
      std::chrono::seconds(30));
  EXPECT_FALSE(left.empty());
  job.kill_all();
  std::string line = daemon_->wait_for_line("hangtrace daemon: ", std::chrono::seconds(30));
  while (!line.empty() && line.find("ended") == std::string::npos) {
    EXPECT_EQ(line.find("bundle written"), std::string::npos) << line;
    line = daemon_->wait_for_line("hangtrace daemon: ", std::chrono::seconds(30));
  }
  EXPECT_NE(line.find("job " + std::to_string(main) + " "), std::string::npos) << line;
  EXPECT_TRUE(std::filesystem::is_empty(bundles_.path));
}

}  // namespace
}  // namespace hangtrace::testing
