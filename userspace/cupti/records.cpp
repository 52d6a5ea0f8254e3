#include "records.h"

#include <cctype>
#include <cstddef>
#include <cstring>
#include <string>

namespace hangtrace::cupti {

// bpf/cupti.bpf.c copies this many bytes; decode_event checks size and version.
static_assert(sizeof(ht_gpu_activity) == 184);
static_assert(offsetof(ht_gpu_activity, bytes) == 56);
static_assert(offsetof(ht_gpu_activity, name) == 88);

namespace {

ht_gpu_activity blank(uint16_t kind) {
  ht_gpu_activity a{};
  a.version = HT_GPU_ACTIVITY_VERSION;
  a.kind = kind;
  a.size = sizeof(ht_gpu_activity);
  return a;
}

// What every record we convert has: its times, moved onto CLOCK_MONOTONIC,
// and its correlation id.
template <typename Record>
ht_gpu_activity timed_record(uint16_t kind, const Record& r, const GpuClock& clock) {
  ht_gpu_activity a = blank(kind);
  a.start_ns = clock.to_monotonic(r.start);
  a.end_ns = clock.to_monotonic(r.end);
  a.correlation_id = r.correlationId;
  return a;
}

// Work on a device stream (a kernel, a copy, a fill): also its device,
// context and stream.
template <typename Record>
ht_gpu_activity stream_record(uint16_t kind, const Record& r, const GpuClock& clock) {
  ht_gpu_activity a = timed_record(kind, r, clock);
  a.device_id = r.deviceId;
  a.context_id = r.contextId;
  a.stream_id = r.streamId;
  return a;
}

// A copy or a fill: also its size; `detail` is the copy's kind or the fill's byte.
template <typename Record>
ht_gpu_activity copy_record(uint16_t kind, const Record& r, uint32_t detail, const GpuClock& clock) {
  ht_gpu_activity a = stream_record(kind, r, clock);
  a.detail = detail;
  a.bytes = r.bytes;
  return a;
}

// Grid and block sizes are int32 in CUPTI but never negative.
uint32_t dim(int32_t v) { return v < 0 ? 0 : static_cast<uint32_t>(v); }

}  // namespace

void set_name(ht_gpu_activity& a, std::string_view text) {
  size_t n = std::min(text.size(), sizeof a.name - 1);
  // An empty view may have no data at all: memcpy from null is undefined even for 0 bytes.
  if (n) std::memcpy(a.name, text.data(), n);
  std::memset(a.name + n, 0, sizeof a.name - n);
}

std::string api_name(CUpti_ActivityKind kind, uint32_t cbid) {
  CUpti_CallbackDomain domain =
      kind == CUPTI_ACTIVITY_KIND_DRIVER ? CUPTI_CB_DOMAIN_DRIVER_API : CUPTI_CB_DOMAIN_RUNTIME_API;
  const char* name = nullptr;
  if (cuptiGetCallbackName(domain, cbid, &name) != CUPTI_SUCCESS || !name) return {};
  std::string out = name;
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
    size_t v = out.rfind("_v");
    if (v != std::string::npos && out.size() - v >= 6) {
      bool digits = true;
      for (size_t i = v + 2; i < out.size(); ++i)
        digits = digits && std::isdigit(static_cast<unsigned char>(out[i]));
      if (digits) out.resize(v);
    }
  }
  return out;
}

std::optional<ht_gpu_activity> convert_record(const CUpti_Activity& rec, const GpuClock& clock) {
  switch (rec.kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto& k = reinterpret_cast<const CUpti_ActivityKernel10&>(rec);
      ht_gpu_activity a = stream_record(HT_GPU_ACT_KERNEL, k, clock);
      a.detail = k.registersPerThread;
      a.grid[0] = dim(k.gridX);
      a.grid[1] = dim(k.gridY);
      a.grid[2] = dim(k.gridZ);
      a.block[0] = dim(k.blockX);
      a.block[1] = dim(k.blockY);
      a.block[2] = dim(k.blockZ);
      set_name(a, k.name ? std::string_view(k.name) : std::string_view());
      return a;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto& m = reinterpret_cast<const CUpti_ActivityMemcpy6&>(rec);
      return copy_record(HT_GPU_ACT_MEMCPY, m, m.copyKind, clock);
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto& m = reinterpret_cast<const CUpti_ActivityMemset4&>(rec);
      return copy_record(HT_GPU_ACT_MEMSET, m, m.value, clock);
    }
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
      const auto& s = reinterpret_cast<const CUpti_ActivitySynchronization2&>(rec);
      ht_gpu_activity a = timed_record(HT_GPU_ACT_SYNC, s, clock);
      a.context_id = s.contextId;
      // CUPTI_SYNCHRONIZATION_INVALID_VALUE for context-wide waits.
      a.stream_id = s.streamId;
      // The enum's bits, not the enum: a value this CUPTI header does not
      // name (a newer driver's) is kept, and loading it is not undefined.
      uint32_t type;
      static_assert(sizeof type == sizeof s.type);
      std::memcpy(&type, &s.type, sizeof type);
      a.detail = type;
      return a;
    }
    case CUPTI_ACTIVITY_KIND_DRIVER:
    case CUPTI_ACTIVITY_KIND_RUNTIME: {
      const auto& api = reinterpret_cast<const CUpti_ActivityAPI&>(rec);
      ht_gpu_activity a = timed_record(
          rec.kind == CUPTI_ACTIVITY_KIND_DRIVER ? HT_GPU_ACT_DRIVER_API : HT_GPU_ACT_RUNTIME_API, api,
          clock);
      a.pid = api.processId;
      a.tid = api.threadId;
      a.detail = api.cbid;
      set_name(a, api_name(rec.kind, api.cbid));
      return a;
    }
    default:
      return std::nullopt;
  }
}

ht_gpu_activity status_record(std::string_view text) {
  ht_gpu_activity a = blank(HT_GPU_ACT_STATUS);
  set_name(a, text);
  return a;
}

ht_gpu_activity clock_record(const ClockPoint& point) {
  ht_gpu_activity a = blank(HT_GPU_ACT_CLOCK);
  a.start_ns = point.mono_ns;
  a.end_ns = point.cupti_ns;
  a.bytes = point.uncertainty_ns;
  return a;
}

}  // namespace hangtrace::cupti
