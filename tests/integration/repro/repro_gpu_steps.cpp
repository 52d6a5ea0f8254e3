// A GPU-bound training loop for the stall profile's "gpu" cause
// (cli_gpu_test.cpp), through the stub libcuda (tests/integration/gpu_stubs):
// each step computes COMPUTE_US on the CPU, then cuStreamSynchronize()s,
// which the stub makes spin and sleep as HT_STUB_CUDA_STREAM_SYNC_US says.
//
//   repro_gpu_steps LIBCUDA COMPUTE_US TRUTH_LOG
//
// Prints "READY pid=N" before its first step; appends "START_NS END_NS" (its
// CLOCK_MONOTONIC, the profile's clock) of every synchronize to TRUTH_LOG,
// the ground truth of its time waiting for the device.
#include <dlfcn.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace {

uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s LIBCUDA COMPUTE_US TRUTH_LOG\n", argv[0]);
    return 2;
  }
  void* cuda = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
  if (!cuda) {
    std::fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
    return 2;
  }
  auto sync = reinterpret_cast<int (*)(void*)>(dlsym(cuda, "cuStreamSynchronize"));
  if (!sync) {
    std::fprintf(stderr, "dlsym cuStreamSynchronize: %s\n", dlerror());
    return 2;
  }
  const uint64_t compute_ns = std::strtoull(argv[2], nullptr, 10) * 1000ull;
  std::FILE* truth = std::fopen(argv[3], "a");
  if (!truth) {
    std::perror(argv[3]);
    return 2;
  }
  std::printf("READY pid=%d\n", getpid());
  std::fflush(stdout);
  volatile uint64_t sink = 0;
  for (;;) {
    const uint64_t until = monotonic_ns() + compute_ns;
    while (monotonic_ns() < until) sink = sink + 1;  // the step's host work
    const uint64_t start = monotonic_ns();
    sync(reinterpret_cast<void*>(0x5151));
    std::fprintf(truth, "%llu %llu\n", static_cast<unsigned long long>(start),
                 static_cast<unsigned long long>(monotonic_ns()));
    std::fflush(truth);
  }
}
