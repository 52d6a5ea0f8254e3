// A two-process deadlock through a pipe and a process-shared mutex:
//
//   parent P: pthread_mutex_lock(m)  -> holds m
//             read(pipe)             -> waits for the child to write
//   child  C: pthread_mutex_lock(m)  -> waits for P to unlock
//             write(pipe)            -> never reached
//
// P closed its own write end, so C is the only writer: P waits on C (pipe),
// C waits on P (mutex owner). Expected finding: deadlock-cycle, certain,
// pids {P, C}.
//
// Prints "READY <P> <C>" once both are in place, then both block forever.
// The test checks /proc for P in read(2) and C in futex(2) before it looks.
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "repro.h"

int main() {
  // The mutex lives in memory that both processes share after fork().
  void* mem =
      mmap(nullptr, sizeof(pthread_mutex_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  auto* m = static_cast<pthread_mutex_t*>(mem);
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutex_init(m, &attr);

  int fds[2];
  if (pipe(fds) != 0) {
    perror("pipe");
    return 1;
  }

  pthread_mutex_lock(m);  // P owns the mutex before the child exists

  pid_t parent = getpid();
  pid_t child = repro::fork_tied_child();
  if (child < 0) return 1;
  if (child == 0) {
    close(fds[0]);          // C only writes
    pthread_mutex_lock(m);  // blocks: P holds it
    const char byte = 'x';
    (void)!write(fds[1], &byte, 1);  // never reached
    pthread_mutex_unlock(m);
    _exit(0);
  }

  close(fds[1]);  // P only reads: C is the sole writer
  std::printf("READY %d %d\n", parent, child);
  std::fflush(stdout);
  char byte;
  for (;;) {
    ssize_t n = read(fds[0], &byte, 1);  // blocks: C is stuck on the mutex
    if (n == 0) return 0;                // not reached
  }
}
