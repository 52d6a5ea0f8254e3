#include "process_meta.h"

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <fmt/format.h>

#include <fstream>
#include <sstream>

namespace hangtrace {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::optional<uint64_t> read_limit(const std::string& path) {
  std::string text = read_file(path);
  if (text.empty() || text.rfind("max", 0) == 0) return std::nullopt;
  try {
    uint64_t v = std::stoull(text);
    // cgroup v1 reports "no limit" as a huge page-aligned number.
    if (v >= (1ull << 62)) return std::nullopt;
    return v;
  } catch (...) {
    return std::nullopt;
  }
}

}  // namespace

ProcessMeta read_process_meta(int pid, const std::string& proc_root, const std::string& cgroup_root) {
  ProcessMeta m;
  m.pid = pid;
  std::string base = fmt::format("{}/{}", proc_root, pid);
  m.comm = read_file(base + "/comm");
  if (!m.comm.empty() && m.comm.back() == '\n') m.comm.pop_back();
  m.cmdline = read_file(base + "/cmdline");
  for (auto& c : m.cmdline)
    if (c == '\0') c = ' ';
  while (!m.cmdline.empty() && m.cmdline.back() == ' ') m.cmdline.pop_back();
  struct stat ns {};
  if (stat((base + "/ns/mnt").c_str(), &ns) == 0) m.mount_ns = ns.st_ino;
  bool v2 = false;
  if (auto path = memory_cgroup_path(read_file(base + "/cgroup"), &v2)) {
    m.memory_cgroup = *path;
    m.memory_limit_bytes = v2 ? read_limit(cgroup_root + "/unified" + *path + "/memory.max")
                              : read_limit(cgroup_root + "/memory" + *path + "/memory.limit_in_bytes");
    if (v2 && !m.memory_limit_bytes) m.memory_limit_bytes = read_limit(cgroup_root + *path + "/memory.max");
  }
  return m;
}

std::optional<std::pair<uint64_t, uint64_t>> shm_usage_of(int pid, const std::string& proc_root) {
  struct statvfs vfs {};
  if (statvfs(fmt::format("{}/{}/root/dev/shm", proc_root, pid).c_str(), &vfs) != 0) return std::nullopt;
  uint64_t size = static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize;
  uint64_t used = static_cast<uint64_t>(vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize;
  return std::make_pair(used, size);
}

}  // namespace hangtrace
