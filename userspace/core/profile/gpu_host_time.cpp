#include "gpu_host_time.h"

#include <algorithm>
#include <map>

#include "hangtrace/gpu.h"

namespace hangtrace {

GpuHostTime gpu_host_time(const LiveObservation& live, int tid) {
  GpuHostTime out;
  std::map<uint32_t, uint64_t> by_fn;
  if (auto h = live.gpu_host_waits.find(tid); h != live.gpu_host_waits.end()) {
    out.returned_ns = h->second.ns;
    out.calls = h->second.calls;
    by_fn = h->second.ns_by_fn;
  }
  for (const GpuThreadState& t : live.gpu.threads)
    if (t.tid == tid && t.in_fn && gpu_fn_is_host_wait(t.in_fn) && t.in_since_ns < live.end_ns) {
      const uint64_t open = live.end_ns - std::max(t.in_since_ns, live.start_ns);
      out.open_ns += open;
      by_fn[t.in_fn] += open;
    }
  uint64_t best = 0;
  for (const auto& [fn, ns] : by_fn)
    if (ns > best) {
      best = ns;
      out.what = gpu_fn_name(fn);
    }
  return out;
}

}  // namespace hangtrace
