// Event storm: ITERATIONS syscalls that each return at once and each become
// one live record under `hangtrace --min-block-ms 0` (every wait streamed) --
// the transport's and the aggregator's rate, not a realistic job.
//
//   default  FUTEX_WAIT on a word whose value does not match: EAGAIN at once,
//            still a futex-wait record (HT_EV_FUTEX_WAIT, 0 ns blocked)
//   --pipe   read() on an empty O_NONBLOCK pipe: EAGAIN at once, still a
//            blocking-syscall record (HT_EV_SYSCALL_BLOCK, fd resolved)
//   --poll   poll() of no fds with a 0 timeout: returns 0 at once, still a
//            blocking-syscall record; the cheapest traced call this kernel
//            has, so the most records one CPU can produce (the transport's
//            and the aggregator's ceiling, not the syscall's)
//
// Single-threaded: pinned to one CPU (as scripts/bench_live.sh runs it) more
// threads would only share that CPU.
#include <linux/futex.h>
#include <poll.h>
#include <sys/syscall.h>

#include <cstring>
#include <vector>

#include "bench_common.h"

int main(int argc, char** argv) {
  bool use_pipe = false;
  bool use_poll = false;
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--pipe") == 0) {
      use_pipe = true;
    } else if (std::strcmp(argv[i], "--poll") == 0) {
      use_poll = true;
    } else {
      rest.push_back(argv[i]);
    }
  }
  bench::Args args = bench::parse(static_cast<int>(rest.size()), rest.data());
  int fds[2];
  if (use_pipe && pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) bench::die("create a pipe");
  static int word = 0;
  bench::wait_gate(args);
  long n = args.iterations;
  long long t0 = bench::now_ns();
  if (use_poll) {
    for (long i = 0; i < n; ++i) {
      if (poll(nullptr, 0, 0) != 0) bench::die("poll no fds");
    }
  } else if (use_pipe) {
    char c;
    for (long i = 0; i < n; ++i) {
      if (read(fds[0], &c, 1) != -1 || errno != EAGAIN) bench::die("read an empty pipe");
    }
  } else {
    for (long i = 0; i < n; ++i) {
      // *word is 0, not 1: the kernel returns EAGAIN without sleeping.
      if (syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 1, nullptr, nullptr, 0) != -1 || errno != EAGAIN)
        bench::die("FUTEX_WAIT on a mismatched word");
    }
  }
  bench::report(args, bench::now_ns() - t0);
  return 0;
}
