#include "hangtrace/gpu.h"

#include <algorithm>
#include <vector>

#include "hangtrace/abi.h"

namespace hangtrace {

const char* gpu_fn_name(uint32_t fn) {
  switch (fn) {
    case HT_GPU_LAUNCH_KERNEL:
      return "cuLaunchKernel";
    case HT_GPU_LAUNCH_KERNEL_EX:
      return "cuLaunchKernelEx";
    case HT_GPU_LAUNCH_COOPERATIVE:
      return "cuLaunchCooperativeKernel";
    case HT_GPU_CTX_SYNCHRONIZE:
      return "cuCtxSynchronize";
    case HT_GPU_STREAM_SYNCHRONIZE:
      return "cuStreamSynchronize";
    case HT_GPU_EVENT_SYNCHRONIZE:
      return "cuEventSynchronize";
    case HT_GPU_STREAM_WAIT_EVENT:
      return "cuStreamWaitEvent";
    case HT_GPU_MEMCPY:
      return "cuMemcpy";
    case HT_GPU_MEMCPY_ASYNC:
      return "cuMemcpyAsync";
    case HT_GPU_MEMSET:
      return "cuMemset";
    case HT_GPU_MEMSET_ASYNC:
      return "cuMemsetAsync";
    case HT_GPU_NCCL_ALL_REDUCE:
      return "ncclAllReduce";
    case HT_GPU_NCCL_BROADCAST:
      return "ncclBroadcast";
    case HT_GPU_NCCL_REDUCE:
      return "ncclReduce";
    case HT_GPU_NCCL_ALL_GATHER:
      return "ncclAllGather";
    case HT_GPU_NCCL_REDUCE_SCATTER:
      return "ncclReduceScatter";
    case HT_GPU_NCCL_SEND:
      return "ncclSend";
    case HT_GPU_NCCL_RECV:
      return "ncclRecv";
    case HT_GPU_NCCL_GROUP_START:
      return "ncclGroupStart";
    case HT_GPU_NCCL_GROUP_END:
      return "ncclGroupEnd";
    default:
      return "unknown";
  }
}

bool gpu_fn_is_host_wait(uint32_t fn) {
  return fn == HT_GPU_CTX_SYNCHRONIZE || fn == HT_GPU_STREAM_SYNCHRONIZE || fn == HT_GPU_EVENT_SYNCHRONIZE ||
         fn == HT_GPU_MEMCPY || fn == HT_GPU_MEMSET;
}

bool gpu_fn_is_nccl(uint32_t fn) { return fn >= HT_GPU_NCCL_ALL_REDUCE && fn <= HT_GPU_NCCL_GROUP_END; }

bool gpu_fn_is_nccl_transfer(uint32_t fn) { return fn >= HT_GPU_NCCL_ALL_REDUCE && fn <= HT_GPU_NCCL_RECV; }

const char* gpu_activity_kind_name(uint32_t kind) {
  switch (kind) {
    case HT_GPU_ACT_KERNEL:
      return "kernel";
    case HT_GPU_ACT_MEMCPY:
      return "memcpy";
    case HT_GPU_ACT_MEMSET:
      return "memset";
    case HT_GPU_ACT_SYNC:
      return "sync";
    case HT_GPU_ACT_DRIVER_API:
      return "driver-api";
    case HT_GPU_ACT_RUNTIME_API:
      return "runtime-api";
    case HT_GPU_ACT_CLOCK:
      return "clock";
    case HT_GPU_ACT_STATUS:
      return "status";
    default:
      return "unknown";
  }
}

uint64_t KernelDurations::median_ns() const {
  if (recent_ns.empty()) return 0;
  std::vector<uint64_t> v(recent_ns.begin(), recent_ns.end());
  std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace hangtrace
