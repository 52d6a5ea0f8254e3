#include "live_modules.h"

namespace hangtrace {

std::vector<std::unique_ptr<TracerModule>> all_live_modules() {
  std::vector<std::unique_ptr<TracerModule>> modules;
  modules.push_back(make_process_module());
  modules.push_back(make_syscalls_module());
  modules.push_back(make_sched_module());
  modules.push_back(make_shm_module());
  modules.push_back(make_net_module());
  modules.push_back(make_memory_module());
  modules.push_back(make_gpu_module());
  modules.push_back(make_cupti_module());
  modules.push_back(make_cpu_samples_module());
  return modules;
}

}  // namespace hangtrace
