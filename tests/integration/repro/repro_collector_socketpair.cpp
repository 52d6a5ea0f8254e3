// A unix socketpair split across fork: the child blocks in recv on its end,
// the parent holds the other end and never sends.
//   READY parent=PID child=PID parent_fd=N child_fd=N
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>

int main() {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 1;
  pid_t child = fork();
  if (child < 0) return 1;
  if (child == 0) {
    close(sv[0]);
    char c;
    for (;;) (void)recv(sv[1], &c, 1, 0);
  }
  close(sv[1]);
  std::printf("READY parent=%d child=%d parent_fd=%d child_fd=%d\n", getpid(), child, sv[0], sv[1]);
  std::fflush(stdout);
  for (;;) pause();
}
