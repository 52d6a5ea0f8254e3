// Waits under the streaming threshold, for the short-waits concern: the child
// sleeps INTERVAL_US (a timed-out nanosleep) and writes a byte, N times; the
// parent blocks in read() for each, woken by the child. Then each sleeps
// 20 ms once: a reported wait, which sends its pending sum.
//   argv: GATE_FD N INTERVAL_US
//   READY parent=PID child=PID fd=FD   (FD: the parent's read end)
//   (line on GATE_FD)
//   DONE reads_slept=K   (K: the parent's reads that slept -- its voluntary
//                         context switches rose across them; on a busy
//                         machine the byte may be there before the read)
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "repro.h"

namespace {
void sleep_us(long us) {
  timespec ts{us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, nullptr);
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s GATE_FD N INTERVAL_US\n", argv[0]);
    return 2;
  }
  int gate = std::atoi(argv[1]);
  int n = std::atoi(argv[2]);
  long interval_us = std::atol(argv[3]);
  int fds[2], go[2];
  if (pipe(fds) != 0 || pipe(go) != 0) return 1;
  pid_t parent = getpid();
  pid_t child = repro::fork_tied_child();
  if (child < 0) return 1;
  if (child == 0) {
    char c;
    if (read(go[0], &c, 1) != 1) _exit(1);
    for (int i = 0; i < n; ++i) {
      sleep_us(interval_us);
      if (write(fds[1], "x", 1) != 1) _exit(1);
    }
    sleep_us(20000);
    pause();  // stays until killed (tied to the parent)
    _exit(0);
  }
  std::printf("READY parent=%d child=%d fd=%d\n", parent, child, fds[0]);
  std::fflush(stdout);
  if (!repro::read_line(gate)) return 1;
  if (write(go[1], "g", 1) != 1) return 1;
  char c;
  int reads_slept = 0;
  for (int i = 0; i < n; ++i) {
    rusage before{}, after{};
    if (getrusage(RUSAGE_THREAD, &before) != 0 || read(fds[0], &c, 1) != 1 ||
        getrusage(RUSAGE_THREAD, &after) != 0)
      return 1;
    reads_slept += after.ru_nvcsw > before.ru_nvcsw;
  }
  sleep_us(20000);
  std::printf("DONE reads_slept=%d\n", reads_slept);
  std::fflush(stdout);
  repro::read_line(gate);  // stays until killed
  return 0;
}
