// Pipe ping-pong: two processes pass one byte back and forth over two pipes,
// ITERATIONS round trips; each read blocks until the other side writes.
#include <sys/wait.h>

#include "bench_common.h"

int main(int argc, char** argv) {
  bench::Args args = bench::parse(argc, argv);
  int ping[2], pong[2];
  if (pipe(ping) != 0 || pipe(pong) != 0) bench::die("create pipes");
  bench::wait_gate(args);
  long long t0 = bench::now_ns();
  pid_t child = fork();
  if (child < 0) bench::die("fork");
  char c = 0;
  if (child == 0) {
    for (long i = 0; i < args.iterations; ++i) {
      if (read(ping[0], &c, 1) != 1 || write(pong[1], &c, 1) != 1) _exit(1);
    }
    _exit(0);
  }
  for (long i = 0; i < args.iterations; ++i) {
    if (write(ping[1], &c, 1) != 1 || read(pong[0], &c, 1) != 1) bench::die("ping-pong");
  }
  int status = 0;
  if (waitpid(child, &status, 0) != child || status != 0) bench::die("reap the child");
  bench::report(args, bench::now_ns() - t0);
  return 0;
}
