// What several reproducers (tests/integration/repro/*.cpp) do alike: read
// their gate, wait for the test's go signal, fork a child that dies with them.
#pragma once

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdio>

namespace repro {

// One line from `fd` (a gate the test writes "go\n" to); false at EOF.
inline bool read_line(int fd) {
  char c;
  for (;;) {
    ssize_t n = read(fd, &c, 1);
    if (n <= 0) return false;
    if (c == '\n') return true;
  }
}

// Prints "READY <pid>" and returns on SIGUSR1 (blocked first, so one sent
// right after the line is not lost): the test attaches (tracer, cgroup)
// before the reproducer acts.
inline void ready_then_wait_for_usr1() {
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  sigprocmask(SIG_BLOCK, &usr1, nullptr);
  std::printf("READY %d\n", static_cast<int>(getpid()));
  std::fflush(stdout);
  int sig = 0;
  sigwait(&usr1, &sig);
}

// fork(), the child killed when the parent dies (and gone at once if the
// parent already is): a test's kill of the parent leaves no stray child.
// -1 (with perror) when fork fails.
inline pid_t fork_tied_child() {
  pid_t parent = getpid();
  pid_t child = fork();
  if (child < 0) {
    perror("fork");
    return -1;
  }
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
  }
  return child;
}

}  // namespace repro
