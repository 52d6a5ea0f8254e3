// /proc/PID/mountinfo: this machine's table, network and FUSE mounts modelled
// on real ones (no NFS server here), the kernel's escapes, hostile lines (no
// separator, huge, garbage numbers) and what a mount says about its server.
#include <gtest/gtest.h>

#include <string>

#include "fixture_file.h"
#include "hangtrace/procfs.h"

namespace hangtrace::procfs {
namespace {

using hangtrace::testing::for_each_truncation;
using hangtrace::testing::procfs_fixture;

const MountEntry* at(const MountTable& t, const std::string& mount_point) {
  for (const auto& m : t.mounts)
    if (m.mount_point == mount_point) return &m;
  return nullptr;
}

TEST(Mountinfo, ThisMachinesTableParsesWhole) {
  std::string text = procfs_fixture("mountinfo_host");
  MountTable t = parse_mountinfo(text);
  EXPECT_EQ(t.malformed, 0u);
  EXPECT_FALSE(t.truncated);
  ASSERT_EQ(t.mounts.size(), 20u);
  const MountEntry* root = at(t, "/");
  ASSERT_NE(root, nullptr);
  EXPECT_EQ(root->mount_id, 27);
  EXPECT_EQ(root->parent_id, 1);
  EXPECT_EQ(root->dev_major, 254u);
  EXPECT_EQ(root->dev_minor, 0u);
  EXPECT_EQ(root->fstype, "ext4");
  EXPECT_EQ(root->source, "/dev/vda");
  EXPECT_EQ(root->mount_options, "rw,relatime");
  EXPECT_EQ(mount_server(*root), "");
  EXPECT_FALSE(fuse_connection(*root));
  // Every prefix parses or is skipped as malformed, never a crash.
  for_each_truncation(text, [](std::string_view s) { (void)parse_mountinfo(s); });
}

TEST(Mountinfo, FuseMountNamesItsConnection) {
  MountTable t = parse_mountinfo(procfs_fixture("mountinfo_remote"));
  EXPECT_EQ(t.malformed, 0u);
  const MountEntry* m = at(t, "/mnt/data");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->fstype, "fuse.datasetfs");
  EXPECT_EQ(m->source, "datasetfs");
  EXPECT_TRUE(is_fuse_fstype(m->fstype));
  EXPECT_FALSE(is_network_fstype(m->fstype));
  EXPECT_EQ(fuse_connection(*m), 53u);
  EXPECT_EQ(mount_server(*m), "");
  // fuseblk sits on a block device: the mount does not tell its connection.
  const MountEntry* usb = at(t, "/mnt/usb");
  ASSERT_NE(usb, nullptr);
  EXPECT_TRUE(is_fuse_fstype(usb->fstype));
  EXPECT_FALSE(fuse_connection(*usb));
}

TEST(Mountinfo, NetworkFilesystemsNameTheirServer) {
  MountTable t = parse_mountinfo(procfs_fixture("mountinfo_remote"));
  const MountEntry* nfs = at(t, "/mnt/nfs");
  ASSERT_NE(nfs, nullptr);
  EXPECT_EQ(nfs->fstype, "nfs4");
  EXPECT_EQ(nfs->source, "fileserver.example.com:/export/datasets");
  EXPECT_EQ(mount_option(nfs->super_options, "addr"), "10.0.0.5");
  EXPECT_EQ(mount_option(nfs->super_options, "vers"), "4.2");
  EXPECT_EQ(mount_option(nfs->super_options, "hard"), "");  // a flag, not key=value
  EXPECT_EQ(mount_server(*nfs), "fileserver.example.com (10.0.0.5)");
  const MountEntry* cifs = at(t, "/mnt/cifs");
  ASSERT_NE(cifs, nullptr);
  EXPECT_EQ(mount_server(*cifs), "winbox (192.168.1.20)");
  const MountEntry* lustre = at(t, "/lustre/scratch");
  ASSERT_NE(lustre, nullptr);
  EXPECT_EQ(mount_server(*lustre), "10.1.0.1@tcp:10.1.0.2@tcp");
  const MountEntry* v6 = at(t, "/mnt/v6");
  ASSERT_NE(v6, nullptr);
  EXPECT_EQ(mount_server(*v6), "fd00::5");
}

TEST(Mountinfo, EscapesAreUndone) {
  MountTable t = parse_mountinfo(procfs_fixture("mountinfo_remote"));
  const MountEntry* m = at(t, "/mnt/with space\ttab");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->root, "/datasets");
  EXPECT_EQ(m->fstype, "fuse.sshfs");
  EXPECT_EQ(mount_server(*m), "gpu-host");  // user@ dropped
  EXPECT_EQ(unescape_mount_field("a\\134b\\012c"), "a\\b\nc");
  EXPECT_EQ(unescape_mount_field("trailing\\04"), "trailing\\04");    // cut escape kept as is
  EXPECT_EQ(unescape_mount_field("\\000nul\\999"), "\\000nul\\999");  // NUL and non-octal kept
}

TEST(Mountinfo, HostileLinesAreSkippedNotTrusted) {
  std::string huge_point(kMaxMountinfoLineBytes, 'a');
  std::string text =
      "no separator here at all\n"
      "x 27 0:5 / /bad rw - tmpfs tmpfs rw\n"            // id not a number
      "40 27 0:5 / /nosep rw shared:1 tmpfs tmpfs rw\n"  // no " - "
      "41 27 zz / /baddev rw - tmpfs tmpfs rw\n"         // device
      "42 27 0:5 / /nofstype rw -\n"                     // nothing after "-"
      "43 27 0:5 / /" +
      huge_point + " rw - tmpfs tmpfs rw\n" +  // longer than any real line
      "44 27 0:5 / /ok rw - tmpfs tmpfs rw\n"
      "45 27 0:99999999999 / /overflow rw - tmpfs tmpfs rw\n";  // minor out of range
  MountTable t = parse_mountinfo(text);
  ASSERT_EQ(t.mounts.size(), 1u);
  EXPECT_EQ(t.mounts[0].mount_point, "/ok");
  EXPECT_EQ(t.malformed, 7u);
  EXPECT_FALSE(parse_mountinfo_line("43 27 0:5 / /" + huge_point + " rw - tmpfs tmpfs rw"));
}

TEST(Mountinfo, ALongButRealLineParses) {
  // overlayfs of a container image: a few KiB of lowerdir paths.
  std::string lower;
  for (int i = 0; i < 200; ++i)
    lower += (i ? ":" : "") + std::string("/var/lib/containerd/snapshots/") + std::to_string(i) + "/fs";
  std::string line =
      "900 27 0:80 / /run/c rw,relatime - overlay overlay rw,lowerdir=" + lower + ",upperdir=/u,workdir=/w";
  auto m = parse_mountinfo_line(line);
  ASSERT_TRUE(m) << m.error();
  EXPECT_EQ(m->fstype, "overlay");
  EXPECT_EQ(mount_option(m->super_options, "upperdir"), "/u");
  EXPECT_EQ(mount_option(m->super_options, "lowerdir"), lower);
}

TEST(Mountinfo, TheNumberOfMountsIsBounded) {
  std::string text;
  for (size_t i = 0; i < kMaxMountEntries + 5; ++i)
    text += std::to_string(i + 1) + " 1 0:5 / /m" + std::to_string(i) + " rw - tmpfs tmpfs rw\n";
  MountTable t = parse_mountinfo(text);
  EXPECT_EQ(t.mounts.size(), kMaxMountEntries);
  EXPECT_TRUE(t.truncated);
}

}  // namespace
}  // namespace hangtrace::procfs
