// The parser of /proc/PID/mountinfo, and what a mount says about the
// filesystem behind it: FUSE or not, its connection, the server of a network
// filesystem.
#include <fmt/format.h>

#include "fields.h"
#include "hangtrace/procfs.h"

namespace hangtrace::procfs {

using namespace fields;

namespace {

bool is_octal(char c) { return c >= '0' && c <= '7'; }

// "major:minor" in decimal (unlike maps, where it is hex).
bool parse_device(std::string_view dev, uint32_t& major, uint32_t& minor) {
  size_t colon = dev.find(':');
  if (colon == std::string_view::npos) return false;
  auto ma = parse_int<uint32_t>(dev.substr(0, colon)), mi = parse_int<uint32_t>(dev.substr(colon + 1));
  if (!ma || !mi) return false;
  major = *ma;
  minor = *mi;
  return true;
}

}  // namespace

std::string unescape_mount_field(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && is_octal(s[i + 1]) && is_octal(s[i + 2]) && is_octal(s[i + 3])) {
      int v = (s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0');
      if (v > 0 && v < 256) {
        out.push_back(static_cast<char>(v));
        i += 3;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

Result<MountEntry> parse_mountinfo_line(std::string_view line) {
  // "ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS"
  if (line.size() > kMaxMountinfoLineBytes)
    return parse_error("mountinfo line", fmt::format("{} bytes long", line.size()));
  MountEntry m;
  std::string_view rest = line;
  auto id = parse_int<int>(next_field(rest)), parent = parse_int<int>(next_field(rest));
  std::string_view dev = next_field(rest), root = next_field(rest), point = next_field(rest),
                   options = next_field(rest);
  if (!id || !parent || !parse_device(dev, m.dev_major, m.dev_minor) || root.empty() || point.empty() ||
      options.empty())
    return parse_error("mountinfo line", fmt::format("'{}'", excerpt(line)));
  // Optional fields ("shared:1 master:2") up to the lone "-"; bounded by the line.
  for (;;) {
    std::string_view f = next_field(rest);
    if (f.empty())
      return parse_error("mountinfo line", fmt::format("no ' - ' separator: '{}'", excerpt(line)));
    if (f == "-") break;
  }
  std::string_view fstype = next_field(rest), source = next_field(rest), super = next_field(rest);
  if (fstype.empty() || super.empty())  // a source may be empty only as "none"; the kernel prints something
    return parse_error("mountinfo line", fmt::format("'{}'", excerpt(line)));
  m.mount_id = *id;
  m.parent_id = *parent;
  m.root = unescape_mount_field(root);
  m.mount_point = unescape_mount_field(point);
  m.mount_options = std::string(options);
  m.fstype = unescape_mount_field(fstype);
  m.source = unescape_mount_field(source);
  m.super_options = unescape_mount_field(super);
  return m;
}

MountTable parse_mountinfo(std::string_view text) {
  MountTable t;
  for (auto line : split_lines(text)) {
    if (trim(line).empty()) continue;
    if (t.mounts.size() >= kMaxMountEntries) {
      t.truncated = true;
      break;
    }
    auto m = parse_mountinfo_line(line);
    if (!m) {
      ++t.malformed;
      continue;
    }
    t.mounts.push_back(std::move(*m));
  }
  return t;
}

std::string mount_option(std::string_view options, std::string_view key) {
  while (!options.empty()) {
    size_t comma = options.find(',');
    std::string_view opt = options.substr(0, comma);
    if (opt.size() > key.size() && opt.substr(0, key.size()) == key && opt[key.size()] == '=')
      return std::string(opt.substr(key.size() + 1));
    if (comma == std::string_view::npos) break;
    options.remove_prefix(comma + 1);
  }
  return {};
}

bool is_fuse_fstype(std::string_view fstype) {
  return fstype == "fuse" || fstype == "fuseblk" || starts_with(fstype, "fuse.") ||
         starts_with(fstype, "fuseblk.");
}

bool is_network_fstype(std::string_view fstype) {
  for (std::string_view t :
       {"nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "ceph", "glusterfs", "9p", "afs", "beegfs", "gpfs",
        "fuse.sshfs", "fuse.glusterfs", "fuse.s3fs", "fuse.gcsfuse", "fuse.ceph-fuse", "fuse.rclone"})
    if (fstype == t) return true;
  return false;
}

std::optional<uint32_t> fuse_connection(const MountEntry& m) {
  // A fuse superblock has an anonymous device (major 0) whose number names
  // its connection in /sys/fs/fuse/connections; a fuseblk one sits on a real
  // block device and its connection is not told by the mount.
  if (!is_fuse_fstype(m.fstype) || starts_with(m.fstype, "fuseblk") || m.dev_major != 0) return std::nullopt;
  return m.dev_minor;
}

std::string mount_server(const MountEntry& m) {
  if (!is_network_fstype(m.fstype)) return {};
  std::string addr = mount_option(m.super_options, "addr");
  if (addr.empty()) addr = mount_option(m.mount_options, "addr");
  std::string_view src = m.source;
  std::string host;
  if (starts_with(src, "//")) {  // CIFS: //host/share
    src.remove_prefix(2);
    host = std::string(src.substr(0, src.find('/')));
  } else if (size_t colon = src.find(":/"); colon != std::string_view::npos) {
    // NFS "host:/export", "[v6]:/export"; Lustre "nid@tcp:/fs"; sshfs "user@host:/path"
    host = std::string(src.substr(0, colon));
    if (!starts_with(m.fstype, "lustre") && host.find('@') != std::string::npos)
      host = host.substr(host.find('@') + 1);
  } else if (size_t colon1 = src.find(':'); colon1 != std::string_view::npos) {
    host = std::string(src.substr(0, colon1));  // "host:path"
  }
  if (host.size() > 256) host.resize(256);
  if (addr.empty()) return host;
  if (host.empty() || host == addr || host == "[" + addr + "]") return addr;
  return fmt::format("{} ({})", host, addr);
}

}  // namespace hangtrace::procfs
