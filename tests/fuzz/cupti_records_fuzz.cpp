// The CUPTI record decoder (userspace/cupti/records.cpp, in the injection
// library): convert_record over fuzzed CUPTI activity records of every kind
// it takes (kernel, memcpy, memset, synchronization, driver and runtime API),
// on a GpuClock calibrated from fuzzed points (include/hangtrace/gpu_clock.h),
// then the record it made through the hangtrace side, as the USDT probe
// hands it over (an HT_EV_GPU_ACTIVITY ring record: decode_event and the
// aggregator). Input: byte 0 picks the kind, byte 1 the number of clock
// points (% 4), then those ClockPoints, then the record's bytes (zero-filled
// to the struct's size); a kernel's name is the NUL-terminated text after
// the record. Seeds: records of each kind as CUDA 13's CUPTI fills them
// for a kernel launch, a host-to-device copy, a memset and a stream sync.
#include <cupti.h>

#include "fuzz_support.h"
#include "hangtrace/live.h"
#include "records.h"

using namespace hangtrace;

namespace {

template <typename R>
std::optional<ht_gpu_activity> convert(CUpti_ActivityKind kind, const uint8_t* data, size_t size,
                                       const GpuClock& clock, std::string* name_storage) {
  R r;
  std::memset(&r, 0, sizeof r);
  std::memcpy(&r, data, std::min(size, sizeof r));
  r.kind = kind;
  if constexpr (requires { r.name; }) {
    // CUPTI's pointer into its own strings: here, the text after the record.
    if (size > sizeof r) {
      name_storage->assign(reinterpret_cast<const char*>(data + sizeof r), size - sizeof r);
      name_storage->resize(std::strlen(name_storage->c_str()));
      r.name = name_storage->c_str();
    } else {
      r.name = nullptr;
    }
  }
  const auto* record = reinterpret_cast<const CUpti_Activity*>(&r);
  return cupti::convert_record(*record, clock);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  static const CUpti_ActivityKind kKinds[] = {
      CUPTI_ACTIVITY_KIND_KERNEL,          CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
      CUPTI_ACTIVITY_KIND_MEMCPY,          CUPTI_ACTIVITY_KIND_MEMSET,
      CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, CUPTI_ACTIVITY_KIND_DRIVER,
      CUPTI_ACTIVITY_KIND_RUNTIME,         CUPTI_ACTIVITY_KIND_MARKER};
  CUpti_ActivityKind kind = kKinds[data[0] % (sizeof kKinds / sizeof kKinds[0])];
  size_t points = data[1] % 4;
  data += 2;
  size -= 2;
  GpuClock clock;
  for (size_t i = 0; i < points && size >= sizeof(ClockPoint); ++i) {
    ClockPoint p;
    std::memcpy(&p, data, sizeof p);
    clock.add(p);
    (void)cupti::clock_record(p);
    data += sizeof p;
    size -= sizeof p;
  }
  std::string name;
  std::optional<ht_gpu_activity> a;
  switch (kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      a = convert<CUpti_ActivityKernel10>(kind, data, size, clock, &name);
      break;
    case CUPTI_ACTIVITY_KIND_MEMCPY:
      a = convert<CUpti_ActivityMemcpy6>(kind, data, size, clock, &name);
      break;
    case CUPTI_ACTIVITY_KIND_MEMSET:
      a = convert<CUpti_ActivityMemset4>(kind, data, size, clock, &name);
      break;
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
      a = convert<CUpti_ActivitySynchronization2>(kind, data, size, clock, &name);
      break;
    case CUPTI_ACTIVITY_KIND_DRIVER:
    case CUPTI_ACTIVITY_KIND_RUNTIME:
      a = convert<CUpti_ActivityAPI>(kind, data, size, clock, &name);
      break;
    default:
      a = convert<CUpti_Activity>(kind, data, size, clock, &name);
      break;
  }
  if (!a) {
    a = cupti::status_record(fuzz::as_text(data, size));
  }
  fuzz::check(a->name[sizeof a->name - 1] == '\0');
  // The hangtrace side: the record as the ring buffer delivers it.
  ht_gpu_activity_event ev;
  std::memset(&ev, 0, sizeof ev);
  ev.hdr.type = HT_EV_GPU_ACTIVITY;
  ev.hdr.size = sizeof ev;
  ev.hdr.ts_ns = a->end_ns;
  ev.hdr.tgid = a->pid ? a->pid : 1;
  ev.hdr.tid = a->tid ? a->tid : 1;
  ev.act = *a;
  auto e = decode_event(&ev, sizeof ev);
  fuzz::check(static_cast<bool>(e));
  Aggregator agg;
  agg.add(*e);
  (void)agg.finish(0, a->end_ns, 1, 0);
  return 0;
}
