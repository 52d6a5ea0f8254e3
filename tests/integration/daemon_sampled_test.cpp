// The daemon's sampled steady state on a real kernel
// (tests/integration/repro/repro_sampled_job.cpp): while the job makes
// progress the daemon owns no link on sys_enter/sys_exit/sched_switch/
// sched_waking (read from its own /proc/PID/fdinfo, so other tracers on the
// machine do not count); a 1.5 s wait that only sampling can see reaches the
// flight recorder; when the job stops, the exact hooks are attached after
// --suspect-after, the hang bundle is written, and they are detached again.
#include <dirent.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "hangtrace/syscall_nr.h"
#include "support.h"

namespace hangtrace::testing {
namespace {

// The tracepoints of the links `pid` holds (its bpf_link fds' fdinfo).
std::multiset<std::string> linked_tracepoints(int pid) {
  std::multiset<std::string> out;
  std::string dir = "/proc/" + std::to_string(pid) + "/fdinfo";
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path());
    for (std::string line; std::getline(in, line);)
      if (line.starts_with("tp_name:")) out.insert(line.substr(line.find_first_not_of(" \t", 8)));
  }
  return out;
}

size_t hot_links(int pid) {
  auto tps = linked_tracepoints(pid);
  size_t n = 0;
  for (const char* tp : {"sys_enter", "sys_exit", "sched_switch", "sched_waking"}) n += tps.count(tp);
  return n;
}

TEST(DaemonSampled, NoHotHookUntilAJobLooksStuckThenBundleAndDetach) {
  std::string why = missing_privileges();
  if (!why.empty()) GTEST_SKIP() << why;
  TempDir bundles{"hangtrace-daemon-sampled"};
  Workload daemon({"sh", "-c",
                   "exec " + hangtrace_path() +
                       " daemon --match repro_sampled_job --hang-after 8 --suspect-after 3 --check-every 0.5 "
                       "--sample-every 0.2 --scan-every 0.2 --metrics '' --bundle-dir " +
                       bundles.path.string() + " 2>&1"});
  std::string ready = daemon.wait_for_line("hangtrace daemon: ready", std::chrono::seconds(60));
  ASSERT_NE(ready.find("sampled steady state"), std::string::npos) << ready;
  // The daemon process itself (sh exec'd it).
  const int daemon_pid = daemon.pid();
  EXPECT_GT(linked_tracepoints(daemon_pid).count("sched_process_fork"), 0u)
      << "the process hooks are attached";
  EXPECT_EQ(hot_links(daemon_pid), 0u);

  Workload job({repro_path("repro_sampled_job")}, true);
  std::vector<int> pids = parse_ready_pids(job.wait_for_line("READY"));
  ASSERT_EQ(pids.size(), 1u);
  ASSERT_FALSE(daemon
                   .wait_for_line("hangtrace daemon: tracking job " + std::to_string(pids[0]) + " ",
                                  std::chrono::seconds(30))
                   .empty());
  // Healthy for longer than --suspect-after: woken from untimed reads.
  std::this_thread::sleep_for(std::chrono::seconds(5));
  EXPECT_EQ(hot_links(daemon_pid), 0u) << "exact hooks attached while the job made progress";

  job.release();
  ASSERT_FALSE(job.wait_for_line("LONG", std::chrono::seconds(30)).empty());
  std::string attached =
      daemon.wait_for_line("hangtrace daemon: exact hooks attached", std::chrono::seconds(30));
  ASSERT_FALSE(attached.empty());
  EXPECT_NE(attached.find(std::to_string(pids[0])), std::string::npos) << attached;
  EXPECT_EQ(hot_links(daemon_pid), 3u) << "sys_exit, sched_switch, sched_waking";

  std::string written = daemon.wait_for_line("hangtrace daemon: bundle written: ", std::chrono::seconds(60));
  ASSERT_FALSE(written.empty());
  EXPECT_NE(written.find("(hang, "), std::string::npos) << written;
  ASSERT_FALSE(
      daemon.wait_for_line("hangtrace daemon: exact hooks detached", std::chrono::seconds(30)).empty());
  EXPECT_EQ(hot_links(daemon_pid), 0u);

  const std::string path = daemon_bundle_path(written);
  auto recorder = nlohmann::json::parse(read_text_file(path + "/recorder.json"), nullptr, false);
  ASSERT_TRUE(recorder.is_object());
  bool long_read = false;
  for (const auto& e : recorder["events"])
    if (e["type"] == "syscall-block" && e.value("nr", -1) == HT_NR_read && e["tid"] == pids[0]) {
      double d = e["duration_s"].get<double>();
      EXPECT_GE(d, 1.0) << e;
      EXPECT_LE(d, 1.6) << e;
      long_read = true;
    }
  EXPECT_TRUE(long_read) << "the 1.5 s read, seen by sampling only: " << recorder["events"].dump();
  auto meta = nlohmann::json::parse(read_text_file(path + "/meta.json"), nullptr, false);
  EXPECT_EQ(meta["job_pid"], pids[0]);
  job.kill_all();
}

TEST(DaemonSampled, ExactSteadyStateKeepsTheHooksOn) {
  std::string why = missing_privileges();
  if (!why.empty()) GTEST_SKIP() << why;
  TempDir bundles{"hangtrace-daemon-exact"};
  Workload daemon(
      {"sh", "-c",
       "exec " + hangtrace_path() +
           " daemon --match repro_sampled_job_none --steady-state exact --metrics '' --bundle-dir " +
           bundles.path.string() + " 2>&1"});
  std::string ready = daemon.wait_for_line("hangtrace daemon: ready", std::chrono::seconds(60));
  ASSERT_NE(ready.find("exact steady state"), std::string::npos) << ready;
  EXPECT_EQ(hot_links(daemon.pid()), 3u);
}

}  // namespace
}  // namespace hangtrace::testing
