// NVML device counters (utilization, power, memory, per-process SM
// utilization), sampled while tracing. libnvidia-ml is dlopen'ed so hangtrace
// builds and runs on hosts without the NVIDIA driver: there, status() says so
// in one line and sampling does nothing.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hangtrace/gpu.h"

namespace hangtrace {

class NvmlSampler {
 public:
  // The samples kept, over all devices: two minutes of one GPU at the default interval.
  static constexpr size_t kMaxSamples = 1200;
  static constexpr uint64_t kDefaultIntervalNs = 500'000'000;

  // `library` "" means $HANGTRACE_NVML_LIBRARY, else "libnvidia-ml.so.1". Never fails: an unusable
  // library gives a sampler whose status() says why.
  static std::unique_ptr<NvmlSampler> open(const std::string& library = "");
  ~NvmlSampler();
  NvmlSampler(const NvmlSampler&) = delete;
  NvmlSampler& operator=(const NvmlSampler&) = delete;

  // "" when NVML is usable, else one line: "NVML: <why>: GPU utilization, power and memory not sampled".
  const std::string& status() const { return status_; }
  bool usable() const { return status_.empty(); }
  const std::vector<NvmlDevice>& devices() const { return devices_; }

  // Reads every device once. A query that fails on a device leaves that field unset in its sample.
  void sample_once();
  // Samples every `interval_ns` on a background thread, starting now; no-op when already running or
  // not usable.
  void start(uint64_t interval_ns = kDefaultIntervalNs);
  void stop();

  // Sampling rounds completed so far (each sample_once, from any thread).
  uint64_t rounds() const;
  // Waits until at least `rounds` rounds are complete; false on timeout.
  bool wait_for_rounds(uint64_t rounds, std::chrono::milliseconds timeout) const;

  // Fills nvml_status, nvml_devices and the kept samples (oldest first).
  void contribute(GpuObservation& gpu) const;

 private:
  struct Api;
  struct Device {
    unsigned index = 0;
    void* handle = nullptr;
    // NVML's lastSeenTimeStamp (CLOCK_REALTIME us): per-process samples newer than this are new.
    unsigned long long last_seen_process_us = 0;
  };

  NvmlSampler();
  void initialize(const std::string& library);
  void sample_device(Device& device, NvmlSample& out);
  std::string error_string(int code) const;
  void run(uint64_t interval_ns);

  std::unique_ptr<Api> api_;
  void* library_handle_ = nullptr;
  bool initialized_ = false;  // nvmlInit_v2 succeeded: nvmlShutdown is owed
  std::string status_;
  std::vector<NvmlDevice> devices_;

  std::mutex sampling_mutex_;  // one round at a time: NVML handles and last_seen bookkeeping
  std::vector<Device> nvml_devices_;

  mutable std::mutex data_mutex_;
  mutable std::condition_variable round_done_;
  std::deque<NvmlSample> samples_;
  uint64_t rounds_ = 0;

  std::mutex thread_mutex_;  // start/stop
  std::mutex stop_mutex_;
  std::condition_variable stop_requested_cv_;
  bool stop_requested_ = false;
  std::thread thread_;
};

}  // namespace hangtrace
