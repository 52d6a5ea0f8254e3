// What hangtrace sees of the GPU side of a job: host calls into CUDA and NCCL
// (uprobes), GPU activity (CUPTI, through the injection library) and device
// counters (NVML). Pure data, filled by the collector and read by the rules
// (gpu-starved, gpu-wait, collective-wait) and the exports.
//
// Times are CLOCK_MONOTONIC ns, the clock of every other live record.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace hangtrace {

// enum ht_gpu_fn (abi.h) by name: "cuStreamSynchronize", "ncclAllReduce".
const char* gpu_fn_name(uint32_t fn);
// The host thread waits for the device until it returns (synchronize calls, synchronous copies).
bool gpu_fn_is_host_wait(uint32_t fn);
bool gpu_fn_is_nccl(uint32_t fn);
// A collective or point-to-point transfer (not group start/end).
bool gpu_fn_is_nccl_transfer(uint32_t fn);
// enum ht_gpu_activity_kind: "kernel", "memcpy", ...
const char* gpu_activity_kind_name(uint32_t kind);

// A host call that returned (ht_gpu_call_event).
struct GpuCall {
  int pid = 0, tid = 0;
  std::string comm;
  uint32_t fn = 0;
  int64_t ret = 0;
  uint64_t start_ns = 0, end_ns = 0;
  uint64_t stream = 0, handle = 0, count = 0, seq = 0;
  int datatype = -1, peer = -1;
  int32_t ustack_id = -1;
};

// A thread's CUDA/NCCL state when the window closed (ht_gpu_thread).
struct GpuThreadState {
  int pid = 0, tid = 0;
  std::string comm;
  uint32_t in_fn = 0;  // the call in progress, 0 none
  uint64_t in_since_ns = 0, in_stream = 0, in_handle = 0;
  uint64_t launches = 0, last_launch_ns = 0;
  uint64_t syncs = 0, last_sync_end_ns = 0;
  uint64_t collectives = 0, last_collective_ns = 0, last_collective_count = 0, last_collective_comm = 0;
  uint32_t last_collective_fn = 0;
  int last_collective_datatype = -1;
  uint32_t nccl_group_depth = 0;
};

// A CUPTI activity record (ht_gpu_activity), already on CLOCK_MONOTONIC.
struct GpuActivity {
  uint32_t kind = 0;  // enum ht_gpu_activity_kind
  uint64_t start_ns = 0, end_ns = 0;
  uint32_t correlation_id = 0, device_id = 0, context_id = 0, stream_id = 0;
  int pid = 0, tid = 0;
  uint32_t detail = 0;
  uint64_t bytes = 0;
  uint32_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
  std::string name;
};

// How long kernels of one name took (all records seen, not only those kept).
struct KernelDurations {
  uint64_t count = 0, total_ns = 0, max_ns = 0;
  std::deque<uint64_t> recent_ns;  // the latest 64, for the median
  uint64_t median_ns() const;
};

// One NVML reading of one device.
struct NvmlSample {
  uint64_t ts_ns = 0;
  unsigned device = 0;
  unsigned gpu_util_pct = 0, mem_util_pct = 0;
  unsigned power_mw = 0;
  uint64_t mem_used_bytes = 0, mem_total_bytes = 0;
  // Which queries answered: a device without power readings is not "0 W".
  bool has_utilization = false, has_power = false, has_memory = false;
  // Per-process SM utilization over the sample period (nvmlDeviceGetProcessUtilization), by pid;
  // with has_process_util, a pid absent from it had no GPU activity.
  bool has_process_util = false;
  std::map<int, unsigned> process_sm_util_pct;
};

struct NvmlDevice {
  unsigned index = 0;
  std::string name;
};

struct GpuObservation {
  // Libraries found in the traced processes and what was attached to each:
  // "/usr/lib/x86_64-linux-gnu/libcuda.so.1: 23 uprobes".
  std::vector<std::string> libraries;
  std::set<int> cuda_pids;              // traced processes seen mapping libcuda
  std::vector<GpuThreadState> threads;  // threads that ever called CUDA / NCCL
  std::deque<GpuCall> calls;            // the latest, bounded
  std::deque<GpuActivity> activity;     // the latest kernels / copies / API calls, bounded
  uint64_t activity_records = 0;        // all seen
  std::map<std::string, KernelDurations> kernel_durations;  // by kernel name
  // The injection library's status lines and latest clock calibration.
  std::vector<std::string> cupti_status;
  int64_t cupti_clock_offset_ns = 0;  // CLOCK_MONOTONIC - CUPTI clock at the latest calibration point
  uint64_t cupti_clock_uncertainty_ns = 0;
  bool cupti_calibrated = false;
  // NVML: empty status when sampled, else the one line that says why not.
  std::string nvml_status;
  std::vector<NvmlDevice> nvml_devices;
  std::deque<NvmlSample> nvml;  // bounded

  bool empty() const {
    return libraries.empty() && threads.empty() && calls.empty() && activity.empty() && nvml.empty() &&
           cupti_status.empty() && nvml_devices.empty();
  }
};

}  // namespace hangtrace
