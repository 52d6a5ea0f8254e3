// What /proc shows of doctor's target, read once: its children and what
// they are (DataLoader workers, a fork server, torch_shm_manager), the
// /dev/shm/torch_* segments they map or hold fds on, open fds per process.
#include <sys/stat.h>

#include <cstring>

#include <fmt/format.h>

#include "hangtrace/procfs.h"
#include "internal.h"

namespace hangtrace::doctor {
namespace detail {
namespace {

constexpr const char* kTorchShmPrefix = "/dev/shm/torch_";

ChildKind classify_child(const std::string& comm, const std::string& cmdline, const std::string& exe,
                         const Target& t) {
  if (comm.starts_with("torch_shm_manag") || contains(exe, "torch_shm_manager")) return ChildKind::ShmManager;
  if (contains(cmdline, "resource_tracker") || contains(cmdline, "semaphore_tracker"))
    return ChildKind::Tracker;
  if (contains(cmdline, "forkserver")) return ChildKind::ForkServer;
  if (contains(cmdline, "spawn_main") || contains(cmdline, "--multiprocessing-fork"))
    return ChildKind::Spawned;
  if (!t.cmdline.empty() && cmdline == t.cmdline && exe == t.exe) return ChildKind::Forked;
  return ChildKind::Other;
}

std::vector<int> children_of(const procfs::ProcFs& fs, const std::vector<int>& all, int parent) {
  std::vector<int> out;
  for (int p : all) {
    if (p == parent) continue;
    auto st = fs.stat(p);
    if (st && st->ppid == parent) out.push_back(p);
  }
  return out;
}

void read_segments_and_fds(const procfs::ProcFs& fs, int pid, Target& t) {
  if (auto maps = fs.maps(pid)) {
    for (const auto& m : *maps) {
      std::string path = m.path;
      bool deleted = false;
      if (constexpr std::string_view kDel = " (deleted)";
          path.size() > kDel.size() && path.compare(path.size() - kDel.size(), kDel.size(), kDel) == 0) {
        path.resize(path.size() - kDel.size());
        deleted = true;
      }
      if (pid == t.pid) t.mapped_paths.push_back(path);
      if (!path.starts_with(kTorchShmPrefix)) continue;
      Segment& s = t.segments[m.inode];
      s.inode = m.inode;
      s.bytes = std::max(s.bytes, m.end - m.start);
      s.deleted = s.deleted || deleted;
      s.name = path.substr(std::strlen("/dev/shm/"));
      s.pids.insert(pid);
    }
  }
  auto fds = fs.fds(pid);
  if (!fds) return;
  t.open_fds[pid] = fds->size();
  for (int fd : *fds) {
    auto link = fs.fd_link(pid, fd);
    if (!link) continue;
    procfs::FdLinkInfo info = procfs::classify_fd_link(*link);
    if (!info.path.starts_with(kTorchShmPrefix)) continue;
    t.torch_fds++;
    auto st = fs.fd_stat(pid, fd);
    if (!st) continue;
    Segment& s = t.segments[st->id.inode];
    s.inode = st->id.inode;
    s.bytes = std::max<uint64_t>(s.bytes, st->size_bytes);
    s.deleted = s.deleted || info.deleted;
    s.name = info.path.substr(std::strlen("/dev/shm/"));
    s.pids.insert(pid);
  }
}

Result<procfs::ProcStat> target_stat(const procfs::ProcFs& fs, int pid) {
  if (pid <= 0) return make_error(fmt::format("no such process: {}", pid));
  int err = 0;
  auto st = fs.stat(pid, &err);
  if (!st) {
    if (procfs::is_gone_errno(err)) return make_error(fmt::format("no such process: {}", pid));
    return make_error(st.error());
  }
  if (st->is_kernel_thread())
    return make_error(fmt::format("pid {} is a kernel thread, not a training job", pid));
  return st;
}

}  // namespace

Result<Target> read_target(const DoctorInputs& in) {
  procfs::ProcFs fs(in.proc_root);
  Target t;
  t.pid = in.pid;
  auto st = target_stat(fs, in.pid);
  if (!st) return make_error(st.error());
  t.comm = st->comm;
  t.threads = st->num_threads;
  if (auto c = fs.cmdline(in.pid)) t.cmdline = *c;
  if (auto e = fs.exe(in.pid)) t.exe = *e;
  if (auto e = fs.environ(in.pid)) t.environ = *e;
  if (auto l = fs.limits(in.pid)) t.limits = *l;

  std::vector<int> all;
  if (auto p = fs.pids()) all = *p;
  for (int c : children_of(fs, all, in.pid)) {
    Child child;
    child.pid = c;
    if (auto s = fs.stat(c)) child.comm = s->comm;
    if (auto cl = fs.cmdline(c)) child.cmdline = *cl;
    std::string exe;
    if (auto e = fs.exe(c)) exe = *e;
    child.kind = classify_child(child.comm, child.cmdline, exe, t);
    switch (child.kind) {
      case ChildKind::Forked:
        t.workers.push_back(c);
        if (t.start_method.empty()) t.start_method = "fork";
        break;
      case ChildKind::Spawned:
        t.workers.push_back(c);
        if (t.start_method.empty()) t.start_method = "spawn";
        break;
      case ChildKind::ForkServer:
        for (int g : children_of(fs, all, c)) t.workers.push_back(g);
        t.start_method = "forkserver";
        break;
      case ChildKind::ShmManager:
        t.shm_manager = true;
        break;
      default:
        break;
    }
    t.children.push_back(std::move(child));
  }
  read_segments_and_fds(fs, in.pid, t);
  for (int w : t.workers) read_segments_and_fds(fs, w, t);
  return t;
}

}  // namespace detail

Result<bool> validate_target(const std::string& proc_root, int pid) {
  procfs::ProcFs fs(proc_root);
  auto st = detail::target_stat(fs, pid);
  if (!st) return make_error(st.error());
  return true;
}

}  // namespace hangtrace::doctor
