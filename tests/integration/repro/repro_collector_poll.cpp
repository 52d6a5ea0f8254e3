// poll() on two fds (a pipe's read end and one end of a socketpair) with a
// 5000 ms timeout, again and again; nothing ever becomes ready.
//   READY pid=PID pipe_fd=N socket_fd=N
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>

int main() {
  int p[2], sv[2];
  if (pipe(p) != 0 || socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 1;
  std::printf("READY pid=%d pipe_fd=%d socket_fd=%d\n", getpid(), p[0], sv[0]);
  std::fflush(stdout);
  for (;;) {
    pollfd fds[2] = {{p[0], POLLIN, 0}, {sv[0], POLLIN, 0}};
    (void)poll(fds, 2, 5000);
  }
}
