#include "fd_probe.h"

#include <poll.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fmt/format.h>

namespace hangtrace {

namespace {

// x86_64 numbers; older libc headers lack the SYS_ names.
constexpr long kSysPidfdOpen = 434;
constexpr long kSysPidfdGetfd = 438;
constexpr unsigned kPidfdThread = 0200;  // PIDFD_THREAD (= O_EXCL), Linux 6.9+

}  // namespace

FdProber::FdProber(int pid, int files_tid) {
  // pidfds are always close-on-exec; no flag needed.
  long fd = files_tid > 0 && files_tid != pid ? syscall(kSysPidfdOpen, files_tid, kPidfdThread)
                                              : syscall(kSysPidfdOpen, pid, 0);
  if (fd < 0) {
    error_ = fmt::format("failed to open a pidfd for {}: {}", files_tid > 0 ? files_tid : pid,
                         std::strerror(errno));
    return;
  }
  pidfd_ = static_cast<int>(fd);
}

FdProber::~FdProber() {
  if (pidfd_ >= 0) close(pidfd_);
}

FdReadiness FdProber::probe(int fd, bool ask_queued_bytes) {
  FdReadiness out;
  if (pidfd_ < 0 || fd < 0) return out;
  long dup = syscall(kSysPidfdGetfd, pidfd_, fd, 0);
  if (dup < 0) return out;
  int copy = static_cast<int>(dup);
  pollfd p{copy, POLLIN | POLLOUT | POLLPRI, 0};
  int rc;
  do {
    rc = poll(&p, 1, 0);
  } while (rc < 0 && errno == EINTR);
  if (rc >= 0) out.ready_events = p.revents;
  if (ask_queued_bytes) {
    int queued = 0;
    if (ioctl(copy, FIONREAD, &queued) == 0) out.queued_bytes = queued;
  }
  close(copy);
  return out;
}

}  // namespace hangtrace
