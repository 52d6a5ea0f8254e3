#include "nvml_sampler.h"

#include <dlfcn.h>
#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

namespace hangtrace {

namespace {

// The few NVML types and entry points hangtrace uses, declared here because
// nvml.h is not installed without the driver's development files. They are
// NVML's stable public ABI (nvml.h), unchanged across driver releases; the
// versioned entry points (_v2) are named explicitly.
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr nvmlReturn_t NVML_ERROR_NOT_FOUND = 6;
constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_SIZE = 7;
// NVML_DEVICE_NAME_V2_BUFFER_SIZE, the larger of the two name sizes.
constexpr unsigned kDeviceNameBufferSize = 96;

struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};

struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

struct nvmlProcessUtilizationSample_t {
  unsigned int pid;
  unsigned long long timeStamp;  // CLOCK_REALTIME, microseconds
  unsigned int smUtil;
  unsigned int memUtil;
  unsigned int encUtil;
  unsigned int decUtil;
};

constexpr const char* kDefaultLibrary = "libnvidia-ml.so.1";
constexpr const char* kNotSampled = "GPU utilization, power and memory not sampled";

uint64_t clock_ns(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

std::string unusable(const std::string& why) { return fmt::format("NVML: {}: {}", why, kNotSampled); }

}  // namespace

struct NvmlSampler::Api {
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  const char* (*error_string)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*device_count)(unsigned*) = nullptr;
  nvmlReturn_t (*device_handle)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*device_name)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*power_usage)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*memory_info)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*process_utilization)(nvmlDevice_t, nvmlProcessUtilizationSample_t*, unsigned*,
                                      unsigned long long) = nullptr;
};

NvmlSampler::NvmlSampler() : api_(std::make_unique<Api>()) {}

std::unique_ptr<NvmlSampler> NvmlSampler::open(const std::string& library) {
  std::unique_ptr<NvmlSampler> sampler(new NvmlSampler());
  std::string name = library;
  if (name.empty()) {
    const char* from_env = std::getenv("HANGTRACE_NVML_LIBRARY");
    name = from_env != nullptr && *from_env != '\0' ? from_env : kDefaultLibrary;
  }
  sampler->initialize(name);
  return sampler;
}

void NvmlSampler::initialize(const std::string& library) {
  library_handle_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library_handle_ == nullptr) {
    const char* reason = dlerror();
    std::string why = reason != nullptr ? reason : "unknown dlopen error";
    if (why.find("No such file") != std::string::npos) {
      status_ = unusable(library == kDefaultLibrary
                             ? fmt::format("{} not found (no NVIDIA driver on this host)", library)
                             : fmt::format("{} not found", library));
    } else {
      status_ = unusable(fmt::format("cannot load {}: {}", library, why));
    }
    return;
  }

  // Entry points without which nothing can be read; the per-field ones are optional (older drivers
  // lack some), a missing one leaves its field unset.
  auto resolve = [&](auto& slot, const char* symbol) {
    slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(dlsym(library_handle_, symbol));
    return slot != nullptr;
  };
  for (auto [found, symbol] :
       {std::pair{resolve(api_->init, "nvmlInit_v2"), "nvmlInit_v2"},
        std::pair{resolve(api_->shutdown, "nvmlShutdown"), "nvmlShutdown"},
        std::pair{resolve(api_->device_count, "nvmlDeviceGetCount_v2"), "nvmlDeviceGetCount_v2"},
        std::pair{resolve(api_->device_handle, "nvmlDeviceGetHandleByIndex_v2"),
                  "nvmlDeviceGetHandleByIndex_v2"}}) {
    if (!found) {
      status_ = unusable(fmt::format("{} lacks {}", library, symbol));
      return;
    }
  }
  resolve(api_->error_string, "nvmlErrorString");
  resolve(api_->device_name, "nvmlDeviceGetName");
  resolve(api_->utilization, "nvmlDeviceGetUtilizationRates");
  resolve(api_->power_usage, "nvmlDeviceGetPowerUsage");
  resolve(api_->memory_info, "nvmlDeviceGetMemoryInfo");
  resolve(api_->process_utilization, "nvmlDeviceGetProcessUtilization");

  nvmlReturn_t rc = api_->init();
  if (rc != NVML_SUCCESS) {
    status_ = unusable(fmt::format("nvmlInit failed: {}", error_string(rc)));
    return;
  }
  initialized_ = true;

  unsigned count = 0;
  rc = api_->device_count(&count);
  if (rc != NVML_SUCCESS) {
    status_ = unusable(fmt::format("nvmlDeviceGetCount failed: {}", error_string(rc)));
    return;
  }
  // Per-process samples from the last second count toward the first round, so that a single
  // sample_once() already says which processes use the GPU.
  unsigned long long start_us = clock_ns(CLOCK_REALTIME) / 1000 - 1'000'000;
  std::string first_failure;
  for (unsigned index = 0; index < count; ++index) {
    nvmlDevice_t handle = nullptr;
    rc = api_->device_handle(index, &handle);
    if (rc != NVML_SUCCESS) {
      // Typically a device the user may not access; the others are still worth sampling.
      if (first_failure.empty()) {
        first_failure = fmt::format("nvmlDeviceGetHandleByIndex({}) failed: {}", index, error_string(rc));
      }
      continue;
    }
    NvmlDevice device{.index = index};
    char name[kDeviceNameBufferSize] = {};
    if (api_->device_name != nullptr && api_->device_name(handle, name, sizeof(name)) == NVML_SUCCESS) {
      device.name.assign(name, strnlen(name, sizeof(name)));
    }
    devices_.push_back(std::move(device));
    nvml_devices_.push_back(Device{.index = index, .handle = handle, .last_seen_process_us = start_us});
  }
  if (devices_.empty()) {
    status_ = unusable(first_failure.empty() ? std::string("no NVIDIA GPU found") : first_failure);
  }
}

NvmlSampler::~NvmlSampler() {
  stop();
  if (initialized_) api_->shutdown();
  if (library_handle_ != nullptr) dlclose(library_handle_);
}

std::string NvmlSampler::error_string(int code) const {
  if (api_->error_string != nullptr) {
    const char* text = api_->error_string(code);
    if (text != nullptr && *text != '\0') return text;
  }
  return fmt::format("NVML error {}", code);
}

void NvmlSampler::sample_device(Device& device, NvmlSample& out) {
  auto handle = static_cast<nvmlDevice_t>(device.handle);
  out.device = device.index;

  nvmlUtilization_t utilization{};
  if (api_->utilization != nullptr && api_->utilization(handle, &utilization) == NVML_SUCCESS) {
    out.gpu_util_pct = utilization.gpu;
    out.mem_util_pct = utilization.memory;
    out.has_utilization = true;
  }
  unsigned power_mw = 0;
  if (api_->power_usage != nullptr && api_->power_usage(handle, &power_mw) == NVML_SUCCESS) {
    out.power_mw = power_mw;
    out.has_power = true;
  }
  nvmlMemory_t memory{};
  if (api_->memory_info != nullptr && api_->memory_info(handle, &memory) == NVML_SUCCESS) {
    out.mem_used_bytes = memory.used;
    out.mem_total_bytes = memory.total;
    out.has_memory = true;
  }

  if (api_->process_utilization == nullptr) return;
  // Size query first (a null buffer), then the read; the count can grow in between, hence the retries.
  unsigned count = 0;
  nvmlReturn_t rc = api_->process_utilization(handle, nullptr, &count, device.last_seen_process_us);
  if (rc == NVML_ERROR_NOT_FOUND || (rc == NVML_SUCCESS && count == 0)) {
    out.has_process_util = true;  // no process ran on the GPU since the last round
    return;
  }
  if (rc != NVML_ERROR_INSUFFICIENT_SIZE && rc != NVML_SUCCESS) return;
  std::vector<nvmlProcessUtilizationSample_t> buffer;
  for (int attempt = 0; attempt < 3; ++attempt) {
    buffer.assign(std::max(count, 1u), nvmlProcessUtilizationSample_t{});
    count = static_cast<unsigned>(buffer.size());
    rc = api_->process_utilization(handle, buffer.data(), &count, device.last_seen_process_us);
    if (rc != NVML_ERROR_INSUFFICIENT_SIZE) break;
    count = std::max<unsigned>(count, static_cast<unsigned>(buffer.size()) * 2);
  }
  if (rc == NVML_ERROR_NOT_FOUND) {
    out.has_process_util = true;
    return;
  }
  if (rc != NVML_SUCCESS) return;
  out.has_process_util = true;
  // A process can appear once per driver sample; its latest one is its current utilization.
  std::map<int, unsigned long long> latest_us;
  for (unsigned i = 0; i < std::min<unsigned>(count, buffer.size()); ++i) {
    const auto& sample = buffer[i];
    int pid = static_cast<int>(sample.pid);
    auto [it, inserted] = latest_us.try_emplace(pid, sample.timeStamp);
    if (inserted || sample.timeStamp >= it->second) {
      it->second = sample.timeStamp;
      out.process_sm_util_pct[pid] = sample.smUtil;
    }
    device.last_seen_process_us = std::max(device.last_seen_process_us, sample.timeStamp);
  }
}

void NvmlSampler::sample_once() {
  if (!usable()) return;
  std::vector<NvmlSample> round;
  {
    std::lock_guard sampling(sampling_mutex_);
    for (Device& device : nvml_devices_) {
      NvmlSample sample;
      sample.ts_ns = clock_ns(CLOCK_MONOTONIC);
      sample_device(device, sample);
      round.push_back(std::move(sample));
    }
  }
  {
    std::lock_guard data(data_mutex_);
    for (NvmlSample& sample : round) samples_.push_back(std::move(sample));
    while (samples_.size() > kMaxSamples) samples_.pop_front();
    ++rounds_;
  }
  round_done_.notify_all();
}

void NvmlSampler::start(uint64_t interval_ns) {
  std::lock_guard guard(thread_mutex_);
  if (!usable() || thread_.joinable()) return;
  {
    std::lock_guard stop_guard(stop_mutex_);
    stop_requested_ = false;
  }
  thread_ = std::thread([this, interval_ns] { run(interval_ns); });
  pthread_setname_np(thread_.native_handle(), "ht-nvml");
}

void NvmlSampler::stop() {
  std::lock_guard guard(thread_mutex_);
  if (!thread_.joinable()) return;
  {
    std::lock_guard stop_guard(stop_mutex_);
    stop_requested_ = true;
  }
  stop_requested_cv_.notify_all();
  thread_.join();
}

void NvmlSampler::run(uint64_t interval_ns) {
  auto interval = std::chrono::nanoseconds(std::max<uint64_t>(interval_ns, 1'000'000));
  auto next = std::chrono::steady_clock::now();
  while (true) {
    sample_once();
    next += interval;
    // A round that overran (slow driver) must not be followed by a burst of catch-up rounds.
    next = std::max(next, std::chrono::steady_clock::now());
    std::unique_lock lock(stop_mutex_);
    if (stop_requested_cv_.wait_until(lock, next, [this] { return stop_requested_; })) return;
  }
}

uint64_t NvmlSampler::rounds() const {
  std::lock_guard data(data_mutex_);
  return rounds_;
}

bool NvmlSampler::wait_for_rounds(uint64_t rounds, std::chrono::milliseconds timeout) const {
  std::unique_lock data(data_mutex_);
  return round_done_.wait_for(data, timeout, [&] { return rounds_ >= rounds; });
}

void NvmlSampler::contribute(GpuObservation& gpu) const {
  gpu.nvml_status = status_;
  gpu.nvml_devices = devices_;
  std::lock_guard data(data_mutex_);
  gpu.nvml.assign(samples_.begin(), samples_.end());
}

}  // namespace hangtrace
