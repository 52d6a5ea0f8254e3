// Futex ping-pong for the live tracer: two threads hand a turn back and forth
// N times over two private futex words. Nobody ever changes a word's value,
// so every FUTEX_WAIT really sleeps until woken, and the waker retries
// FUTEX_WAKE until it woke its peer: each round is exactly one wait and one
// wake (ret 1) per thread. A waits with a 10 s relative timeout, B without.
//   argv: GATE_FD N [hold]  (GATE_FD: a line on it starts the activity;
//         0 = stdin; hold: A and B stay alive, parked, after their rounds)
//   READY pid=PID a_word=0xADDR b_word=0xADDR
//   (line on GATE_FD)
//   DONE a_tid=TID b_tid=TID
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <thread>

#include "repro.h"

namespace {

alignas(64) uint32_t a_word = 0;   // A sleeps here
alignas(64) uint32_t b_word = 0;   // B sleeps here
alignas(64) uint32_t parked = 0;   // with hold: how many of A and B are done
alignas(64) uint32_t forever = 0;  // ... where they then sleep
std::atomic<int> a_tid{0}, b_tid{0};

long futex(uint32_t* word, int op, uint32_t val, const timespec* timeout) {
  return syscall(SYS_futex, word, op, val, timeout, nullptr, 0);
}

// With hold: counts this thread done, tells main, and sleeps until killed.
void park() {
  __atomic_add_fetch(&parked, 1, __ATOMIC_SEQ_CST);
  futex(&parked, FUTEX_WAKE_PRIVATE, 1, nullptr);
  for (;;) futex(&forever, FUTEX_WAIT_PRIVATE, 0, nullptr);
}

// Until the peer is asleep on `word` and this call woke it.
void wake_one(uint32_t* word) {
  while (futex(word, FUTEX_WAKE_PRIVATE, 1, nullptr) != 1) sched_yield();
}

}  // namespace

int main(int argc, char** argv) {
  int gate = argc > 1 ? std::atoi(argv[1]) : 0;
  int rounds = argc > 2 ? std::atoi(argv[2]) : 1000;
  const bool hold = argc > 3 && std::string_view(argv[3]) == "hold";
  std::printf("READY pid=%d a_word=%#lx b_word=%#lx\n", getpid(), reinterpret_cast<unsigned long>(&a_word),
              reinterpret_cast<unsigned long>(&b_word));
  std::fflush(stdout);
  if (!repro::read_line(gate)) return 1;

  std::thread b([&] {
    b_tid = static_cast<int>(gettid());
    for (int i = 0; i < rounds; ++i) {
      futex(&b_word, FUTEX_WAIT_PRIVATE, 0, nullptr);
      wake_one(&a_word);
    }
    if (hold) park();
  });
  std::thread a([&] {
    a_tid = static_cast<int>(gettid());
    const timespec ten_s{10, 0};
    for (int i = 0; i < rounds; ++i) {
      wake_one(&b_word);
      futex(&a_word, FUTEX_WAIT_PRIVATE, 0, &ten_s);
    }
    if (hold) park();
  });
  if (hold) {
    for (uint32_t n; (n = __atomic_load_n(&parked, __ATOMIC_SEQ_CST)) < 2;)
      futex(&parked, FUTEX_WAIT_PRIVATE, n, nullptr);
    a.detach();
    b.detach();
  } else {
    a.join();
    b.join();
  }
  std::printf("DONE a_tid=%d b_tid=%d\n", a_tid.load(), b_tid.load());
  std::fflush(stdout);
  repro::read_line(gate);  // stays until killed
  return 0;
}
