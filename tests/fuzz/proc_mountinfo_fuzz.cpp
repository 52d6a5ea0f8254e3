// /proc/PID/mountinfo (parse_mountinfo, parse_mountinfo_line,
// unescape_mount_field) and what is derived from a mount: mount_option,
// fuse_connection, mount_server, is_fuse_fstype, is_network_fstype
// (userspace/core/procfs/mountinfo.cpp). Seeds: this machine's mountinfo
// (overlay, cgroup2, proc, tmpfs ...), and hand-written NFS/CIFS/Lustre/FUSE
// lines from tests/unit fixtures.
#include "fuzz_support.h"
#include "hangtrace/procfs.h"

using namespace hangtrace;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text = fuzz::as_text(data, size);
  procfs::MountTable table = procfs::parse_mountinfo(text);
  fuzz::check(table.mounts.size() <= procfs::kMaxMountEntries);
  fuzz::check(table.mounts.size() + table.malformed <= size + 1);
  for (const MountEntry& m : table.mounts) {
    fuzz::check(m.mount_point.size() <= size && m.super_options.size() <= size);
    (void)procfs::mount_option(m.super_options, "addr");
    (void)procfs::mount_option(m.mount_options, "ro");
    (void)procfs::fuse_connection(m);
    fuzz::check(procfs::mount_server(m).size() <= 2 * size + 8);
    (void)procfs::is_fuse_fstype(m.fstype);
    (void)procfs::is_network_fstype(m.fstype);
  }
  size_t nl = text.find('\n');
  (void)procfs::parse_mountinfo_line(text.substr(0, nl));
  fuzz::check(procfs::unescape_mount_field(text).size() <= size);
  return 0;
}
