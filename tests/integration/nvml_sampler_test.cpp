// NvmlSampler against the stub libnvidia-ml.so.1 (tests/integration/gpu_stubs/stub_nvml.c), whose answers
// come from a script file the tests write; and against this host's own NVML, absent without the driver.
// No root needed.
#include <dlfcn.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "nvml_sampler.h"
#include "temp_dir.h"

namespace hangtrace {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

constexpr const char* kStubLibrary = HT_STUB_NVML_LIBRARY;

uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + ts.tv_nsec;
}

unsigned long long realtime_us() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<unsigned long long>(ts.tv_sec) * 1'000'000ull + ts.tv_nsec / 1000;
}

// The stub's own view, through the same loaded copy the sampler uses (dlopen of one path is one library).
class StubView {
 public:
  StubView() : handle_(dlopen(kStubLibrary, RTLD_NOW | RTLD_LOCAL)) {
    if (handle_ == nullptr) return;
    init_refcount_ = reinterpret_cast<int (*)()>(dlsym(handle_, "ht_stub_nvml_init_refcount"));
    last_seen_ = reinterpret_cast<unsigned long long (*)(unsigned)>(dlsym(handle_, "ht_stub_nvml_last_seen"));
  }
  ~StubView() {
    if (handle_ != nullptr) dlclose(handle_);
  }
  bool ok() const { return init_refcount_ != nullptr && last_seen_ != nullptr; }
  int init_refcount() const { return init_refcount_(); }
  unsigned long long last_seen(unsigned device) const { return last_seen_(device); }

 private:
  void* handle_;
  int (*init_refcount_)() = nullptr;
  unsigned long long (*last_seen_)(unsigned) = nullptr;
};

class NvmlSamplerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(stub_.ok()) << "cannot load " << kStubLibrary << ": " << dlerror();
    dir_ = tmp_.path;
    script_ = dir_ / "script";
    setenv("HT_STUB_NVML_SCRIPT", script_.c_str(), 1);
    unsetenv("HANGTRACE_NVML_LIBRARY");
  }
  void TearDown() override { unsetenv("HT_STUB_NVML_SCRIPT"); }

  // Replaced atomically: a sampler reading it concurrently sees the old or the new script, never half.
  void write_script(const std::string& text) {
    fs::path staging = dir_ / "script.new";
    {
      std::ofstream out(staging);
      out << text;
    }
    fs::rename(staging, script_);
  }

  static GpuObservation observe(const NvmlSampler& sampler) {
    GpuObservation gpu;
    sampler.contribute(gpu);
    return gpu;
  }

  StubView stub_;
  hangtrace::testing::TempDir tmp_{"nvml_sampler_test"};
  fs::path dir_, script_;
};

TEST_F(NvmlSamplerTest, ListsDevicesWithTheirNames) {
  write_script("devices 2\nname 0 NVIDIA H100 80GB HBM3\n");
  auto sampler = NvmlSampler::open(kStubLibrary);
  ASSERT_EQ(sampler->status(), "");
  ASSERT_EQ(sampler->devices().size(), 2u);
  EXPECT_EQ(sampler->devices()[0].index, 0u);
  EXPECT_EQ(sampler->devices()[0].name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(sampler->devices()[1].index, 1u);
  EXPECT_EQ(sampler->devices()[1].name, "Stub GPU 1");
  EXPECT_EQ(stub_.init_refcount(), 1);

  GpuObservation gpu = observe(*sampler);
  EXPECT_EQ(gpu.nvml_status, "");
  ASSERT_EQ(gpu.nvml_devices.size(), 2u);
  EXPECT_EQ(gpu.nvml_devices[0].name, "NVIDIA H100 80GB HBM3");
  EXPECT_TRUE(gpu.nvml.empty()) << "no round sampled yet";

  sampler.reset();
  EXPECT_EQ(stub_.init_refcount(), 0) << "the destructor owes nvmlShutdown";
}

TEST_F(NvmlSamplerTest, OneRoundReadsUtilizationPowerAndMemoryOfEachDevice) {
  write_script(
      "devices 2\n"
      "util 0 0 3\npower 0 61000\nmemory 0 85899345920 85899345920\n"
      "util 1 97 40\npower 1 412000\nmemory 1 1073741824 85899345920\n");
  auto sampler = NvmlSampler::open(kStubLibrary);
  ASSERT_EQ(sampler->status(), "");
  uint64_t before = monotonic_ns();
  sampler->sample_once();
  uint64_t after = monotonic_ns();
  EXPECT_EQ(sampler->rounds(), 1u);

  GpuObservation gpu = observe(*sampler);
  ASSERT_EQ(gpu.nvml.size(), 2u);
  const NvmlSample& idle = gpu.nvml[0];
  EXPECT_EQ(idle.device, 0u);
  EXPECT_GE(idle.ts_ns, before);
  EXPECT_LE(idle.ts_ns, after);
  EXPECT_TRUE(idle.has_utilization);
  EXPECT_EQ(idle.gpu_util_pct, 0u);
  EXPECT_EQ(idle.mem_util_pct, 3u);
  EXPECT_TRUE(idle.has_power);
  EXPECT_EQ(idle.power_mw, 61000u);
  EXPECT_TRUE(idle.has_memory);
  EXPECT_EQ(idle.mem_used_bytes, 85899345920ull);
  EXPECT_EQ(idle.mem_total_bytes, 85899345920ull);

  const NvmlSample& busy = gpu.nvml[1];
  EXPECT_EQ(busy.device, 1u);
  EXPECT_EQ(busy.gpu_util_pct, 97u);
  EXPECT_EQ(busy.mem_util_pct, 40u);
  EXPECT_EQ(busy.power_mw, 412000u);
  EXPECT_EQ(busy.mem_used_bytes, 1073741824ull);
  EXPECT_EQ(busy.mem_total_bytes, 85899345920ull);
}

TEST_F(NvmlSamplerTest, PerProcessUtilizationByPid) {
  int self = getpid();
  write_script(
      "devices 2\n"
      "proc 0 " +
      std::to_string(self) +
      " 42\n"
      "proc 0 777 5\n");
  auto sampler = NvmlSampler::open(kStubLibrary);
  ASSERT_EQ(sampler->status(), "");
  sampler->sample_once();

  GpuObservation gpu = observe(*sampler);
  ASSERT_EQ(gpu.nvml.size(), 2u);
  EXPECT_TRUE(gpu.nvml[0].has_process_util);
  EXPECT_EQ(gpu.nvml[0].process_sm_util_pct, (std::map<int, unsigned>{{self, 42}, {777, 5}}));
  // No process sampled on device 1 (NVML_ERROR_NOT_FOUND): known to be idle, not unknown.
  EXPECT_TRUE(gpu.nvml[1].has_process_util);
  EXPECT_TRUE(gpu.nvml[1].process_sm_util_pct.empty());
}

TEST_F(NvmlSamplerTest, PerProcessSamplesAreReadOnceThroughLastSeenTimestamp) {
  unsigned long long older = realtime_us() - 200'000, newer = older + 100'000;
  // Two driver samples of one process: its latest is its current utilization.
  write_script("devices 1\nproc 0 4242 10 " + std::to_string(older) + "\nproc 0 4242 80 " +
               std::to_string(newer) + "\n");
  auto sampler = NvmlSampler::open(kStubLibrary);
  ASSERT_EQ(sampler->status(), "");
  sampler->sample_once();
  EXPECT_LT(stub_.last_seen(0), older) << "the first round must ask for recent samples";
  sampler->sample_once();
  EXPECT_EQ(stub_.last_seen(0), newer) << "the next round asks only for samples after the newest seen";

  GpuObservation gpu = observe(*sampler);
  ASSERT_EQ(gpu.nvml.size(), 2u);
  EXPECT_EQ(gpu.nvml[0].process_sm_util_pct, (std::map<int, unsigned>{{4242, 80}}));
  EXPECT_TRUE(gpu.nvml[1].has_process_util);
  EXPECT_TRUE(gpu.nvml[1].process_sm_util_pct.empty()) << "the same driver samples were reported twice";
}

TEST_F(NvmlSamplerTest, BackgroundSamplerSeesTheGpuChange) {
  write_script("devices 1\nutil 0 95 30\npower 0 300000\n");
  auto sampler = NvmlSampler::open(kStubLibrary);
  ASSERT_EQ(sampler->status(), "");
  sampler->start(10'000'000);
  ASSERT_TRUE(sampler->wait_for_rounds(1, milliseconds(10'000)));
  EXPECT_EQ(observe(*sampler).nvml.front().gpu_util_pct, 95u);

  // The seed symptom: memory held, 0% utilization, idle power.
  write_script("devices 1\nutil 0 0 0\npower 0 61000\n");
  // A round in progress may have read the old script; the one after it cannot have.
  ASSERT_TRUE(sampler->wait_for_rounds(sampler->rounds() + 2, milliseconds(10'000)));
  GpuObservation gpu = observe(*sampler);
  EXPECT_EQ(gpu.nvml.back().gpu_util_pct, 0u);
  EXPECT_EQ(gpu.nvml.back().power_mw, 61000u);
  EXPECT_GT(gpu.nvml.size(), 2u);
  for (size_t i = 1; i < gpu.nvml.size(); ++i) EXPECT_GE(gpu.nvml[i].ts_ns, gpu.nvml[i - 1].ts_ns);
  sampler->stop();
}

TEST_F(NvmlSamplerTest, AFailingQuerySkipsOnlyItsField) {
  write_script(
      "devices 2\n"
      "util 0 50 20\npower 0 250000\nmemory 0 100 200\nproc 0 99 50\n"
      "util 1 60 25\npower 1 260000\nmemory 1 300 400\n"
      "fail nvmlDeviceGetPowerUsage 3 0\n"          // NVML_ERROR_NOT_SUPPORTED on device 0
      "fail nvmlDeviceGetMemoryInfo 999 1\n"        // NVML_ERROR_UNKNOWN on device 1
      "fail nvmlDeviceGetProcessUtilization 3\n");  // every device
  auto sampler = NvmlSampler::open(kStubLibrary);
  ASSERT_EQ(sampler->status(), "");
  sampler->sample_once();

  GpuObservation gpu = observe(*sampler);
  ASSERT_EQ(gpu.nvml.size(), 2u);
  const NvmlSample& first = gpu.nvml[0];
  EXPECT_FALSE(first.has_power);
  EXPECT_EQ(first.power_mw, 0u);
  EXPECT_TRUE(first.has_utilization);
  EXPECT_EQ(first.gpu_util_pct, 50u);
  EXPECT_TRUE(first.has_memory);
  EXPECT_EQ(first.mem_used_bytes, 100u);
  EXPECT_FALSE(first.has_process_util);
  EXPECT_TRUE(first.process_sm_util_pct.empty());

  const NvmlSample& second = gpu.nvml[1];
  EXPECT_TRUE(second.has_power);
  EXPECT_EQ(second.power_mw, 260000u);
  EXPECT_FALSE(second.has_memory);
  EXPECT_EQ(second.mem_total_bytes, 0u);
  EXPECT_TRUE(second.has_utilization);
  EXPECT_EQ(second.gpu_util_pct, 60u);
}

TEST_F(NvmlSamplerTest, InitFailureIsOneLineAndSamplesNothing) {
  write_script("devices 1\nutil 0 50 20\nfail nvmlInit_v2 9\n");  // NVML_ERROR_DRIVER_NOT_LOADED
  auto sampler = NvmlSampler::open(kStubLibrary);
  EXPECT_EQ(sampler->status(),
            "NVML: nvmlInit failed: Driver Not Loaded: GPU utilization, power and memory not sampled");
  EXPECT_FALSE(sampler->usable());
  EXPECT_TRUE(sampler->devices().empty());
  sampler->sample_once();
  sampler->start(1'000'000);
  sampler->stop();
  EXPECT_EQ(sampler->rounds(), 0u);

  GpuObservation gpu = observe(*sampler);
  EXPECT_EQ(gpu.nvml_status, sampler->status());
  EXPECT_TRUE(gpu.nvml.empty());
  EXPECT_TRUE(gpu.nvml_devices.empty());
  sampler.reset();
  EXPECT_EQ(stub_.init_refcount(), 0) << "nvmlShutdown without a successful nvmlInit";
}

TEST_F(NvmlSamplerTest, NoDeviceIsOneLine) {
  write_script("devices 0\n");
  auto sampler = NvmlSampler::open(kStubLibrary);
  EXPECT_EQ(sampler->status(), "NVML: no NVIDIA GPU found: GPU utilization, power and memory not sampled");
  sampler.reset();
  EXPECT_EQ(stub_.init_refcount(), 0);
}

TEST_F(NvmlSamplerTest, AbsentLibraryIsOneLineNamingIt) {
  const std::string missing = (dir_ / "no-such-dir" / "libnvidia-ml.so.1").string();
  auto sampler = NvmlSampler::open(missing);
  EXPECT_EQ(sampler->status(),
            "NVML: " + missing + " not found: GPU utilization, power and memory not sampled");
  sampler->sample_once();
  sampler->start();
  sampler->stop();
  GpuObservation gpu = observe(*sampler);
  EXPECT_EQ(gpu.nvml_status, sampler->status());
  EXPECT_TRUE(gpu.nvml.empty());
}

TEST_F(NvmlSamplerTest, LibraryWithoutNvmlIsOneLine) {
  // A loadable library that is not NVML: its entry points are missing.
  void* self = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(self, nullptr);
  dlclose(self);
  auto sampler = NvmlSampler::open("libc.so.6");
  EXPECT_EQ(sampler->status(),
            "NVML: libc.so.6 lacks nvmlInit_v2: GPU utilization, power and memory not sampled");
}

TEST_F(NvmlSamplerTest, EnvironmentChoosesTheLibrary) {
  write_script("devices 1\nname 0 from the environment\n");
  setenv("HANGTRACE_NVML_LIBRARY", kStubLibrary, 1);
  auto sampler = NvmlSampler::open();
  unsetenv("HANGTRACE_NVML_LIBRARY");
  ASSERT_EQ(sampler->status(), "");
  ASSERT_EQ(sampler->devices().size(), 1u);
  EXPECT_EQ(sampler->devices()[0].name, "from the environment");
}

TEST_F(NvmlSamplerTest, StartAndStopTwiceAndStopPromptly) {
  write_script("devices 1\nutil 0 10 10\n");
  auto sampler = NvmlSampler::open(kStubLibrary);
  ASSERT_EQ(sampler->status(), "");
  for (int cycle = 0; cycle < 2; ++cycle) {
    uint64_t done = sampler->rounds();
    // An interval far beyond the test: stop() must wake the thread, not wait the interval out.
    sampler->start(3600ull * 1'000'000'000);
    sampler->start(1'000'000);  // already running: ignored
    ASSERT_TRUE(sampler->wait_for_rounds(done + 1, milliseconds(10'000)));
    auto before = std::chrono::steady_clock::now();
    sampler->stop();
    EXPECT_LT(std::chrono::steady_clock::now() - before, milliseconds(2'000));
    EXPECT_EQ(sampler->rounds(), done + 1) << "one round at the start, the next one an hour later";
    sampler->stop();  // stopped already: nothing to do
  }
  sampler->start(1'000'000);
  ASSERT_TRUE(sampler->wait_for_rounds(sampler->rounds() + 1, milliseconds(10'000)));
  sampler.reset();  // destructor stops the running thread
  EXPECT_EQ(stub_.init_refcount(), 0);
}

TEST_F(NvmlSamplerTest, KeepsOnlyTheLatestSamples) {
  write_script("devices 2\n");
  auto sampler = NvmlSampler::open(kStubLibrary);
  ASSERT_EQ(sampler->status(), "");
  size_t rounds = NvmlSampler::kMaxSamples / 2 + 10;
  for (size_t i = 0; i < rounds; ++i) sampler->sample_once();
  GpuObservation gpu = observe(*sampler);
  EXPECT_EQ(gpu.nvml.size(), NvmlSampler::kMaxSamples);
  EXPECT_EQ(sampler->rounds(), rounds);
}

// This host's own NVML: absent without the NVIDIA driver (the case here); the line names the library.
TEST(NvmlSamplerHostTest, DefaultLibraryAbsentSaysSoInOneLine) {
  unsetenv("HANGTRACE_NVML_LIBRARY");
  void* driver = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver != nullptr) {
    dlclose(driver);
    GTEST_SKIP() << "libnvidia-ml.so.1 is installed on this host";
  }
  auto sampler = NvmlSampler::open();
  EXPECT_EQ(sampler->status(),
            "NVML: libnvidia-ml.so.1 not found (no NVIDIA driver on this host): GPU utilization, power and "
            "memory not sampled");
  EXPECT_EQ(sampler->status().find('\n'), std::string::npos);
  GpuObservation gpu;
  sampler->contribute(gpu);
  EXPECT_EQ(gpu.nvml_status, sampler->status());
}

}  // namespace
}  // namespace hangtrace
