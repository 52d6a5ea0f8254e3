// A small job that exits while it is being looked at: 3 threads (one in a
// read of a pipe, one in a futex wait, one in a sleep), 2 children tied to it
// (each in a read of the same pipe), then, `DELAY_US` microseconds after its
// marker, _exit(0) -- the children die with it (PR_SET_PDEATHSIG).
//
//   argv: DELAY_US
//   READY pid=P children=C1,C2
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "repro.h"

namespace {

uint32_t never = 0;  // nobody wakes it

}  // namespace

int main(int argc, char** argv) {
  long delay_us = argc > 1 ? std::atol(argv[1]) : 0;
  int fds[2];
  if (pipe(fds) != 0) return 1;  // nobody writes: every read waits
  pid_t children[2];
  for (pid_t& c : children) {
    c = repro::fork_tied_child();
    if (c < 0) return 1;
    if (c == 0) {
      char b;
      (void)!read(fds[0], &b, 1);
      _exit(0);
    }
  }
  std::thread([&] {
    char b;
    (void)!read(fds[0], &b, 1);
  }).detach();
  std::thread([] { syscall(SYS_futex, &never, FUTEX_WAIT_PRIVATE, 0, nullptr, nullptr, 0); }).detach();
  std::thread([] { sleep(1000); }).detach();
  std::printf("READY pid=%d children=%d,%d\n", getpid(), children[0], children[1]);
  std::fflush(stdout);
  timespec delay{delay_us / 1000000, (delay_us % 1000000) * 1000};
  nanosleep(&delay, nullptr);
  _exit(0);
}
