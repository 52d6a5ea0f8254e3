// A parent and its forked child joined by a pipe: the child blocks reading
// the read end, the parent holds the write end and never writes.
//   READY parent=PID child=PID read_fd=N write_fd=N
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

int main() {
  int fds[2];
  if (pipe(fds) != 0) return 1;
  pid_t child = fork();
  if (child < 0) return 1;
  if (child == 0) {
    close(fds[1]);
    char c;
    (void)read(fds[0], &c, 1);  // never returns: the parent keeps the write end
    _exit(0);
  }
  close(fds[0]);
  std::printf("READY parent=%d child=%d read_fd=%d write_fd=%d\n", getpid(), child, fds[0], fds[1]);
  std::fflush(stdout);
  for (;;) pause();
}
