// fork() while another thread holds a mutex:
//
//   parent P, thread H ("holder"): pthread_mutex_lock(&m), then pause()s
//                                  forever with m held (blocked elsewhere).
//   parent P, main thread:         fork(), then waitpid(child).
//   child  C (single-threaded):    pthread_mutex_lock(&m) on its copy of m.
//
// C's copy of m says "locked by H", but H does not exist in C: nobody in C
// can ever unlock it. Expected finding: orphaned-lock, certain, pids include
// C, details.owner_tid = H's TID.
//
// Prints "READY <P> <C> <H>" once the child exists, then everything blocks
// forever (P in wait4, H in pause, C in futex).
#include <pthread.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

#include "repro.h"

static pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;  // private, normal
static pthread_mutex_t g_ready_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_ready_cv = PTHREAD_COND_INITIALIZER;
static bool g_locked = false;
static pid_t g_holder_tid = 0;

static void* holder(void*) {
  pthread_setname_np(pthread_self(), "holder");
  pthread_mutex_lock(&g_mutex);
  pthread_mutex_lock(&g_ready_mu);
  g_holder_tid = static_cast<pid_t>(syscall(SYS_gettid));
  g_locked = true;
  pthread_cond_signal(&g_ready_cv);
  pthread_mutex_unlock(&g_ready_mu);
  for (;;) pause();  // holds g_mutex forever, waiting on something else
  return nullptr;
}

int main() {
  pthread_t t;
  if (pthread_create(&t, nullptr, holder, nullptr) != 0) {
    perror("pthread_create");
    return 1;
  }
  pthread_mutex_lock(&g_ready_mu);
  while (!g_locked) pthread_cond_wait(&g_ready_cv, &g_ready_mu);
  pthread_mutex_unlock(&g_ready_mu);

  pid_t parent = getpid();
  pid_t child = repro::fork_tied_child();
  if (child < 0) return 1;
  if (child == 0) {
    pthread_mutex_lock(&g_mutex);  // blocks forever: the owner is not in this process
    pthread_mutex_unlock(&g_mutex);
    _exit(0);
  }

  std::printf("READY %d %d %d\n", parent, child, g_holder_tid);
  std::fflush(stdout);
  int status = 0;
  while (waitpid(child, &status, 0) < 0) {
  }
  return 0;
}
