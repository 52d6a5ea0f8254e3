// What a live process says about itself that the report may need after it is
// gone: command line, memory cgroup and its limit (an OOM victim's cgroup can
// no longer be read once it is dead), and the /dev/shm it sees.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "hangtrace/live.h"
#include "hangtrace/procfs.h"

namespace hangtrace {

ProcessMeta read_process_meta(int pid, const procfs::ProcFs& proc = procfs::ProcFs(),
                              const std::string& cgroup_root = "/sys/fs/cgroup");

// {used, size} bytes of the /dev/shm that `pid` sees (through its mount namespace).
std::optional<std::pair<uint64_t, uint64_t>> shm_usage_of(int pid,
                                                          const procfs::ProcFs& proc = procfs::ProcFs());

}  // namespace hangtrace
