#include "kernel_log_reader.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cstring>
#include <deque>

namespace hangtrace {

KernelLogRead read_kernel_log(const std::string& path, size_t max_records) {
  KernelLogRead out;
  // O_NONBLOCK: read() returns EAGAIN at the end of the ring instead of
  // waiting for the next record.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    out.error = fmt::format("failed to read {}: {}", path, std::strerror(errno));
    return out;
  }
  std::deque<KernelLogRecord> kept;
  // One read() returns one record (at most 8 KiB with its continuation lines).
  char buf[8192];
  for (size_t reads = 0; reads < 2 * max_records + 16; ++reads) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EPIPE) continue;  // records overwritten under the reader: go on from the next
      if (errno != EAGAIN) out.error = fmt::format("failed to read {}: {}", path, std::strerror(errno));
      break;
    }
    if (n == 0) break;
    if (auto r = parse_kmsg_record(std::string_view(buf, static_cast<size_t>(n)))) {
      kept.push_back(std::move(*r));
      if (kept.size() > max_records) {
        kept.pop_front();
        out.cut = true;
      }
    }
  }
  ::close(fd);
  out.records.assign(std::make_move_iterator(kept.begin()), std::make_move_iterator(kept.end()));
  return out;
}

}  // namespace hangtrace
