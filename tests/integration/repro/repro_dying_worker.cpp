// A main process and one forked worker (same command line, like a DataLoader
// worker), both blocked, for the daemon's incident triggers. Prints
// "READY <main> <worker>"; on "go" on stdin the worker dies as argv[1] says:
//   sigbus  touches a page of a mapping past the end of its file (a real SIGBUS)
//   exit3   exits with status 3
//   term    is sent SIGTERM by the main process (an ordinary stop)
// The main process reaps it, prints "REAPED <status>" and blocks again.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const char* mode = argv[1];
  int go[2];
  if (pipe(go) != 0) return 1;
  pid_t worker = fork();
  if (worker == 0) {
    close(go[1]);
    char c;
    if (read(go[0], &c, 1) != 1) _exit(1);
    if (std::strcmp(mode, "sigbus") == 0) {
      char path[] = "/tmp/repro-dying-worker-XXXXXX";
      int fd = mkstemp(path);
      unlink(path);
      if (fd < 0 || ftruncate(fd, 4096) != 0) _exit(1);
      auto* p = static_cast<volatile char*>(mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
      if (p == MAP_FAILED || ftruncate(fd, 0) != 0) _exit(1);
      p[0] = 1;  // past the end of the file now: SIGBUS
      _exit(1);
    }
    if (std::strcmp(mode, "exit3") == 0) _exit(3);
    for (;;) pause();
  }
  close(go[0]);
  std::printf("READY %d %d\n", static_cast<int>(getpid()), static_cast<int>(worker));
  std::fflush(stdout);
  char line[16];
  if (!std::fgets(line, sizeof line, stdin)) return 1;
  // SIGTERM'd, the worker never reads the pipe: writing to it could only
  // raise SIGPIPE here.
  if (std::strcmp(mode, "term") == 0)
    kill(worker, SIGTERM);
  else if (write(go[1], "g", 1) != 1)
    return 1;
  int status = 0;
  waitpid(worker, &status, 0);
  std::printf("REAPED %d\n", status);
  std::fflush(stdout);
  for (;;) pause();
}
