// Threads and children that come and go as fast as they can, to catch a
// collector that trips over a thread or process exiting under it.
//   READY pid=PID
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

namespace {
void* short_lived(void*) { return nullptr; }

void* thread_churner(void*) {
  for (;;) {
    pthread_t t;
    if (pthread_create(&t, nullptr, short_lived, nullptr) == 0) pthread_join(t, nullptr);
  }
}
}  // namespace

int main() {
  pthread_t churner;
  pthread_create(&churner, nullptr, thread_churner, nullptr);
  std::printf("READY pid=%d\n", getpid());
  std::fflush(stdout);
  for (;;) {
    pid_t child = fork();
    if (child == 0) {
      usleep(500);
      _exit(0);
    }
    if (child > 0) waitpid(child, nullptr, 0);
  }
}
