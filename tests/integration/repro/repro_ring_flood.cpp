// A hung job that also floods the live tracer's ring buffer:
//
//   parent P, thread "holder":   locks m, then pause()s forever with it held
//   child  C (forked after):     pthread_mutex_lock(&m) on its copy: blocks
//                                forever (orphaned-lock, as in
//                                repro_fork_locked_mutex.cpp)
//   parent P, threads "ping" and "pong": hand a turn back and forth over two
//                                futex words without end, each handing a
//                                real FUTEX_WAIT (a record per wait with
//                                --min-block-ms 0)
//   parent P, main thread:       waitpid(C)
//
// Prints "READY pid=P child=C holder=H" once the child exists and the
// ping-pong runs.
#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <thread>

#include "repro.h"

namespace {

pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;
std::atomic<int> holder_tid{0};
std::atomic<uint64_t> rounds{0};
alignas(64) uint32_t ping_word = 0;
alignas(64) uint32_t pong_word = 0;

long futex(uint32_t* word, int op, uint32_t val) {
  return syscall(SYS_futex, word, op, val, nullptr, nullptr, 0);
}

// Until the peer is asleep on `word` and this call woke it.
void wake_one(uint32_t* word) {
  while (futex(word, FUTEX_WAKE_PRIVATE, 1) != 1) sched_yield();
}

void holder() {
  pthread_setname_np(pthread_self(), "holder");
  pthread_mutex_lock(&g_mutex);
  holder_tid = static_cast<int>(gettid());
  for (;;) pause();
}

}  // namespace

int main() {
  std::thread(holder).detach();
  while (holder_tid.load() == 0) sched_yield();
  pid_t child = repro::fork_tied_child();
  if (child < 0) return 1;
  if (child == 0) {
    pthread_mutex_lock(&g_mutex);  // the owner is not in this process
    _exit(0);
  }
  std::thread([] {
    pthread_setname_np(pthread_self(), "pong");
    for (;;) {
      futex(&pong_word, FUTEX_WAIT_PRIVATE, 0);
      wake_one(&ping_word);
    }
  }).detach();
  std::thread([] {
    pthread_setname_np(pthread_self(), "ping");
    for (;;) {
      wake_one(&pong_word);
      futex(&ping_word, FUTEX_WAIT_PRIVATE, 0);
      rounds.fetch_add(1, std::memory_order_relaxed);
    }
  }).detach();
  while (rounds.load() < 1000) sched_yield();
  std::printf("READY pid=%d child=%d holder=%d\n", getpid(), child, holder_tid.load());
  std::fflush(stdout);
  int status = 0;
  while (waitpid(child, &status, 0) < 0) {
  }
  return 0;
}
