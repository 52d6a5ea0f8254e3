// Memory growth: after a line on stdin, allocates and touches 256 MiB in
// 16 MiB steps, then waits for another line.
//   READY pid=PID
//   DONE
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

int main() {
  std::printf("READY pid=%d\n", getpid());
  std::fflush(stdout);
  std::string line;
  std::getline(std::cin, line);
  const size_t step = 16 << 20;
  for (int i = 0; i < 16; ++i) {
    void* p = mmap(nullptr, step, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 2;
    std::memset(p, i + 1, step);  // touched: resident, counted in RSS
  }
  std::printf("DONE\n");
  std::fflush(stdout);
  std::getline(std::cin, line);
  return 0;
}
