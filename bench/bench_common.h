// Shared by the live-tracing overhead workloads (scripts/bench_live.sh compiles
// each bench/*.cpp on its own with g++ -O2; no CMake target on purpose: they
// are benchmark inputs, not part of the product).
//
// Every workload takes:  ITERATIONS --out FILE [--gate FIFO]
//   --gate: read one byte from FIFO before the timed loop, so a tracer that
//           attaches to a running pid (offcputime -p) is attached before the
//           loop starts;
//   --out:  where the one result line goes ("iters=N loop_ns=T"), so it cannot
//           mix with what a tracer prints on stdout.
// Only the hot loop is timed: exec, dynamic linking and a tracer's own start-up
// are not the workload's slowdown.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

namespace bench {

struct Args {
  long iterations = 0;
  std::string out;
  std::string gate;
};

[[noreturn]] inline void die(const char* what) {
  std::fprintf(stderr, "bench: failed to %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

inline Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "--out" && i + 1 < argc) {
      a.out = argv[++i];
    } else if (s == "--gate" && i + 1 < argc) {
      a.gate = argv[++i];
    } else {
      a.iterations = std::atol(argv[i]);
    }
  }
  if (a.iterations <= 0 || a.out.empty()) {
    std::fprintf(stderr, "usage: %s ITERATIONS --out FILE [--gate FIFO]\n", argv[0]);
    std::exit(2);
  }
  return a;
}

inline void wait_gate(const Args& a) {
  if (a.gate.empty()) return;
  int fd = open(a.gate.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) die("open the gate");
  char c;
  while (read(fd, &c, 1) < 0 && errno == EINTR) {
  }
  close(fd);
}

inline long long now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

inline void report(const Args& a, long long loop_ns) {
  FILE* f = std::fopen(a.out.c_str(), "w");
  if (!f) die("write the result");
  std::fprintf(f, "iters=%ld loop_ns=%lld\n", a.iterations, loop_ns);
  std::fclose(f);
}

}  // namespace bench
