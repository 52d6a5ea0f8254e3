#include "process_meta.h"

#include <string_view>

#include "hangtrace/daemon.h"

namespace hangtrace {
namespace {

// A cgroup control file's limit ("max" and v1's huge "no limit" are none).
std::optional<uint64_t> read_limit(const std::string& path) {
  auto text = procfs::read_text_file(path, nullptr, 64);  // a number, or "max"
  if (!text || text->empty() || text->rfind("max", 0) == 0) return std::nullopt;
  try {
    uint64_t v = std::stoull(*text);
    // cgroup v1 reports "no limit" as a huge page-aligned number.
    if (v >= (1ull << 62)) return std::nullopt;
    return v;
  } catch (...) {
    return std::nullopt;
  }
}

}  // namespace

ProcessMeta read_process_meta(int pid, const procfs::ProcFs& proc, const std::string& cgroup_root) {
  ProcessMeta m;
  m.pid = pid;
  if (auto comm = proc.comm(pid)) m.comm = std::move(*comm);
  if (auto cmdline = proc.cmdline(pid)) m.cmdline = std::move(*cmdline);
  // Trailing blanks go as well: the last argument's, like the NULs after it.
  while (!m.cmdline.empty() && m.cmdline.back() == ' ') m.cmdline.pop_back();
  // Kept for every process a traced job forks, whose forks share a MiB of
  // arguments at no cost to their owner: what is shown of it, cut.
  if (m.cmdline.size() > daemon::kMaxKeptCmdlineBytes)
    m.cmdline = m.cmdline.substr(0, daemon::kMaxKeptCmdlineBytes) + " ...";
  if (auto ns = proc.namespace_inode(pid, "mnt")) m.mount_ns = *ns;
  bool v2 = false;
  auto cgroup = proc.cgroup(pid);
  if (auto path = memory_cgroup_path(cgroup ? *cgroup : std::string(), &v2)) {
    m.memory_cgroup = *path;
    m.memory_limit_bytes = v2 ? read_limit(cgroup_root + "/unified" + *path + "/memory.max")
                              : read_limit(cgroup_root + "/memory" + *path + "/memory.limit_in_bytes");
    if (v2 && !m.memory_limit_bytes) m.memory_limit_bytes = read_limit(cgroup_root + *path + "/memory.max");
  }
  return m;
}

std::optional<std::pair<uint64_t, uint64_t>> shm_usage_of(int pid, const procfs::ProcFs& proc) {
  auto usage = proc.filesystem_usage(pid, "/dev/shm");
  if (!usage) return std::nullopt;
  return std::make_pair(usage->used_bytes, usage->size_bytes);
}

}  // namespace hangtrace
