// Allocates and touches memory until the OOM killer ends it. Prints
// "READY <pid>" and waits for SIGUSR1 first, so the test can put it in a
// memory cgroup and attach the tracer before any allocation.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "repro.h"

// Published so the compiler cannot drop the allocation and the writes.
char* volatile g_last = nullptr;

int main() {
  repro::ready_then_wait_for_usr1();

  const size_t chunk = 1 << 20;
  for (;;) {
    // Leaked on purpose: every page stays resident until the kill.
    char* p = static_cast<char*>(std::malloc(chunk));
    if (!p) continue;
    std::memset(p, 0x5a, chunk);
    g_last = p;
  }
}
