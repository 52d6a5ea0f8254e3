// Two threads blocked for good in two different syscalls, for the task
// iterator test: main in read() on a pipe nobody writes, the other in
// FUTEX_WAIT_PRIVATE (no timeout) on a word only it knows. Prints
// "READY <pid> <futex tid>" once both threads exist.
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <thread>

int main() {
  int fds[2];
  if (pipe(fds) != 0) return 1;

  std::atomic<pid_t> waiter_tid{0};
  std::thread waiter([&] {
    waiter_tid.store(static_cast<pid_t>(syscall(SYS_gettid)));
    static uint32_t word = 0;
    for (;;) syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, nullptr, nullptr, 0);
  });
  // The marker must not precede the thread: the test counts threads.
  while (waiter_tid.load() == 0) std::this_thread::yield();

  std::printf("READY %d %d\n", static_cast<int>(getpid()), static_cast<int>(waiter_tid.load()));
  std::fflush(stdout);

  waiter.detach();

  // We hold the write end ourselves, so this read never sees EOF.
  char c;
  while (read(fds[0], &c, 1) < 0) {
  }
  return 0;
}
