// /proc/PID/fdinfo/N (parse_fdinfo: pos, flags, mnt_id, ino, eventfd-count,
// eventfd-id, epoll "tfd:" lines) and the /proc/PID/fd/N link text
// (classify_fd_link), userspace/core/procfs/fd_files.cpp. Input: the fdinfo
// text, optionally followed by "\n--8<--\n" and a link text. Seeds: fdinfo
// of a regular file, a pipe, a socket, an epoll fd watching several fds and
// an eventfd of a live python3.
#include "fuzz_support.h"
#include "hangtrace/procfs.h"

using namespace hangtrace;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parts = fuzz::split(fuzz::as_text(data, size), "\n--8<--\n");
  if (auto info = procfs::parse_fdinfo(parts[0])) {
    // Each "tfd:" line is at least "tfd: 0 events: 0 data: 0" long.
    fuzz::check(info->epoll.size() <= parts[0].size() / 8 + 1);
  }
  for (size_t i = 1; i < parts.size(); ++i) {
    auto link = procfs::classify_fd_link(parts[i]);
    fuzz::check(link.path.size() <= parts[i].size() && link.anon_type.size() <= parts[i].size());
  }
  return 0;
}
