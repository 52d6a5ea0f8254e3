#include "fd_probe.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fmt/format.h>

#include "hangtrace/syscall_nr.h"

namespace hangtrace {

namespace {

// PIDFD_THREAD (Linux 6.9+), which older <linux/pidfd.h> lack, is O_EXCL.
constexpr unsigned kPidfdThread = O_EXCL;

}  // namespace

FdProber::FdProber(int pid, int files_tid) {
  // pidfds are always close-on-exec; no flag needed.
  long fd = files_tid > 0 && files_tid != pid ? syscall(HT_NR_pidfd_open, files_tid, kPidfdThread)
                                              : syscall(HT_NR_pidfd_open, pid, 0);
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
  long dup = syscall(HT_NR_pidfd_getfd, pidfd_, fd, 0);
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
