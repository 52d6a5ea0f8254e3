// A thread blocked in read() on a pipe nobody writes, three calls deep in
// code built without frame pointers (tests/CMakeLists.txt: -O2
// -fomit-frame-pointer): only CFI can unwind it.
//   READY pid=PID
#include <unistd.h>

#include <cstdio>

namespace nofp {

// Keeps each function's own frame: without it -O2 could fold the chain.
volatile int sink = 0;

__attribute__((noinline)) int inner_blocks_on_pipe(int fd) {
  char c = 0;
  std::printf("READY pid=%d\n", getpid());
  std::fflush(stdout);
  ssize_t n = read(fd, &c, 1);  // never returns: main keeps the write end open
  sink = sink + c;
  return static_cast<int>(n);
}

__attribute__((noinline)) int middle(int fd) {
  int r = inner_blocks_on_pipe(fd);
  sink = sink + 1;
  return r + sink;
}

__attribute__((noinline)) int outer(int fd) {
  int r = middle(fd);
  sink = sink + 2;
  return r + sink;
}

}  // namespace nofp

int main() {
  int fds[2];
  if (pipe(fds) != 0) return 1;
  return nofp::outer(fds[0]) == 12345 ? 0 : 1;
}
