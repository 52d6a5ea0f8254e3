#include "host_clock.h"

#include <sys/timex.h>

#include <ctime>

namespace hangtrace::cli {

double wall_clock_unix() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

HostClock sample_host_clock() {
  HostClock c;
  timex tx{};  // modes 0: read only
  const int state = adjtimex(&tx);
  c.sampled_unix = wall_clock_unix();
  if (state == -1) return c;  // no NTP state: unsynchronized, bounds unknown
  c.synchronized = state != TIME_ERROR && !(tx.status & STA_UNSYNC);
  // Microseconds, both (the kernel keeps them in us whatever STA_NANO says).
  c.max_error_s = static_cast<double>(tx.maxerror) / 1e6;
  c.est_error_s = static_cast<double>(tx.esterror) / 1e6;
  return c;
}

}  // namespace hangtrace::cli
