// Allocates and touches memory until the OOM killer ends it. Prints
// "READY <pid>" and waits for SIGUSR1 first, so the test can put it in a
// memory cgroup and attach the tracer before any allocation.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

// Published so the compiler cannot drop the allocation and the writes.
char* volatile g_last = nullptr;

int main() {
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  sigprocmask(SIG_BLOCK, &usr1, nullptr);
  std::printf("READY %d\n", static_cast<int>(getpid()));
  std::fflush(stdout);
  int sig = 0;
  sigwait(&usr1, &sig);

  const size_t chunk = 1 << 20;
  for (;;) {
    // Leaked on purpose: every page stays resident until the kill.
    char* p = static_cast<char*>(std::malloc(chunk));
    if (!p) continue;
    std::memset(p, 0x5a, chunk);
    g_last = p;
  }
}
