// For the on-CPU sampler: one thread burns CPU in burn_cpu_here() while the
// main thread sits blocked reading its gate.
//   READY pid=PID burner=TID main=TID burn=ADDR
//   (EOF or a line on stdin ends it)
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <thread>

std::atomic<bool> g_stop{false};
std::atomic<int> g_burner{0};

// Out of line and not folded into its caller: the samples' innermost frame.
extern "C" __attribute__((noinline)) unsigned long burn_cpu_here(unsigned long n) {
  volatile unsigned long x = n;
  while (!g_stop.load(std::memory_order_relaxed))
    for (int i = 0; i < 100000; ++i) x = x * 2862933555777941757ul + 3037000493ul;
  return x;
}

int main() {
  std::thread burner([] {
    g_burner = static_cast<int>(syscall(SYS_gettid));
    burn_cpu_here(1);
  });
  while (g_burner.load() == 0) std::this_thread::yield();
  std::printf("READY pid=%d burner=%d main=%d burn=%p\n", getpid(), g_burner.load(),
              static_cast<int>(syscall(SYS_gettid)), reinterpret_cast<void*>(&burn_cpu_here));
  std::fflush(stdout);
  char c;
  while (read(0, &c, 1) == 1 && c != '\n') {
  }
  g_stop = true;
  burner.join();
  return 0;
}
