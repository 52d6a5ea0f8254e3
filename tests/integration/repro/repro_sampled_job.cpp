// A job for the daemon's sampled steady state: its main thread is woken
// from an untimed pipe read every 20 ms by a helper thread (healthy: the
// sampled "main thread woken" progress), until "go" on stdin; then one read
// waits 1.5 s (a long wait only sampling sees), prints "LONG", and the next
// read waits forever (hung: nothing will write). Prints "READY <pid>" first.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

int main() {
  int p[2];
  if (pipe(p) != 0) return 1;
  std::atomic<bool> go{false};
  std::thread helper([&] {
    while (!go.load()) {
      if (write(p[1], "t", 1) != 1) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    if (write(p[1], "L", 1) != 1) return;
    // Then nothing more, ever.
    for (;;) pause();
  });
  std::thread stdin_reader([&] {
    char line[16];
    if (std::fgets(line, sizeof line, stdin)) go = true;
  });
  std::printf("READY %d\n", static_cast<int>(getpid()));
  std::fflush(stdout);
  for (char c = 0; c != 'L';)
    if (read(p[0], &c, 1) != 1) return 1;
  std::printf("LONG\n");
  std::fflush(stdout);
  char c;
  return static_cast<int>(read(p[0], &c, 1));  // forever
}
