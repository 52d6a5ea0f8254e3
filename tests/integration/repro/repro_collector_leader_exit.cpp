// The main thread calls pthread_exit while another thread blocks reading a
// pipe: /proc shows the process as 'Z', yet it is alive.
//   READY pid=PID reader=TID read_fd=N
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>

namespace {
int fds[2];
std::atomic<int> reader_tid{0};

void* reader(void*) {
  reader_tid = gettid();
  char c;
  for (;;) (void)read(fds[0], &c, 1);
}
}  // namespace

int main() {
  if (pipe(fds) != 0) return 1;
  pthread_t t;
  pthread_create(&t, nullptr, reader, nullptr);
  while (!reader_tid) usleep(1000);
  std::printf("READY pid=%d reader=%d read_fd=%d\n", getpid(), reader_tid.load(), fds[0]);
  std::fflush(stdout);
  pthread_exit(nullptr);
}
