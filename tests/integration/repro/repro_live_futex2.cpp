// The newer futex syscalls for the live tracer: futex_waitv(2) on one word,
// then futex_wait(2), each with an absolute CLOCK_MONOTONIC timeout 20 ms
// ahead that nobody beats (both return ETIMEDOUT).
//   argv: GATE_FD  (a line on it starts the waits; 0 = stdin)
//   READY pid=PID word=0xADDR
//   (line on GATE_FD)
//   DONE waitv=ERRNO wait=ERRNO
#include <errno.h>
#include <linux/futex.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "hangtrace/syscall_nr.h"

// Linux 6.7's names for them; older <linux/futex.h> lack these.
#ifndef FUTEX2_SIZE_U32
#define FUTEX2_SIZE_U32 FUTEX_32
#endif
#ifndef FUTEX2_PRIVATE
#define FUTEX2_PRIVATE FUTEX_PRIVATE_FLAG
#endif

namespace {

alignas(64) uint32_t word = 0;

timespec in_20ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_nsec += 20'000'000;
  if (ts.tv_nsec >= 1'000'000'000) {
    ts.tv_sec += 1;
    ts.tv_nsec -= 1'000'000'000;
  }
  return ts;
}

}  // namespace

int main(int argc, char** argv) {
  int gate = argc > 1 ? std::atoi(argv[1]) : 0;
  std::printf("READY pid=%d word=%#lx\n", getpid(), reinterpret_cast<unsigned long>(&word));
  std::fflush(stdout);
  char c;
  do {
    if (read(gate, &c, 1) != 1) return 1;
  } while (c != '\n');

  futex_waitv w{0, reinterpret_cast<uint64_t>(&word), FUTEX2_SIZE_U32 | FUTEX2_PRIVATE, 0};
  timespec t1 = in_20ms();
  long r1 = syscall(HT_NR_futex_waitv, &w, 1, 0, &t1, CLOCK_MONOTONIC);
  int e1 = r1 < 0 ? errno : 0;
  timespec t2 = in_20ms();
  long r2 = syscall(HT_NR_futex_wait, &word, 0, 0xfffffffful, FUTEX2_SIZE_U32 | FUTEX2_PRIVATE, &t2,
                    CLOCK_MONOTONIC);
  int e2 = r2 < 0 ? errno : 0;
  std::printf("DONE waitv=%d wait=%d\n", e1, e2);
  std::fflush(stdout);
  return 0;
}
