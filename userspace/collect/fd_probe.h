// Asks whether an fd another process waits on is ready right now, without
// disturbing it: a duplicate is taken with pidfd_getfd, poll()ed with timeout
// 0, asked FIONREAD, and closed at once. Holding a pipe's write end even
// briefly delays the EOF its reader waits for, so no duplicate outlives
// probe().
#pragma once

#include <cstdint>
#include <string>

namespace hangtrace {

struct FdReadiness {
  int32_t ready_events = -1;  // revents of poll(POLLIN|POLLOUT|POLLPRI, 0), -1 if not probed
  int64_t queued_bytes = -1;  // FIONREAD, -1 if not asked or refused
};

class FdProber {
 public:
  // `files_tid` names a live thread whose fd table to use when the leader
  // `pid` has exited (pthread_exit) and took its own with it; else pid.
  explicit FdProber(int pid, int files_tid = 0);
  ~FdProber();
  FdProber(const FdProber&) = delete;
  FdProber& operator=(const FdProber&) = delete;

  bool ok() const { return pidfd_ >= 0; }
  const std::string& error() const { return error_; }  // why ok() is false
  FdReadiness probe(int fd, bool ask_queued_bytes);

 private:
  int pidfd_ = -1;
  std::string error_;
};

}  // namespace hangtrace
