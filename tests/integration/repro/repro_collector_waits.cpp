// Three threads in three kinds of timed or fd waits:
//   cond:   pthread_cond_timedwait, CLOCK_REALTIME deadline 100 s ahead
//           (FUTEX_WAIT_BITSET|FUTEX_CLOCK_REALTIME with an absolute time)
//   select: select() for reading on a pipe and writing on a full pipe, 7 s
//   epoll:  epoll_wait(-1) on an epoll that watches the pipe and an eventfd
//   READY pid=PID cond=TID select=TID epoll=TID pipe_fd=N full_fd=N epoll_fd=N eventfd=N
#include <fcntl.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/select.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <ctime>

namespace {
int pipe_fds[2], full_fds[2], epoll_fd, event_fd;
std::atomic<int> cond_tid{0}, select_tid{0}, epoll_tid{0};
pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t cond = PTHREAD_COND_INITIALIZER;

void* cond_waiter(void*) {
  cond_tid = gettid();
  pthread_mutex_lock(&mutex);
  for (;;) {
    timespec deadline{};
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 100;
    pthread_cond_timedwait(&cond, &mutex, &deadline);
  }
}

void* select_waiter(void*) {
  select_tid = gettid();
  for (;;) {
    fd_set readable, writable;
    FD_ZERO(&readable);
    FD_ZERO(&writable);
    FD_SET(pipe_fds[0], &readable);
    FD_SET(full_fds[1], &writable);
    timeval timeout{7, 0};
    select(full_fds[1] + 1, &readable, &writable, nullptr, &timeout);
  }
}

void* epoll_waiter(void*) {
  epoll_tid = gettid();
  epoll_event events[4];
  for (;;) epoll_wait(epoll_fd, events, 4, -1);
}
}  // namespace

int main() {
  if (pipe(pipe_fds) != 0 || pipe(full_fds) != 0) return 1;
  // Fill the second pipe so its write end is not writable.
  fcntl(full_fds[1], F_SETFL, O_NONBLOCK);
  char block[4096] = {};
  while (write(full_fds[1], block, sizeof block) > 0) {
  }
  fcntl(full_fds[1], F_SETFL, 0);
  event_fd = eventfd(0, 0);
  epoll_fd = epoll_create1(0);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = pipe_fds[0];
  epoll_ctl(epoll_fd, EPOLL_CTL_ADD, pipe_fds[0], &ev);
  ev.data.fd = event_fd;
  epoll_ctl(epoll_fd, EPOLL_CTL_ADD, event_fd, &ev);
  pthread_t threads[3];
  pthread_create(&threads[0], nullptr, cond_waiter, nullptr);
  pthread_create(&threads[1], nullptr, select_waiter, nullptr);
  pthread_create(&threads[2], nullptr, epoll_waiter, nullptr);
  while (!cond_tid || !select_tid || !epoll_tid) usleep(1000);
  std::printf("READY pid=%d cond=%d select=%d epoll=%d pipe_fd=%d full_fd=%d epoll_fd=%d eventfd=%d\n",
              getpid(), cond_tid.load(), select_tid.load(), epoll_tid.load(), pipe_fds[0], full_fds[1],
              epoll_fd, event_fd);
  std::fflush(stdout);
  for (;;) pause();
}
