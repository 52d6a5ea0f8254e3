#include "hangtrace/output_file.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <optional>

#include "hangtrace/text.h"

namespace hangtrace {
namespace {

Error write_error(const std::string& path, const std::string& why) {
  return make_error(fmt::format("failed to write {}: {}", path, why));
}

// Closes the descriptor on every path out.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  // close(2)'s own result: a write error NFS reports only at close.
  int release_and_close() {
    int r = close(fd_);
    fd_ = -1;
    return r;
  }

 private:
  int fd_;
};

// write(2) until done; errno on failure.
int write_all(int fd, std::string_view content) {
  size_t off = 0;
  while (off < content.size()) {
    ssize_t n = write(fd, content.data() + off, content.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    off += static_cast<size_t>(n);
  }
  return 0;
}

// Devices and FIFOs cannot be fsync'ed (EINVAL, EROFS): nothing to make durable.
int sync_fd(int fd) { return fsync(fd) != 0 && errno != EINVAL && errno != EROFS ? errno : 0; }

std::string directory_of(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// ".NAME.XXXXXXXXXXXXXXXX.tmp" with 64 random bits: nobody can plant it in advance.
std::string temp_name_for(const std::string& path) {
  uint64_t bits = 0;
  if (getrandom(&bits, sizeof bits, 0) != static_cast<ssize_t>(sizeof bits)) {
    // Without entropy the O_EXCL open below still never opens a planted name.
    bits = static_cast<uint64_t>(getpid()) << 32 ^ static_cast<uint64_t>(reinterpret_cast<uintptr_t>(&bits));
  }
  std::string base = basename_of(path);
  if (base.size() > 200) base.resize(200);  // NAME_MAX is 255
  return fmt::format("{}/.{}.{:016x}.tmp", directory_of(path), base, bits);
}

Result<bool> write_in_place(const std::string& path, std::string_view content, bool follow) {
  int flags = O_WRONLY | O_NOCTTY | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW);
  Fd fd(open(path.c_str(), flags));
  if (fd.get() < 0) return write_error(path, errno_text(errno));
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return write_error(path, errno_text(errno));
  // Swapped for a regular file between the check and the open: written in
  // place it could be cut half-way, so it is refused.
  if (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode))
    return write_error(path, "the file changed while it was opened");
  if (int e = write_all(fd.get(), content)) return write_error(path, errno_text(e));
  if (int e = sync_fd(fd.get())) return write_error(path, errno_text(e));
  if (fd.release_and_close() != 0) return write_error(path, errno_text(errno));
  return true;
}

// keep_mode: the permission bits of the file being replaced; a new file gets
// 0644 less the umask.
Result<bool> replace_atomically(const std::string& path, std::string_view content,
                                std::optional<mode_t> keep_mode) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    std::string tmp = temp_name_for(path);
    Fd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, keep_mode ? 0600 : 0644));
    if (fd.get() < 0) {
      if (errno == EEXIST) continue;
      return write_error(path, errno_text(errno));
    }
    if (keep_mode && fchmod(fd.get(), *keep_mode) != 0) {
      int e = errno;
      unlink(tmp.c_str());
      return write_error(path, errno_text(e));
    }
    int e = write_all(fd.get(), content);
    if (!e) e = sync_fd(fd.get());
    if (!e && fd.release_and_close() != 0) e = errno;
    if (!e && rename(tmp.c_str(), path.c_str()) != 0) e = errno;
    if (e) {
      unlink(tmp.c_str());
      return write_error(path, errno_text(e));
    }
    fsync_directory(directory_of(path));
    return true;
  }
  return write_error(path, "no unused temporary name in its directory");
}

}  // namespace

Result<bool> check_directory_links(const std::string& dir) {
  // Each prefix of the path, "/a", "/a/b", ...: a link planted in a directory
  // another user can write to would send every file below it elsewhere.
  std::string prefix = dir.starts_with("/") ? "" : ".";
  size_t pos = dir.starts_with("/") ? 1 : 0;
  while (pos <= dir.size()) {
    size_t end = dir.find('/', pos);
    if (end == std::string::npos) end = dir.size();
    std::string part = dir.substr(pos, end - pos);
    pos = end + 1;
    if (part.empty() || part == ".") continue;
    prefix += "/" + part;
    struct stat st {};
    if (lstat(prefix.c_str(), &st) != 0) {
      if (errno == ENOENT) return true;  // created below by the caller
      return make_error(fmt::format("{}: {}", prefix, errno_text(errno)));
    }
    if (S_ISLNK(st.st_mode) && st.st_uid != 0 && st.st_uid != geteuid())
      return make_error(
          fmt::format("{} is a symbolic link owned by uid {} (neither root nor uid {}): not followed", prefix,
                      st.st_uid, geteuid()));
  }
  return true;
}

Result<bool> write_file_atomically(const std::string& path, std::string_view content) {
  if (path.empty()) return write_error("''", "empty path");
  if (auto ok = check_directory_links(directory_of(path)); !ok) return write_error(path, ok.error());
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) return write_error(path, errno_text(errno));
    return replace_atomically(path, content, std::nullopt);
  }
  if (S_ISLNK(st.st_mode)) {
    // Following a link someone else planted would write wherever they chose.
    if (st.st_uid != 0 && st.st_uid != geteuid())
      return write_error(path, fmt::format("it is a symbolic link owned by uid {} (neither root nor uid {}): "
                                           "not followed",
                                           st.st_uid, geteuid()));
    struct stat target {};
    if (stat(path.c_str(), &target) != 0) return write_error(path, errno_text(errno));
    if (!S_ISREG(target.st_mode)) {
      if (S_ISDIR(target.st_mode)) return write_error(path, errno_text(EISDIR));
      return write_in_place(path, content, true);
    }
    // A link to a regular file: the file it names is replaced, the link stays.
    char resolved[PATH_MAX];
    if (!realpath(path.c_str(), resolved)) return write_error(path, errno_text(errno));
    return replace_atomically(resolved, content, target.st_mode & 07777);
  }
  if (S_ISDIR(st.st_mode)) return write_error(path, errno_text(EISDIR));
  if (!S_ISREG(st.st_mode)) return write_in_place(path, content, false);
  return replace_atomically(path, content, st.st_mode & 07777);
}

Result<bool> write_new_file(const std::string& path, std::string_view content, mode_t mode) {
  Fd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
  if (fd.get() < 0) return write_error(path, errno_text(errno));
  int e = write_all(fd.get(), content);
  if (!e) e = sync_fd(fd.get());
  if (!e && fd.release_and_close() != 0) e = errno;
  if (e) return write_error(path, errno_text(e));
  return true;
}

void fsync_directory(const std::string& dir) {
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  fsync(fd);
  close(fd);
}

}  // namespace hangtrace
