// /proc/PID/cgroup: the controller paths (cgroup_controller_path,
// memory_cgroup_path; userspace/core/live.cpp), the container and pod
// (container_from_cgroup) and the freezer holding a process
// (frozen_cgroup_of, pointed at a cgroup root that does not exist, so only
// the text is parsed; userspace/core/jobs/). Seeds: cgroup v2 of this
// machine, v1 and hybrid hierarchies, docker / containerd / cri-o / podman
// paths.
#include "fuzz_support.h"
#include "hangtrace/jobs.h"
#include "hangtrace/live.h"

using namespace hangtrace;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(fuzz::as_text(data, size));
  bool v2 = false;
  if (auto p = memory_cgroup_path(text, &v2)) fuzz::check(p->size() <= size);
  for (const char* controller : {"cpu", "freezer", "pids", "cpuacct"})
    if (auto p = cgroup_controller_path(text, controller, &v2)) fuzz::check(p->size() <= size);
  jobs::ContainerIdentity id = jobs::container_from_cgroup(text);
  fuzz::check(id.id.size() <= size && id.pod_uid.size() <= size + 8);
  (void)jobs::frozen_cgroup_of(text, "/nonexistent-hangtrace-fuzz-root");
  return 0;
}
