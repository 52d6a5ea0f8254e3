#include "token_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>

#include "hangtrace/text.h"

namespace hangtrace::cli {

Result<std::string> read_token_file(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return make_error(fmt::format("failed to read the token file {}: {}", path, errno_text(errno)));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > 4096) {
    close(fd);
    return make_error(fmt::format("failed to read the token file {}: not a small regular file", path));
  }
  if (st.st_mode & (S_IRWXG | S_IRWXO)) {
    close(fd);
    return make_error(fmt::format("failed to read the token file {}: others may read it (chmod 600)", path));
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  ssize_t n = read(fd, text.data(), text.size());
  close(fd);
  if (n < 0) return make_error(fmt::format("failed to read the token file {}: {}", path, errno_text(errno)));
  text.resize(static_cast<size_t>(n));
  std::string token(trim(text.substr(0, text.find('\n')), " \t\r"));
  if (token.size() < 16)
    return make_error(
        fmt::format("failed to read the token file {}: the token is shorter than 16 characters", path));
  return token;
}

}  // namespace hangtrace::cli
