// Futex ping-pong: two threads hand a turn back and forth through one futex
// word, ITERATIONS round trips; each side sleeps in FUTEX_WAIT until the other
// wakes it (the lock/condition handoff of a DataLoader's queues).
#include <linux/futex.h>
#include <sys/syscall.h>

#include <atomic>
#include <thread>

#include "bench_common.h"

namespace {

std::atomic<int> turn{0};  // 0: ping's turn, 1: pong's turn

void futex_wait(int expected) {
  syscall(SYS_futex, reinterpret_cast<int*>(&turn), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
}

void futex_wake() {
  syscall(SYS_futex, reinterpret_cast<int*>(&turn), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

}  // namespace

int main(int argc, char** argv) {
  bench::Args args = bench::parse(argc, argv);
  bench::wait_gate(args);
  long n = args.iterations;
  long long t0 = bench::now_ns();
  std::thread pong([n] {
    for (long i = 0; i < n; ++i) {
      while (turn.load() != 1) futex_wait(0);
      turn.store(0);
      futex_wake();
    }
  });
  for (long i = 0; i < n; ++i) {
    turn.store(1);
    futex_wake();
    while (turn.load() != 0) futex_wait(1);
  }
  pong.join();
  bench::report(args, bench::now_ns() - t0);
  return 0;
}
