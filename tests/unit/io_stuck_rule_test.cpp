// The io-stuck rule on hand-built snapshots: DataLoader workers stuck reading
// a file on a FUSE mount whose daemon does not answer (one in the FUSE
// request, interruptible, one in D behind it on the page lock), a read stuck
// on an NFS mount, and the waits that are not stuck (short, moving, or a
// plain interruptible read of a local file).
#include <poll.h>

#include <gtest/gtest.h>

#include "hangtrace/analysis.h"
#include "hangtrace/procfs.h"
#include "hangtrace/snapshot_json.h"
#include "snapshot_builder.h"

namespace hangtrace {
namespace {

using testing::of_kind;
using testing::SnapshotBuilder;

void stack(ThreadInfo& t, std::initializer_list<const char*> frames) {
  for (const char* f : frames)
    t.kernel->stack.push_back({0xffffffff81000000ull, std::string(f) + "+0x1c/0x80"});
}

void file_fd(SnapshotBuilder& b, int pid, int fd, const std::string& path, int mnt_id,
             FdKind kind = FdKind::File) {
  FdEntry f;
  f.fd = fd;
  f.kind = kind;
  f.link = path;
  f.mnt_id = mnt_id;
  f.flags = O_RDONLY;
  b.find(pid)->fds.push_back(f);
}

MountEntry mount_line(const std::string& line) {
  auto m = procfs::parse_mountinfo_line(line);
  EXPECT_TRUE(m) << m.error();
  return *m;
}

const char* kFuseLine =
    "112 27 0:53 / /mnt/data rw,nosuid,nodev,relatime - fuse.datasetfs datasetfs rw,user_id=0,group_id=0";
const char* kNfsLine =
    "113 27 0:54 / /mnt/nfs rw,relatime - nfs4 fileserver:/export rw,vers=4.2,hard,proto=tcp,addr=10.0.0.5";

// main 100 polls the workers' result pipe; workers 101 and 102 read
// /mnt/data/shard-3.bin (or `path` on `mount`); `daemon` 412 holds /dev/fuse.
SnapshotBuilder loader(const std::string& mount, const std::string& path, bool daemon,
                       double blocked_s = 60.0) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  ThreadInfo& main = b.thread(100, 100);
  testing::in_syscall(main, HT_NR_poll, {0x7000, 1, 5000});
  main.memory.poll_fds = {{5, POLLIN}};
  main.memory.timeout_s = 5.0;
  b.fd(100, 5, FdKind::Pipe, 7, O_RDONLY, 0);
  b.fd(100, 6, FdKind::Pipe, 7, O_WRONLY);
  MountEntry m = mount_line(mount);
  for (int pid : {101, 102}) {
    b.proc(pid, 100, ProcessRole::Descendant, "pt_data_worker");
    b.fd(pid, 6, FdKind::Pipe, 7, O_WRONLY);
    file_fd(b, pid, 9, path, m.mount_id);
    b.find(pid)->mounts.push_back(m);
  }
  ThreadInfo& w1 = b.thread(101, 101, 'S', blocked_s);
  testing::in_syscall(w1, HT_NR_read, {9, 0x7100, 1 << 20});
  stack(w1, {"request_wait_answer", "fuse_simple_request", "fuse_do_readpage", "filemap_read", "vfs_read"});
  ThreadInfo& w2 = b.thread(102, 102, 'D', blocked_s);
  testing::in_syscall(w2, HT_NR_read, {9, 0x7100, 1 << 20});
  stack(w2, {"__schedule", "io_schedule", "folio_wait_bit_common", "filemap_read", "vfs_read"});
  if (daemon) {
    b.proc(412, 1, ProcessRole::Peer, "datasetfs");
    b.find(412)->cmdline = "python3 datasetfs.py /mnt/data";
    file_fd(b, 412, 3, "/dev/fuse", 24, FdKind::Device);
    ThreadInfo& d = b.thread(412, 412);
    testing::in_syscall(d, HT_NR_read, {3, 0x8000, 1 << 20});
    stack(d, {"fuse_dev_do_read", "fuse_dev_read", "vfs_read"});
  }
  return b;
}

TEST(IoStuckRule, FuseWorkersNameTheFileTheMountAndTheDaemon) {
  Diagnosis d = diagnose(loader(kFuseLine, "/mnt/data/shard-3.bin", true).s);
  auto found = of_kind(d, FindingKind::IoStuck);
  ASSERT_EQ(found.size(), 1u);
  const Finding& f = *found.front();
  EXPECT_EQ(f.severity, Severity::Critical);
  EXPECT_EQ(f.tids, (std::vector<int>{101, 102}));
  EXPECT_EQ(f.pids, (std::vector<int>{101, 102}));
  EXPECT_EQ(f.details["mount_point"], "/mnt/data");
  EXPECT_EQ(f.details["fstype"], "fuse.datasetfs");
  EXPECT_EQ(f.details["source"], "datasetfs");
  EXPECT_EQ(f.details["file"], "/mnt/data/shard-3.bin");
  EXPECT_EQ(f.details["fuse_connection"], 53);
  EXPECT_EQ(f.details["server_pids"], (std::vector<int>{412}));
  EXPECT_NE(f.summary.find("read of /mnt/data/shard-3.bin on fuse.datasetfs /mnt/data"), std::string::npos)
      << f.summary;
  EXPECT_NE(f.summary.find("served by peer 412 (datasetfs)"), std::string::npos) << f.summary;
  // main -> worker -> the read, served by the daemon, which itself reads /dev/fuse.
  ASSERT_GE(f.chain.size(), 4u);
  EXPECT_EQ(f.chain.front().from, "main 100 (python3)");
  bool via_worker = false, served = false, daemon_wait = false;
  for (const auto& step : f.chain) {
    if (step.to.find("worker 10") != std::string::npos) via_worker = true;
    if (step.edge == "can be released by" && step.to.find("peer 412") != std::string::npos) served = true;
    if (step.from.find("peer 412") != std::string::npos && step.to.find("/dev/fuse") != std::string::npos)
      daemon_wait = true;
  }
  EXPECT_TRUE(via_worker && served && daemon_wait);
  bool fusermount = false;
  for (const auto& a : f.advice)
    fusermount = fusermount || a.find("fusermount -u -z /mnt/data") != std::string::npos;
  EXPECT_TRUE(fusermount);
  EXPECT_EQ(d.findings.front().kind, FindingKind::IoStuck);
  EXPECT_EQ(exit_status_for(d), 2);
  // The graph: the D worker is a disk wait on the same object the S one waits on.
  const ThreadWait& w2 = d.graph.threads.at(102);
  EXPECT_EQ(w2.activity, Activity::DiskWait);
  ASSERT_EQ(w2.objects.size(), 1u);
  EXPECT_EQ(d.graph.threads.at(101).objects, w2.objects);
  EXPECT_EQ(releasers_of(d.graph, d.graph.objects.at(w2.objects[0])), (std::vector<int>{412}));
}

TEST(IoStuckRule, MountsAndMountIdsSurviveASnapshotFile) {
  Snapshot s = loader(kFuseLine, "/mnt/data/shard-3.bin", true).s;
  auto back = snapshot_from_json(snapshot_to_json(s));
  ASSERT_TRUE(back) << back.error();
  const ProcessInfo* w = back->process(101);
  ASSERT_NE(w, nullptr);
  ASSERT_EQ(w->mounts.size(), 1u);
  EXPECT_EQ(w->mounts[0].mount_point, "/mnt/data");
  EXPECT_EQ(w->mounts[0].dev_minor, 53u);
  EXPECT_EQ(w->mounts[0].super_options, "rw,user_id=0,group_id=0");
  EXPECT_EQ(w->fds.back().mnt_id, 112);
  EXPECT_EQ(of_kind(diagnose(*back), FindingKind::IoStuck).size(), 1u);
}

TEST(IoStuckRule, WithoutADaemonInViewTheMountIsStillNamed) {
  Diagnosis d = diagnose(loader(kFuseLine, "/mnt/data/shard-3.bin", false).s);
  auto found = of_kind(d, FindingKind::IoStuck);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_TRUE(found.front()->details["server_pids"].empty());
  bool note = false;
  for (const auto& e : found.front()->evidence) note = note || e.find("holds /dev/fuse") != std::string::npos;
  EXPECT_TRUE(note);
}

TEST(IoStuckRule, NfsReadNamesTheServer) {
  Diagnosis d = diagnose(loader(kNfsLine, "/mnt/nfs/train/shard-0.bin", false).s);
  auto found = of_kind(d, FindingKind::IoStuck);
  ASSERT_EQ(found.size(), 1u);
  const Finding& f = *found.front();
  EXPECT_EQ(f.severity, Severity::Critical);
  EXPECT_EQ(f.details["server"], "fileserver (10.0.0.5)");
  EXPECT_EQ(f.details["fstype"], "nfs4");
  EXPECT_NE(f.summary.find("server fileserver (10.0.0.5)"), std::string::npos) << f.summary;
  bool server_advice = false;
  for (const auto& a : f.advice)
    server_advice = server_advice || a.find("Check the server fileserver") != std::string::npos;
  EXPECT_TRUE(server_advice);
}

TEST(IoStuckRule, AShortOrMovingWaitIsNotStuck) {
  // Blocked under --stall-after (10 s).
  EXPECT_TRUE(of_kind(diagnose(loader(kFuseLine, "/mnt/data/a", true, 0.5).s), FindingKind::IoStuck).empty());
  // I/O moved between the samples.
  SnapshotBuilder b = loader(kNfsLine, "/mnt/nfs/a", false);
  for (auto& p : b.s.processes)
    for (auto& t : p.threads) t.io_bytes_end = t.io_bytes_start + 4096;
  EXPECT_TRUE(of_kind(diagnose(b.s), FindingKind::IoStuck).empty());
}

TEST(IoStuckRule, WithoutKernelTimesItIsAWarning) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  ThreadInfo& t = b.thread(100, 100, 'D', std::nullopt);
  testing::in_syscall(t, HT_NR_read, {9, 0, 4096});
  file_fd(b, 100, 9, "/mnt/nfs/x", 113);
  b.find(100)->mounts.push_back(mount_line(kNfsLine));
  // of_kind points into the diagnosis: it must outlive them (ASan found one that did not).
  Diagnosis d = diagnose(b.s);
  auto found = of_kind(d, FindingKind::IoStuck);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found.front()->severity, Severity::Warning);
}

TEST(IoStuckRule, AnInterruptibleReadOfALocalFileIsNotAFilesystemWait) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  ThreadInfo& t = b.thread(100, 100, 'S');
  testing::in_syscall(t, HT_NR_read, {9, 0, 4096});
  stack(t, {"pipe_read", "vfs_read"});
  file_fd(b, 100, 9, "/var/run/fifo", 27);
  b.find(100)->mounts.push_back(mount_line("27 1 254:0 / / rw,relatime - ext4 /dev/vda rw"));
  Diagnosis d = diagnose(b.s);
  EXPECT_TRUE(of_kind(d, FindingKind::IoStuck).empty());
  EXPECT_FALSE(d.graph.objects.at(d.graph.threads.at(100).objects.at(0)).fs);
}

}  // namespace
}  // namespace hangtrace
