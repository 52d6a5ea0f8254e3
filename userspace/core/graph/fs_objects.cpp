// Waits inside a filesystem in the wait-for graph: a thread in D (or inside a
// FUSE request, which sleeps interruptibly until a signal and only then
// uninterruptibly) resolved through its kernel stack and the fd it reads or
// writes to the file, the mount it is on (the waiter's own mountinfo) and who
// serves it: the FUSE daemon holding /dev/fuse (whose threads release it), or
// the server of a network filesystem, or the disk (both outside).
#include <fmt/format.h>

#include <algorithm>
#include <string_view>

#include "graph_builder.h"
#include "hangtrace/procfs.h"

namespace hangtrace::graph {

namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// The client side of a FUSE request. fuse_dev_* is the daemon's side (its
// read of /dev/fuse), which is not a wait in the filesystem.
bool is_fuse_request_frame(std::string_view f) {
  return f == "request_wait_answer" || f == "fuse_simple_request" || f == "__fuse_request_send" ||
         f == "fuse_request_send" || (starts_with(f, "fuse_") && !starts_with(f, "fuse_dev_"));
}

// Page-cache, block and network-filesystem waits of a read or write.
bool is_fs_frame(std::string_view f) {
  static constexpr std::string_view kFrames[] = {"folio_wait_bit_common",
                                                 "folio_wait_bit",
                                                 "__folio_lock",
                                                 "__folio_lock_killable",
                                                 "folio_wait_writeback",
                                                 "wait_on_page_bit",
                                                 "wait_on_page_bit_common",
                                                 "__lock_page",
                                                 "__lock_page_killable",
                                                 "filemap_read",
                                                 "filemap_fault",
                                                 "filemap_get_pages",
                                                 "filemap_update_page",
                                                 "generic_file_read_iter",
                                                 "generic_perform_write",
                                                 "io_schedule",
                                                 "bit_wait_io",
                                                 "__wait_on_buffer",
                                                 "submit_bio_wait",
                                                 "blk_mq_get_tag",
                                                 "iomap_dio_rw",
                                                 "blkdev_read_iter",
                                                 "wait_for_response"};
  for (auto k : kFrames)
    if (f == k) return true;
  for (std::string_view prefix :
       {"nfs_", "nfs4_", "rpc_", "__rpc_", "cifs_", "smb2_", "ll_", "vvp_", "ceph_", "p9_", "jbd2_"})
    if (starts_with(f, prefix)) return true;
  return is_fuse_request_frame(f);
}

}  // namespace

bool GraphBuilder::fs_wait(const ProcessInfo& p, const ThreadInfo& t, const SyscallDesc& desc,
                           ThreadWait& w) {
  bool fuse_stack = false;
  std::string fs_frame;  // the innermost filesystem frame
  for (const auto& f : w.kernel_stack) {
    fuse_stack = fuse_stack || is_fuse_request_frame(f);
    if (fs_frame.empty() && is_fs_frame(f)) fs_frame = f;
  }
  const bool fs_stack = !fs_frame.empty();
  const FdEntry* f = nullptr;
  const bool rw = t.syscall.mode == SyscallState::Mode::InSyscall &&
                  (desc.wait == WaitClass::FdRead || desc.wait == WaitClass::FdWrite);
  if (rw) {
    f = find_fd(p, static_cast<int>(t.syscall.args[0]));
    if (f && f->kind != FdKind::File && f->kind != FdKind::ShmFile) f = nullptr;
  }
  const MountEntry* m = nullptr;
  if (f)
    for (const auto& e : p.mounts)
      if (e.mount_id == f->mnt_id) m = &e;
  const bool on_fuse = m && procfs::is_fuse_fstype(m->fstype);
  if (t.state == 'D') {
    if (!f && !fs_stack) return false;  // D elsewhere in the kernel: not known to be a filesystem
  } else if (!fuse_stack && !(on_fuse && w.kernel_stack.empty())) {
    return false;  // an interruptible wait is a filesystem's only inside a FUSE request
  }

  const bool write = desc.wait == WaitClass::FdWrite;
  FileSystemWait fs;
  fs.write = write;
  std::string id, label;
  if (f) {
    fs.file = f->link;
    id = fmt::format("fs:{}:{}:{}", p.mntns, f->mnt_id, f->link);
    label = fmt::format("{} of {}", write ? "write" : "read", f->link);
  } else {
    id = fmt::format("fs:thread:{}", t.tid);
    label = fmt::format("an uninterruptible wait in the kernel ({})", fs_frame);
  }
  if (m) {
    fs.known_mount = true;
    fs.mount_point = m->mount_point;
    fs.fstype = m->fstype;
    fs.source = m->source;
    fs.options = m->super_options;
    fs.server = procfs::mount_server(*m);
    fs.fuse_connection = procfs::fuse_connection(*m);
    label += fmt::format(" on {} {}", m->fstype, m->mount_point);
  } else if (f) {
    label += " (mount unknown)";
  }
  WaitObject& o = object(id, ObjectKind::File, label, f ? f->link : id);
  if (!o.fs) {
    if (on_fuse || (fuse_stack && !m)) {
      // The daemon: a live process holding /dev/fuse. With several, those
      // naming the mount point on their command line (most daemons take it
      // as an argument); the connection of an fd is not shown in /proc.
      auto daemons =
          holders([](const FdEntry& e) { return e.kind == FdKind::Device && e.link == "/dev/fuse"; });
      if (daemons.size() > 1 && m) {
        std::vector<int> named;
        for (int pid : daemons) {
          const ProcessInfo* d = snap_.process(pid);
          if (d && d->cmdline.find(m->mount_point) != std::string::npos) named.push_back(pid);
        }
        if (!named.empty()) daemons = named;
      }
      for (int pid : daemons) add_releaser_process(o, pid);
      fs.server_pids = daemons;
      if (daemons.size() == 1) {
        o.label += " served by " + process_label(daemons[0]);
        o.releasers_certain = true;
      } else if (daemons.empty()) {
        o.external = true;
        o.notes.push_back(
            "no process hangtrace can see holds /dev/fuse: the FUSE daemon runs outside its view (another "
            "pid namespace, a container)");
      } else {
        o.notes.push_back(
            fmt::format("{} processes hold /dev/fuse; which serves this mount is not known", daemons.size()));
      }
    } else {
      o.external = true;  // a disk or a server: nothing in the snapshot completes it
      if (!fs.server.empty()) {
        o.label += " from server " + fs.server;
        o.notes.push_back(
            fmt::format("served by {} over the network ({} {})", fs.server, fs.fstype, fs.source));
      } else if (m) {
        o.notes.push_back(
            fmt::format("{} on {}: the device does not complete the I/O", fs.fstype, fs.source));
      }
    }
    o.fs = std::move(fs);
  }
  w.activity = t.state == 'D' ? Activity::DiskWait : Activity::Blocked;
  w.summary = o.label;
  w.objects = {o.id};
  o.waiters.push_back(t.tid);
  return true;
}

}  // namespace hangtrace::graph
