// A pipe handover slow enough that every wait is reported and every wakeup
// recorded: the child writes one byte every INTERVAL_MS, N times; the parent
// blocks in read() for each. Both exit 0.
//   argv: N INTERVAL_MS
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s N INTERVAL_MS\n", argv[0]);
    return 2;
  }
  int n = std::atoi(argv[1]);
  long interval_ms = std::atol(argv[2]);
  int fds[2];
  if (pipe(fds) != 0) return 1;
  pid_t child = fork();
  if (child < 0) return 1;
  if (child == 0) {
    close(fds[0]);
    timespec ts{interval_ms / 1000, (interval_ms % 1000) * 1000000};
    for (int i = 0; i < n; ++i) {
      nanosleep(&ts, nullptr);
      if (write(fds[1], "x", 1) != 1) _exit(1);
    }
    _exit(0);
  }
  close(fds[1]);
  char c;
  for (int i = 0; i < n; ++i)
    if (read(fds[0], &c, 1) != 1) return 1;
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
