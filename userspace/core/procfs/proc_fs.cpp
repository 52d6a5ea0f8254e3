// ProcFs: every /proc file hangtrace reads, under one injectable root.
#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "hangtrace/procfs.h"

namespace hangtrace::procfs {

namespace {

template <class T, class Parse>
Result<T> read_and_parse(const std::string& path, int* err, Parse parse) {
  auto text = read_text_file(path, err);
  if (!text) return make_error(text.error());
  auto parsed = parse(*text);
  if (!parsed) return make_error(fmt::format("{} ({})", parsed.error(), path));
  return std::move(*parsed);
}

Result<uint64_t> read_namespace_link(const std::string& path, int* err) {
  auto link = read_link(path, err);
  if (!link) return make_error(link.error());
  return parse_namespace_link(*link);
}

// comm is at most 16 bytes; a bound well above it.
constexpr size_t kMaxCommBytes = 4096;
constexpr size_t kMaxSmallFileBytes = size_t{64} << 10;  // limits, osrelease

// A cut text without its last, partial record (an environment entry, a
// cgroup line): what is kept is whole.
BoundedText to_last_separator(BoundedText t, char separator) {
  if (t.cut) {
    size_t last = t.text.rfind(separator);
    t.text.resize(last == std::string::npos ? 0 : last + 1);
  }
  return t;
}

}  // namespace

// ---- paths ------------------------------------------------------------------------

std::string ProcFs::pid_path(int pid) const { return fmt::format("{}/{}", root_, pid); }
std::string ProcFs::task_path(int pid, int tid) const {
  return fmt::format("{}/{}/task/{}", root_, pid, tid);
}
std::string ProcFs::root_path(int pid, std::string_view path) const {
  return fmt::format("{}/{}/root{}", root_, pid, path);
}
std::string ProcFs::namespace_path(int pid, std::string_view ns) const {
  return fmt::format("{}/{}/ns/{}", root_, pid, ns);
}
std::string ProcFs::map_file_path(int pid, uint64_t start, uint64_t end) const {
  return fmt::format("{}/{}/map_files/{:x}-{:x}", root_, pid, start, end);
}
std::string ProcFs::self_path() const { return root_ + "/self"; }

// ---- a process and its threads -------------------------------------------------------

Result<ProcStat> ProcFs::stat(int pid, int* err) const {
  return read_and_parse<ProcStat>(pid_path(pid) + "/stat", err, parse_stat);
}
Result<ProcStatm> ProcFs::statm(int pid, int* err) const {
  return read_and_parse<ProcStatm>(pid_path(pid) + "/statm", err, parse_statm);
}
Result<ProcStat> ProcFs::thread_stat(int pid, int tid, int* err) const {
  return read_and_parse<ProcStat>(task_path(pid, tid) + "/stat", err, parse_stat);
}
Result<ProcStatus> ProcFs::status(int pid, int* err) const {
  return read_and_parse<ProcStatus>(pid_path(pid) + "/status", err, parse_status);
}
Result<ProcStatus> ProcFs::thread_status(int pid, int tid, int* err) const {
  return read_and_parse<ProcStatus>(task_path(pid, tid) + "/status", err, parse_status);
}
Result<SyscallState> ProcFs::thread_syscall(int pid, int tid, int* err) const {
  return read_and_parse<SyscallState>(task_path(pid, tid) + "/syscall", err, parse_syscall);
}
Result<ProcIo> ProcFs::thread_io(int pid, int tid, int* err) const {
  return read_and_parse<ProcIo>(task_path(pid, tid) + "/io", err, parse_io);
}
Result<uint64_t> ProcFs::thread_schedstat(int pid, int tid, int* err) const {
  return read_and_parse<uint64_t>(task_path(pid, tid) + "/schedstat", err, parse_schedstat);
}
Result<Schedstat> ProcFs::thread_schedstat_fields(int pid, int tid, int* err) const {
  return read_and_parse<Schedstat>(task_path(pid, tid) + "/schedstat", err, parse_schedstat_fields);
}
Result<BoundedText> ProcFs::cmdline_text(int pid, int* err) const {
  auto raw = read_text_prefix(pid_path(pid) + "/cmdline", kMaxCmdlineBytes, err);
  if (!raw) return make_error(raw.error());
  return BoundedText{parse_cmdline(raw->text), raw->cut};
}
Result<std::string> ProcFs::cmdline(int pid, int* err) const {
  // A command line past the bound is still the job's: its first MiB, marked
  // cut, not nothing (launchers, reports).
  auto text = cmdline_text(pid, err);
  if (!text) return make_error(text.error());
  return text->cut ? text->text + " ..." : std::move(text->text);
}
Result<BoundedText> ProcFs::environ_text(int pid, int* err) const {
  auto raw = read_text_prefix(pid_path(pid) + "/environ", kMaxEnvironBytes, err);
  if (!raw) return make_error(raw.error());
  return to_last_separator(std::move(*raw), '\0');
}
Result<std::string> ProcFs::environ(int pid, int* err) const {
  auto text = environ_text(pid, err);
  if (!text) return make_error(text.error());
  return std::move(text->text);
}
Result<std::string> ProcFs::comm(int pid, int* err) const {
  auto text = read_text_file(pid_path(pid) + "/comm", err, kMaxCommBytes);
  if (!text) return make_error(text.error());
  return parse_comm(*text);
}
Result<BoundedText> ProcFs::cgroup_text(int pid, int* err) const {
  auto raw = read_text_prefix(pid_path(pid) + "/cgroup", kMaxCgroupBytes, err);
  if (!raw) return make_error(raw.error());
  return to_last_separator(std::move(*raw), '\n');
}
Result<std::string> ProcFs::cgroup(int pid, int* err) const {
  auto text = cgroup_text(pid, err);
  if (!text) return make_error(text.error());
  return std::move(text->text);
}
Result<std::string> ProcFs::limits(int pid, int* err) const {
  return read_text_file(pid_path(pid) + "/limits", err, kMaxSmallFileBytes);
}
Result<std::string> ProcFs::exe(int pid, int* err) const { return read_link(pid_path(pid) + "/exe", err); }
Result<FileId> ProcFs::exe_file(int pid, int* err) const { return stat_file(pid_path(pid) + "/exe", err); }
Result<uint64_t> ProcFs::namespace_inode(int pid, const std::string& ns, int* err) const {
  return read_namespace_link(namespace_path(pid, ns), err);
}
Result<FsUsage> ProcFs::filesystem_usage(int pid, std::string_view path, int* err) const {
  return procfs::filesystem_usage(root_path(pid, path), err);
}
Result<std::vector<int>> ProcFs::pids(int* err) const { return list_numeric_dir(root_, err); }
Result<std::vector<int>> ProcFs::tids(int pid, int* err) const {
  return list_numeric_dir(pid_path(pid) + "/task", err);
}
Result<std::vector<Mapping>> ProcFs::maps(int pid, int* err) const {
  return read_and_parse<std::vector<Mapping>>(pid_path(pid) + "/maps", err, parse_maps);
}
Result<MountTable> ProcFs::mountinfo(int pid, int* err) const {
  auto text = read_text_file(pid_path(pid) + "/mountinfo", err, kMaxMountinfoBytes);
  if (!text) return make_error(text.error());
  return parse_mountinfo(*text);
}

// ---- fds ------------------------------------------------------------------------------

Result<std::vector<int>> ProcFs::fds(int pid, int* err) const {
  return list_numeric_dir(pid_path(pid) + "/fd", err);
}
Result<std::string> ProcFs::fd_link(int pid, int fd, int* err) const {
  return read_link(fmt::format("{}/fd/{}", pid_path(pid), fd), err);
}
Result<FileId> ProcFs::fd_file(int pid, int fd, int* err) const {
  return stat_file(fmt::format("{}/fd/{}", pid_path(pid), fd), err);
}
Result<FileStat> ProcFs::fd_stat(int pid, int fd, int* err) const {
  return examine_file(fmt::format("{}/fd/{}", pid_path(pid), fd), err);
}
Result<FdInfo> ProcFs::fdinfo(int pid, int fd, int* err) const {
  // Its fixed fields come first; a long epoll watch list is cut at a line.
  const std::string path = fmt::format("{}/fdinfo/{}", pid_path(pid), fd);
  auto text = read_text_prefix(path, kMaxFdinfoBytes, err);
  if (!text) return make_error(text.error());
  BoundedText whole = to_last_separator(std::move(*text), '\n');
  auto parsed = parse_fdinfo(whole.text);
  if (!parsed) return make_error(fmt::format("{} ({})", parsed.error(), path));
  if (whole.cut) parsed->epoll_watches_left_out = std::max<size_t>(parsed->epoll_watches_left_out, 1);
  return std::move(*parsed);
}

// ---- sockets of a process's network namespace -------------------------------------------

Result<std::vector<InetSocketEntry>> ProcFs::inet_sockets(int pid, const std::string& table, int* err) const {
  return read_and_parse<std::vector<InetSocketEntry>>(
      fmt::format("{}/net/{}", pid_path(pid), table), err,
      [&table](std::string_view text) { return parse_inet_sockets(text, table); });
}
Result<std::vector<UnixSocketEntry>> ProcFs::unix_sockets(int pid, int* err) const {
  return read_and_parse<std::vector<UnixSocketEntry>>(pid_path(pid) + "/net/unix", err, parse_unix_sockets);
}

Result<std::vector<FileLock>> ProcFs::locks(int* err) const {
  auto text = read_text_prefix(root_ + "/locks", kMaxLocksBytes, err);
  if (!text) return make_error(text.error());
  // A cut file ends inside a line: that line is dropped, the rest kept.
  std::string_view whole = text->text;
  if (text->cut) whole = whole.substr(0, whole.rfind('\n') == std::string_view::npos ? 0 : whole.rfind('\n'));
  auto parsed = parse_locks(whole);
  if (!parsed) return make_error(fmt::format("{} ({}/locks)", parsed.error(), root_));
  return std::move(*parsed);
}

// ---- hangtrace itself ---------------------------------------------------------------------

Result<std::string> ProcFs::self_exe(int* err) const { return read_link(self_path() + "/exe", err); }
Result<FileId> ProcFs::self_exe_file(int* err) const { return stat_file(self_path() + "/exe", err); }
Result<std::string> ProcFs::self_limits(int* err) const {
  return read_text_file(self_path() + "/limits", err, kMaxSmallFileBytes);
}
Result<std::string> ProcFs::self_status(int* err) const {
  return read_text_file(self_path() + "/status", err);
}
Result<std::string> ProcFs::kallsyms(int* err) const {
  return read_text_file(root_ + "/kallsyms", err, size_t{64} << 20);
}
Result<std::string> ProcFs::kernel_release(int* err) const {
  auto text = read_text_file(root_ + "/sys/kernel/osrelease", err, kMaxSmallFileBytes);
  if (!text) return text;
  return std::string(trim(*text, " \t\n"));
}
Result<uint64_t> ProcFs::self_rss_bytes(int* err) const {
  auto statm = read_and_parse<ProcStatm>(self_path() + "/statm", err, parse_statm);
  if (!statm) return make_error(statm.error());
  return statm->resident_pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}
Result<uint64_t> ProcFs::thread_self_namespace_inode(const std::string& ns, int* err) const {
  return read_namespace_link(fmt::format("{}/thread-self/ns/{}", root_, ns), err);
}

}  // namespace hangtrace::procfs
