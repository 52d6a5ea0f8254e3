// The daemon on a CUDA job (the stub libcuda/libnccl and a scripted stub NVML,
// tests/integration/gpu_stubs): the uprobes count its launches as progress,
// the job then starves its idle GPU on a host read, the watchdog calls it hung
// and the bundle says gpu-starved; hangtrace_gpu_idle_seconds_total counts
// the idle GPU's seconds.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <chrono>

#include "support.h"

namespace hangtrace::testing {
namespace {

struct Scratch : TempDir {
  Scratch() : TempDir("hangtrace-daemon-gpu") { mkfifo(file("sync").c_str(), 0600); }
};

std::string fetch(const std::string& url) { return http_get(url).body; }

double metric_value(const std::string& text, const std::string& series) {
  size_t at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + series.size() + 2));
}

TEST(DaemonGpu, StarvedGpuJobIsBundledAndIdleSecondsCount) {
  HANGTRACE_REQUIRE_BPF();
  Scratch s;
  std::ofstream(s.file("nvml.txt")) << "devices 1\nname 0 NVIDIA H200\nutil 0 0 0\npower 0 71000\n"
                                       "memory 0 75161927680 150323855360\n";
  Workload daemon({"sh", "-c",
                   "HANGTRACE_NVML_LIBRARY=" + std::string(HT_STUB_NVML_LIBRARY) +
                       " HT_STUB_NVML_SCRIPT=" + s.file("nvml.txt") + " exec " + hangtrace_path() +
                       " daemon --match 'repro_gpu_calls " + s.file("libcuda") +
                       "' --hang-after 4 --check-every 0.5 --scan-every 0.2"
                       " --metrics 127.0.0.1:0 --bundle-dir " +
                       s.file("bundles") + " 2>&1"});
  std::string ready = daemon.wait_for_line("hangtrace daemon: ready", std::chrono::seconds(60));
  const std::string base = daemon_served_base(ready);
  ASSERT_FALSE(base.empty()) << ready;
  const std::string metrics_url = base + "/metrics";

  // The job dlopens the stubs, waits until the daemon holds both uprobes on
  // every function it calls, launches 105 kernels, then blocks reading a FIFO
  // nobody writes. Copies of the stubs: uprobes sit on a file, and tracers of
  // tests running beside this one probe the build's stubs; the daemon
  // selects the job by them (its command line names this test's copies).
  std::filesystem::copy_file(HT_STUB_CUDA_LIBRARY, s.file("libcuda.so.1"));
  std::filesystem::copy_file(HT_STUB_NCCL_LIBRARY, s.file("libnccl.so.2"));
  Workload job({"sh", "-c",
                "exec 7<>" + s.file("sync") +
                    "; HT_STUB_CUDA_SYNC_FD=7 HT_WAIT_FOR_UPROBES=" + std::to_string(daemon.pid()) +
                    " HT_STARVE_ON_FD=7 exec " + repro_path("repro_gpu_calls") + " " +
                    s.file("libcuda.so.1") + " " + s.file("libnccl.so.2")});
  std::string tracking = daemon.wait_for_line("hangtrace daemon: tracking job " + std::to_string(job.pid()),
                                              std::chrono::seconds(30));
  ASSERT_FALSE(tracking.empty()) << "the daemon never picked the job up";
  std::string written = daemon.wait_for_line("hangtrace daemon: bundle written: ", std::chrono::seconds(90));
  ASSERT_FALSE(written.empty()) << "no bundle";
  const std::string path = daemon_bundle_path(written);
  auto meta = nlohmann::json::parse(read_text_file(path + "/meta.json"), nullptr, false);
  ASSERT_FALSE(meta.is_discarded()) << path;
  EXPECT_EQ(meta["trigger"], "hang");
  EXPECT_EQ(meta["job_pid"], job.pid());
  EXPECT_EQ(meta["cause"], "gpu-starved") << meta.dump(1);
  auto report = nlohmann::json::parse(read_text_file(path + "/report.json"), nullptr, false);
  const auto* starved = find_finding(report, "gpu-starved");
  ASSERT_NE(starved, nullptr) << report["findings"].dump(1)
                              << "\nlive.gpu: " << report["live"]["gpu"].dump(1);
  EXPECT_NE((*starved)["evidence"].dump().find("launched 105 kernels"), std::string::npos)
      << (*starved)["evidence"].dump(1);

  // Metrics are brought up to date once a second.
  std::string text;
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
       std::chrono::steady_clock::now() < deadline;) {
    text = fetch(metrics_url);
    if (metric_value(text, "hangtrace_hang_active{cause=\"gpu-starved\"}") == 1.0) break;
    usleep(100000);
  }
  EXPECT_GT(metric_value(text, "hangtrace_gpu_idle_seconds_total{gpu=\"0\"}"), 0.0) << text;
  EXPECT_EQ(metric_value(text, "hangtrace_hang_active{cause=\"gpu-starved\"}"), 1.0) << text;
  job.kill_all();
}

}  // namespace
}  // namespace hangtrace::testing
