// The classic "forgot to close my copy of the write end" bug:
//
//   reader R: pipe(); fork() writers W1..Wn; each writes a line and exits.
//             R never closes its own copy of the write end, so after every
//             writer is gone read() does not see EOF and blocks forever.
//
// Expected finding: dead-peer on the pipe, pids include R (the only process
// that still holds the write end is R itself).
//
//   repro_dead_writer            writers exit and are reaped
//   repro_dead_writer --zombie   the last writer is left a zombie (not reaped)
//   repro_dead_writer --writers N  (default 2)
//
// Prints "READY <R> <W1> ... <Wn>" once every writer has exited and all their
// data was read, just before the read() that never returns.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  bool zombie = false;
  int writers = 2;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--zombie") == 0)
      zombie = true;
    else if (std::strcmp(argv[i], "--writers") == 0 && i + 1 < argc)
      writers = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s [--zombie] [--writers N]\n", argv[0]);
      return 1;
    }
  }
  if (writers < 1) writers = 1;

  int fds[2];
  if (pipe(fds) != 0) {
    perror("pipe");
    return 1;
  }

  std::vector<pid_t> pids;
  for (int i = 0; i < writers; ++i) {
    pid_t w = fork();
    if (w < 0) {
      perror("fork");
      return 1;
    }
    if (w == 0) {
      close(fds[0]);
      std::string line = "result " + std::to_string(i) + "\n";
      (void)!write(fds[1], line.data(), line.size());
      _exit(0);  // the writer is done: its write end closes
    }
    pids.push_back(w);
  }
  // The bug: fds[1] stays open here.

  // Consume every writer's line first, so the final read() has nothing queued.
  int lines = 0;
  char buf[256];
  while (lines < writers) {
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n <= 0) {
      perror("read");
      return 1;
    }
    for (ssize_t k = 0; k < n; ++k) lines += buf[k] == '\n';
  }

  // Wait until every writer has exited; reap all but (with --zombie) the last.
  for (size_t i = 0; i < pids.size(); ++i) {
    bool keep_zombie = zombie && i + 1 == pids.size();
    siginfo_t info{};
    int flags = WEXITED | (keep_zombie ? WNOWAIT : 0);
    if (waitid(P_PID, static_cast<id_t>(pids[i]), &info, flags) != 0) {
      perror("waitid");
      return 1;
    }
  }

  std::printf("READY %d", getpid());
  for (pid_t w : pids) std::printf(" %d", w);
  std::printf("\n");
  std::fflush(stdout);

  for (;;) {
    ssize_t n = read(fds[0], buf, sizeof buf);  // blocks forever: R holds the write end
    if (n == 0) return 0;                       // not reached
  }
}
