// The CUDA program that scripts/gpu-check.sh runs hangtrace against (issue 5). One mode per run:
//
// gpu_check starved [FEED_SECONDS=2]
//   A feeder thread keeps the GPU busy, then blocks forever on a mutex held by a thread that itself blocks
//   forever on a pipe read: the GPU starves. Prints "STARVED feeder=TID holder=TID" once the feeder sleeps
//   in futex.
// gpu_check spin [SPIN_SECONDS=600 [auto|blocking]]
//   A few short kernels (so the usual duration is known), then the same kernel spinning for SPIN_SECONDS
//   while the host sits in cudaDeviceSynchronize (busy-waiting, or asleep with "blocking"). Prints
//   "SPINNING tid=TID" right before the synchronize.
// gpu_check healthy [SECONDS=60]
//   Launches kernels and synchronizes every few ms for SECONDS. Prints "HEALTHY tid=TID" once the loop runs.
//
// Markers go to stdout, line-buffered; CUDA errors to stderr as "gpu_check: ..." with exit status 3.
#include <cuda_runtime.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

namespace {

constexpr unsigned long long kNsPerMs = 1'000'000ull;
constexpr int kExitCudaError = 3;

#define CHECK_CUDA(call)                                                                      \
  do {                                                                                        \
    cudaError_t status_ = (call);                                                             \
    if (status_ != cudaSuccess) {                                                             \
      std::fprintf(stderr, "gpu_check: %s failed: %s\n", #call, cudaGetErrorString(status_)); \
      std::exit(kExitCudaError);                                                              \
    }                                                                                         \
  } while (0)

pid_t current_tid() { return static_cast<pid_t>(syscall(SYS_gettid)); }

// %globaltimer counts wall-clock nanoseconds, so SPIN_SECONDS means seconds whatever the SM clock does
// (clock64 counts cycles, which drift with boost clocks).
__device__ unsigned long long global_timer_ns() {
  unsigned long long now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  return now;
}

// Every mode launches this one kernel, so "far beyond its usual duration" compares like with like.
__global__ void spin_kernel(unsigned long long duration_ns, unsigned long long* iterations_out) {
  unsigned long long start = global_timer_ns();
  unsigned long long iterations = 0;
  while (global_timer_ns() - start < duration_ns) ++iterations;
  if (threadIdx.x == 0 && blockIdx.x == 0) *iterations_out = iterations;
}

unsigned long long* device_sink() {
  unsigned long long* sink = nullptr;
  CHECK_CUDA(cudaMalloc(&sink, sizeof(*sink)));
  return sink;
}

void launch_spin(unsigned long long duration_ns, unsigned long long* sink) {
  spin_kernel<<<1, 32>>>(duration_ns, sink);
  CHECK_CUDA(cudaGetLastError());
}

double seconds_arg(int argc, char** argv, double fallback) {
  if (argc < 3) return fallback;
  char* end = nullptr;
  double value = std::strtod(argv[2], &end);
  if (end == argv[2] || *end != '\0' || value <= 0) {
    std::fprintf(stderr, "gpu_check: bad seconds '%s'\n", argv[2]);
    std::exit(2);
  }
  return value;
}

// The first field of /proc/self/task/TID/syscall is the number of the syscall the thread sleeps in.
bool sleeps_in_futex(pid_t tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/syscall");
  long number = -1;
  return static_cast<bool>(in >> number) && number == SYS_futex;
}

[[noreturn]] void park_forever() {
  for (;;) pause();
}

// Shared with the two threads, which outlive every frame but main's (the process is killed, not joined).
struct StarvedState {
  pthread_mutex_t batch_lock = PTHREAD_MUTEX_INITIALIZER;
  int never_written[2] = {-1, -1};
  std::atomic<pid_t> holder_tid{0}, feeder_tid{0};
  std::atomic<bool> feeder_at_lock{false};
  double feed_seconds = 0;
};
StarvedState starved;

void hold_lock_and_wait_for_pipe() {
  pthread_setname_np(pthread_self(), "lock-holder");
  pthread_mutex_lock(&starved.batch_lock);
  starved.holder_tid = current_tid();
  char byte;
  for (;;) {
    if (read(starved.never_written[0], &byte, 1) < 0 && errno != EINTR) park_forever();
  }
}

void feed_gpu_then_wait_for_lock() {
  pthread_setname_np(pthread_self(), "gpu-feeder");
  starved.feeder_tid = current_tid();
  unsigned long long* sink = device_sink();
  auto stop = std::chrono::steady_clock::now() + std::chrono::duration<double>(starved.feed_seconds);
  while (std::chrono::steady_clock::now() < stop) {
    for (int i = 0; i < 8; ++i) launch_spin(kNsPerMs / 4, sink);
    CHECK_CUDA(cudaStreamSynchronize(nullptr));
  }
  starved.feeder_at_lock = true;
  pthread_mutex_lock(&starved.batch_lock);  // "the next batch": never granted
  launch_spin(kNsPerMs, sink);
}

int run_starved(double feed_seconds) {
  CHECK_CUDA(cudaFree(nullptr));  // create the context before the feeder needs it
  starved.feed_seconds = feed_seconds;
  if (pipe(starved.never_written) != 0) {
    std::fprintf(stderr, "gpu_check: pipe failed: %s\n", std::strerror(errno));
    return 1;
  }
  std::thread(hold_lock_and_wait_for_pipe).detach();
  while (starved.holder_tid == 0) std::this_thread::yield();
  std::thread(feed_gpu_then_wait_for_lock).detach();

  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(feed_seconds + 30);
  while (!(starved.feeder_at_lock && sleeps_in_futex(starved.feeder_tid))) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "gpu_check: the feeder never blocked on the lock\n");
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::printf("STARVED feeder=%d holder=%d\n", starved.feeder_tid.load(), starved.holder_tid.load());
  park_forever();
}

int run_spin(double spin_seconds, const std::string& sync_mode) {
  // By default (cudaDeviceScheduleAuto, what PyTorch gets) a lone context busy-waits in the synchronize;
  // "blocking" makes the host thread sleep in the driver instead.
  if (sync_mode == "blocking") {
    CHECK_CUDA(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync));
  } else if (sync_mode != "auto") {
    std::fprintf(stderr, "gpu_check: bad sync mode '%s' (auto or blocking)\n", sync_mode.c_str());
    return 2;
  }
  unsigned long long* sink = device_sink();
  for (int i = 0; i < 5; ++i) {
    launch_spin(2 * kNsPerMs, sink);
    CHECK_CUDA(cudaDeviceSynchronize());
  }
  launch_spin(static_cast<unsigned long long>(spin_seconds * 1e9), sink);
  std::printf("SPINNING tid=%d\n", current_tid());
  CHECK_CUDA(cudaDeviceSynchronize());
  std::printf("DONE\n");
  return 0;
}

int run_healthy(double seconds) {
  unsigned long long* sink = device_sink();
  auto stop = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  bool announced = false;
  while (std::chrono::steady_clock::now() < stop) {
    for (int i = 0; i < 4; ++i) launch_spin(kNsPerMs / 2, sink);
    CHECK_CUDA(cudaDeviceSynchronize());
    if (!announced) {
      std::printf("HEALTHY tid=%d\n", current_tid());
      announced = true;
    }
  }
  std::printf("DONE\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "starved") return run_starved(seconds_arg(argc, argv, 2));
  if (mode == "spin") return run_spin(seconds_arg(argc, argv, 600), argc > 3 ? argv[3] : "auto");
  if (mode == "healthy") return run_healthy(seconds_arg(argc, argv, 60));
  std::fprintf(stderr,
               "usage: %s starved [FEED_SECONDS] | spin [SPIN_SECONDS [auto|blocking]] | healthy [SECONDS]\n",
               argv[0]);
  return 2;
}
