// /etc/resolv.conf as a process sees it: its nameservers and the options that
// bound a lookup, read through ROOT/PID/root (its mount namespace) with every
// link resolved inside that root.
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>

#include "fields.h"
#include "hangtrace/procfs.h"

namespace hangtrace::procfs {

using namespace fields;

ResolverConfig parse_resolv_conf(std::string_view text) {
  ResolverConfig out;
  for (auto line : split_lines(text)) {
    // Comments start with '#' or ';' at the start of a line, or after a value.
    size_t hash = line.find_first_of("#;");
    if (hash != std::string_view::npos) line = line.substr(0, hash);
    auto tokens = split_whitespace(line);
    if (tokens.size() < 2) continue;
    if (tokens[0] == "nameserver") {
      if (out.nameservers.size() >= kMaxNameservers) continue;
      std::string_view ip = tokens[1];
      if (size_t zone = ip.find('%'); zone != std::string_view::npos) ip = ip.substr(0, zone);
      auto c = canonical_address(ip);
      if (c && std::find(out.nameservers.begin(), out.nameservers.end(), *c) == out.nameservers.end())
        out.nameservers.push_back(*c);
    } else if (tokens[0] == "options") {
      for (size_t i = 1; i < tokens.size(); ++i) {
        // glibc caps them at 30 s and 5 attempts; a larger value is what the file says.
        if (starts_with(tokens[i], "timeout:")) {
          if (auto v = parse_int<int>(tokens[i].substr(8)); v && *v >= 0) out.timeout_s = *v;
        } else if (starts_with(tokens[i], "attempts:")) {
          if (auto v = parse_int<int>(tokens[i].substr(9)); v && *v >= 0) out.attempts = *v;
        }
      }
    }
  }
  return out;
}

namespace {

Error resolv_error(const std::string& path, int e, int* err) {
  if (err) *err = e;
  return make_error(fmt::format("failed to read {}: {}", path, std::strerror(e)));
}

}  // namespace

Result<int> ProcFs::open_in_root(int pid, std::string_view file, int* err) const {
  if (err) *err = 0;
  const std::string root = root_path(pid, "");
  const std::string path = root_path(pid, file);
  std::string relative(file);
  relative.erase(0, relative.find_first_not_of('/'));
  if (relative.empty()) return resolv_error(path, EISDIR, err);
  int dir = ::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return resolv_error(path, errno, err);
  open_how how{};
  how.flags = O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  int fd = static_cast<int>(::syscall(SYS_openat2, dir, relative.c_str(), &how, sizeof how));
  if (fd < 0 && (errno == ENOSYS || errno == EPERM))  // before 5.6, or a seccomp filter
    fd = ::openat(dir, relative.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  int open_errno = errno;
  ::close(dir);
  if (fd < 0) return resolv_error(path, open_errno, err);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return resolv_error(path, e, err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    if (err) *err = EINVAL;
    return make_error(fmt::format("failed to read {}: not a regular file", path));
  }
  // Reads see EOF, not EAGAIN, on a regular file; blocking again is harmless.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

Result<ResolverConfig> ProcFs::resolv_conf(int pid, int* err) const {
  // A link (resolv.conf -> /run/systemd/resolve/stub-resolv.conf) is the
  // process's, so it resolves inside its root (open_in_root).
  const std::string path = root_path(pid, "/etc/resolv.conf");
  auto opened = open_in_root(pid, "/etc/resolv.conf", err);
  if (!opened) return make_error(opened.error());
  const int fd = *opened;
  std::string text;
  char buf[8192];
  while (text.size() <= kMaxResolvConfBytes) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      ::close(fd);
      return resolv_error(path, e, err);
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  // A longer file is cut at the bound: its first lines are the ones glibc reads anyway.
  if (text.size() > kMaxResolvConfBytes) text.resize(kMaxResolvConfBytes);
  return parse_resolv_conf(text);
}

}  // namespace hangtrace::procfs
