// One factory per live-tracing concern (bpf/<concern>.bpf.c).
#pragma once

#include <memory>
#include <vector>

#include "live_tracer.h"

namespace hangtrace {

std::unique_ptr<TracerModule> make_process_module();
std::unique_ptr<TracerModule> make_syscalls_module();
std::unique_ptr<TracerModule> make_sched_module();
std::unique_ptr<TracerModule> make_shm_module();
std::unique_ptr<TracerModule> make_net_module();
std::unique_ptr<TracerModule> make_memory_module();
// Loaded at start, attached later: to each libcuda / libnccl a traced process maps.
std::unique_ptr<TracerModule> make_gpu_module();
std::unique_ptr<TracerModule> make_cupti_module();
// Off unless LiveOptions::sample_hz: the on-CPU sampler's perf events.
std::unique_ptr<TracerModule> make_cpu_samples_module();

// Every concern, in load order (process first: it follows forks).
std::vector<std::unique_ptr<TracerModule>> all_live_modules();

}  // namespace hangtrace
