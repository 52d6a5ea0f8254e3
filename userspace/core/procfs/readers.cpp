// The readers under the parsers: whole (bounded) files, links, numeric
// directory listings and file identities, each failing with the errno text.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>

#include "fields.h"
#include "hangtrace/procfs.h"

namespace hangtrace::procfs {

using fields::parse_int;

namespace {

// "failed to VERB PATH: <strerror(e)>", with `e` handed to the caller.
Error os_error(const char* verb, const std::string& path, int e, int* errno_out) {
  if (errno_out) *errno_out = e;
  return make_error(fmt::format("failed to {} {}: {}", verb, path, std::strerror(e)));
}

}  // namespace

namespace {

// Reads `fd` until EOF or until more than `max_bytes` came: the bytes read
// (at most max_bytes + one read's worth) and whether there were more.
Result<std::string> read_until(int fd, const std::string& path, size_t max_bytes, bool* more,
                               int* errno_out) {
  std::string out;
  char buf[65536];
  *more = false;
  for (;;) {
    // One byte past the bound is enough to know there is more.
    const size_t room = max_bytes - out.size();
    const size_t want = room >= sizeof buf ? sizeof buf : room + 1;
    ssize_t n = ::read(fd, buf, want);
    if (n < 0) {
      if (errno == EINTR) continue;
      return os_error("read", path, errno, errno_out);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > max_bytes) {
      *more = true;
      break;
    }
  }
  return out;
}

}  // namespace

Result<std::string> read_text_file(const std::string& path, int* errno_out, size_t max_bytes) {
  auto text = read_text_prefix(path, max_bytes, errno_out);
  if (!text) return make_error(text.error());
  if (text->cut) {
    if (errno_out) *errno_out = EFBIG;
    return make_error(fmt::format("failed to read {}: larger than {} bytes", path, max_bytes));
  }
  return std::move(text->text);
}

Result<BoundedText> read_text_prefix(const std::string& path, size_t max_bytes, int* errno_out) {
  if (errno_out) *errno_out = 0;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return os_error("read", path, errno, errno_out);
  bool more = false;
  auto out = read_until(fd, path, max_bytes, &more, errno_out);
  ::close(fd);
  if (!out) return make_error(out.error());
  out->resize(std::min(out->size(), max_bytes));
  return BoundedText{std::move(*out), more};
}

Result<std::string> read_link(const std::string& path, int* errno_out) {
  if (errno_out) *errno_out = 0;
  char buf[4096];
  ssize_t n = ::readlink(path.c_str(), buf, sizeof buf);
  if (n < 0) return os_error("read link", path, errno, errno_out);
  return std::string(buf, static_cast<size_t>(n));
}

Result<std::vector<int>> list_numeric_dir(const std::string& path, int* errno_out, size_t max_entries) {
  if (errno_out) *errno_out = 0;
  DIR* dir = ::opendir(path.c_str());
  if (!dir) return os_error("list", path, errno, errno_out);
  std::vector<int> out;
  errno = 0;
  while (dirent* entry = ::readdir(dir)) {
    if (auto n = parse_int<int>(entry->d_name)) {
      if (*n >= 0) out.push_back(*n);
    }
    if (out.size() >= max_entries) break;
    errno = 0;
  }
  int e = errno;
  ::closedir(dir);
  if (e != 0) return os_error("list", path, e, errno_out);
  std::sort(out.begin(), out.end());
  return out;
}

// Cached attributes only (AT_STATX_DONT_SYNC): a file of a target's on a
// stuck NFS or FUSE server must not make hangtrace wait for that server.
Result<FileStat> examine_file(const std::string& path, int* errno_out) {
  if (errno_out) *errno_out = 0;
  struct statx st {};
  if (::statx(AT_FDCWD, path.c_str(), AT_STATX_DONT_SYNC, STATX_TYPE | STATX_INO | STATX_SIZE, &st) != 0)
    return os_error("examine", path, errno, errno_out);
  return FileStat{FileId{st.stx_dev_major, st.stx_dev_minor, static_cast<uint64_t>(st.stx_ino)},
                  static_cast<uint64_t>(st.stx_size), S_ISFIFO(st.stx_mode)};
}

Result<FileId> stat_file(const std::string& path, int* errno_out) {
  auto st = examine_file(path, errno_out);
  if (!st) return make_error(st.error());
  return st->id;
}

Result<FsUsage> filesystem_usage(const std::string& path, int* errno_out) {
  if (errno_out) *errno_out = 0;
  struct statvfs vfs {};
  if (::statvfs(path.c_str(), &vfs) != 0) return os_error("examine", path, errno, errno_out);
  FsUsage u;
  u.size_bytes = static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize;
  u.used_bytes = static_cast<uint64_t>(vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize;
  return u;
}

}  // namespace hangtrace::procfs
