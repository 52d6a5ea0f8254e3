// Pipe ping-pong between two processes for the live tracer: the parent writes
// a byte down one pipe, the child answers on the other, N times. The child
// answers once the parent is asleep in its read (or after 5 ms): else, on a
// busy machine, the child can run and answer before the parent reaches its
// read every time, and no read ever sleeps.
//   argv: GATE_FD N  (GATE_FD: a line on it starts the activity; 0 = stdin)
//   READY parent=PID child=PID p2c_r=FD p2c_w=FD c2p_r=FD c2p_w=FD
//   (line on GATE_FD)
//   DONE reads_slept=K   (K: the parent's reads of the answer that slept --
//                         its voluntary context switches rose across them)
#include <fcntl.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "repro.h"

int main(int argc, char** argv) {
  int gate = argc > 1 ? std::atoi(argv[1]) : 0;
  int rounds = argc > 2 ? std::atoi(argv[2]) : 1000;
  int p2c[2], c2p[2];
  if (pipe(p2c) != 0 || pipe(c2p) != 0) return 1;
  pid_t parent = getpid();
  pid_t child = repro::fork_tied_child();
  if (child < 0) return 1;
  if (child == 0) {
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%d/stat", parent);
    const int stat_fd = open(path, O_RDONLY | O_CLOEXEC);
    auto parent_asleep = [stat_fd] {
      char buf[512];
      ssize_t n = pread(stat_fd, buf, sizeof buf - 1, 0);
      if (n <= 0) return true;  // unreadable: do not wait for it
      buf[n] = '\0';
      const char* close_paren = std::strrchr(buf, ')');
      return !close_paren || close_paren[1] != ' ' || close_paren[2] == 'S';
    };
    char byte;
    for (;;) {
      if (read(p2c[0], &byte, 1) != 1) _exit(0);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(5);
      while (!parent_asleep() && std::chrono::steady_clock::now() < deadline) sched_yield();
      if (write(c2p[1], &byte, 1) != 1) _exit(1);
    }
  }
  std::printf("READY parent=%d child=%d p2c_r=%d p2c_w=%d c2p_r=%d c2p_w=%d\n", parent, child, p2c[0], p2c[1],
              c2p[0], c2p[1]);
  std::fflush(stdout);
  if (!repro::read_line(gate)) return 1;
  char byte = 'x';
  int reads_slept = 0;
  for (int i = 0; i < rounds; ++i) {
    rusage before{}, after{};
    if (write(p2c[1], &byte, 1) != 1 || getrusage(RUSAGE_THREAD, &before) != 0 ||
        read(c2p[0], &byte, 1) != 1 || getrusage(RUSAGE_THREAD, &after) != 0)
      return 1;
    reads_slept += after.ru_nvcsw > before.ru_nvcsw;
  }
  std::printf("DONE reads_slept=%d\n", reads_slept);
  std::fflush(stdout);
  repro::read_line(gate);  // stays until killed
  return 0;
}
