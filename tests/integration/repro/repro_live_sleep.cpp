// One 50 ms sleep for the live tracer, then exit.
//   argv: GATE_FD  (a line on it starts the sleep; 0 = stdin)
//   READY pid=PID
//   (line on GATE_FD)
//   DONE
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

int main(int argc, char** argv) {
  int gate = argc > 1 ? std::atoi(argv[1]) : 0;
  std::printf("READY pid=%d\n", getpid());
  std::fflush(stdout);
  char c;
  do {
    if (read(gate, &c, 1) != 1) return 1;
  } while (c != '\n');
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // clock_nanosleep(2)
  std::printf("DONE\n");
  std::fflush(stdout);
  return 0;
}
