// A process tree for the live process tracer. Prints "READY <pid>", then
// waits for SIGUSR1 (so the tracer attaches first) and forks child C, which
// forks G (waits to be killed) and S (G's sibling, which sends G SIGBUS).
// C reaps both, prints "TREE <c> <g> <s>" and exits with status 7; the main
// process reaps C, prints "DONE <status>" and waits to be killed.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

#include "repro.h"

int main() {
  repro::ready_then_wait_for_usr1();

  pid_t c = fork();
  if (c < 0) return 1;
  if (c == 0) {
    pid_t g = fork();
    if (g == 0) {
      // Not dumpable: SIGBUS would otherwise run the core dump handler.
      prctl(PR_SET_DUMPABLE, 0);
      for (;;) pause();
    }
    pid_t s = fork();
    if (s == 0) {
      kill(g, SIGBUS);
      _exit(0);
    }
    waitpid(g, nullptr, 0);
    waitpid(s, nullptr, 0);
    std::printf("TREE %d %d %d\n", static_cast<int>(getpid()), static_cast<int>(g), static_cast<int>(s));
    std::fflush(stdout);
    _exit(7);
  }
  int status = 0;
  waitpid(c, &status, 0);
  std::printf("DONE %d\n", status);
  std::fflush(stdout);
  for (;;) pause();
}
