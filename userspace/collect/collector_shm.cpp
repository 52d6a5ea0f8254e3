// The collector's /dev/shm, as the target sees it (its mount namespace): how
// full it is, its largest segments (unlinked ones still mapped included) and
// which processes of the tree map or hold each.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>

#include "collector_pass.h"

namespace hangtrace::collector_pass {

namespace {

constexpr size_t kLargestShmSegments = 10;
constexpr size_t kMaxShmEntries = 1 << 17;

}  // namespace

void Collector::collect_shm() {
  ShmInfo& shm = snap_.shm;
  shm.mount_path = proc_.root_path(proc_id(target_), "/dev/shm");
  auto usage = procfs::filesystem_usage(shm.mount_path);
  auto mount = usage ? procfs::stat_file(shm.mount_path) : Result<procfs::FileId>(make_error(usage.error()));
  if (!mount) {
    limitation("no /dev/shm usage: " + mount.error());
    return;
  }
  shm.available = true;
  shm.size_bytes = usage->size_bytes;
  shm.used_bytes = usage->used_bytes;
  const uint32_t shm_major = mount->dev_major, shm_minor = mount->dev_minor;

  struct Segment {
    ShmSegment info;
    uint64_t inode;
  };
  std::vector<Segment> segments;
  if (DIR* dir = opendir(shm.mount_path.c_str())) {
    while (dirent* entry = readdir(dir)) {
      if (segments.size() >= kMaxShmEntries) break;
      std::string name = entry->d_name;
      if (name == "." || name == "..") continue;
      struct stat st {};
      if (fstatat(dirfd(dir), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
      Segment s;
      s.info.name = name;
      s.info.size_bytes = static_cast<uint64_t>(st.st_size);
      s.info.allocated_bytes = static_cast<uint64_t>(st.st_blocks) * 512;
      s.inode = st.st_ino;
      segments.push_back(std::move(s));
    }
    closedir(dir);
  } else {
    limitation(fmt::format("/dev/shm files not listed: failed to open {}: {}", shm.mount_path,
                           std::strerror(errno)));
  }
  // Who holds or maps them: maps give dev+inode; fds need a stat of the link.
  std::map<uint64_t, std::set<int>> holders;     // shm inode -> pids
  std::map<uint64_t, uint64_t> unlinked_extent;  // inode -> bytes mapped
  for (const auto& p : snap_.processes) {
    for (const auto& m : p.maps) {
      if (m.dev_major != shm_major || m.dev_minor != shm_minor || m.path.rfind("/dev/shm/", 0) != 0) continue;
      holders[m.inode].insert(p.pid);
      if (m.path.size() > 10 && m.path.compare(m.path.size() - 10, 10, " (deleted)") == 0) {
        // Count each segment once, as far as any process maps it.
        uint64_t& extent = unlinked_extent[m.inode];
        extent = std::max(extent, m.offset + (m.end - m.start));
      }
    }
    for (const auto& f : p.fds) {
      if (f.kind != FdKind::ShmFile) continue;
      auto file = proc_.fd_file(proc_id(p.pid), f.fd);
      if (file && file->dev_major == shm_major && file->dev_minor == shm_minor)
        holders[file->inode].insert(p.pid);
    }
  }
  // Unlinked segments still mapped (how torch shares tensors between workers
  // and main) fill the tmpfs as much as named ones: list them too.
  std::map<uint64_t, std::string> unlinked_names;
  for (const auto& p : snap_.processes)
    for (const auto& m : p.maps)
      if (unlinked_extent.count(m.inode) && !unlinked_names.count(m.inode))
        unlinked_names[m.inode] = m.path.substr(9);  // "name (deleted)"
  for (const auto& [inode, bytes] : unlinked_extent) {
    shm.unlinked_mapped_bytes += bytes;
    Segment s;
    s.info.name = unlinked_names[inode];
    s.info.size_bytes = s.info.allocated_bytes = bytes;
    s.inode = inode;
    segments.push_back(std::move(s));
  }
  std::sort(segments.begin(), segments.end(), [](const Segment& a, const Segment& b) {
    if (a.info.allocated_bytes != b.info.allocated_bytes)
      return a.info.allocated_bytes > b.info.allocated_bytes;
    return a.info.size_bytes > b.info.size_bytes;
  });
  if (segments.size() > kLargestShmSegments) segments.resize(kLargestShmSegments);

  for (auto& s : segments) {
    if (auto it = holders.find(s.inode); it != holders.end())
      s.info.mapped_by.assign(it->second.begin(), it->second.end());
    shm.largest.push_back(std::move(s.info));
  }
}

}  // namespace hangtrace::collector_pass
