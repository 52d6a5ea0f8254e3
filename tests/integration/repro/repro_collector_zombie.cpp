// A parent that never reaps its child, which exits with status 7.
//   READY parent=PID child=PID
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

int main() {
  pid_t child = fork();
  if (child < 0) return 1;
  if (child == 0) _exit(7);
  // Wait until it is a zombie (without reaping it) so READY means it.
  siginfo_t info{};
  waitid(P_PID, child, &info, WEXITED | WNOWAIT);
  std::printf("READY parent=%d child=%d\n", getpid(), child);
  std::fflush(stdout);
  for (;;) pause();
}
