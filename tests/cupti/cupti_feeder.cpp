// Loads hangtrace's CUPTI injection library the way the driver does
// (dlopen, InitializeInjection) in a process without a GPU.
//
//   cupti_feeder LIB load   initializes, prints "INITIALIZED", exits 0
//   cupti_feeder LIB feed   initializes, prints "READY <pid>", waits (up to
//                           60 s) for the probe's semaphore to be raised by an
//                           attached uprobe, prints "ATTACHED", hands one
//                           buffer of real CUPTI records to the library's
//                           buffer-completed callback, prints
//                           "FED <mono_ns> <cupti_ns>" (the clocks when the
//                           kernel record ended) and exits on a line or EOF
//                           on stdin.
#include <cupti.h>
#include <dlfcn.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "cupti_feeder.h"

namespace {

uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

template <typename Record>
Record* append(uint8_t* buffer, size_t& used, CUpti_ActivityKind kind) {
  auto* r = reinterpret_cast<Record*>(buffer + used);
  std::memset(r, 0, sizeof *r);
  r->kind = kind;
  used += (sizeof(Record) + 7) & ~size_t{7};  // CUPTI keeps records 8-byte aligned
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s LIBRARY load|feed\n", argv[0]);
    return 2;
  }
  std::string mode = argv[2];
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    std::fprintf(stderr, "dlopen: %s\n", dlerror());
    return 3;
  }
  auto initialize = reinterpret_cast<int (*)()>(dlsym(lib, "InitializeInjection"));
  auto requested =
      reinterpret_cast<void (*)(uint8_t**, size_t*, size_t*)>(dlsym(lib, "hangtrace_cupti_buffer_requested"));
  auto completed = reinterpret_cast<void (*)(CUcontext, uint32_t, uint8_t*, size_t, size_t)>(
      dlsym(lib, "hangtrace_cupti_buffer_completed"));
  auto* semaphore = static_cast<volatile unsigned short*>(dlsym(lib, "hangtrace_gpu_activity_semaphore"));
  if (!initialize || !requested || !completed || !semaphore) {
    std::fprintf(stderr, "missing exports in %s\n", argv[1]);
    return 4;
  }
  if (initialize() != 1) return 5;
  if (mode == "load") {
    std::printf("INITIALIZED\n");
    return 0;  // exit handlers stop the library's thread
  }
  if (mode != "feed") return 2;

  std::printf("READY %d\n", getpid());
  std::fflush(stdout);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (*semaphore == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::printf("TIMEOUT semaphore never raised\n");
      return 6;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::printf("ATTACHED\n");
  std::fflush(stdout);

  uint64_t now_cupti = 0;
  uint64_t now_mono = monotonic_ns();
  if (cuptiGetTimestamp(&now_cupti) != CUPTI_SUCCESS) return 7;
  uint8_t* buffer = nullptr;
  size_t size = 0, max_records = 0;
  requested(&buffer, &size, &max_records);
  if (!buffer || size < 4096) return 8;
  size_t used = 0;
  namespace f = hangtrace::testing::feeder;

  auto* k = append<CUpti_ActivityKernel10>(buffer, used, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  k->start = now_cupti - f::kKernelNs;
  k->end = now_cupti;
  k->deviceId = f::kDevice;
  k->contextId = f::kContext;
  k->streamId = f::kStream;
  k->correlationId = f::kKernelCorrelation;
  k->registersPerThread = f::kRegisters;
  k->gridX = 4, k->gridY = 2, k->gridZ = 1;
  k->blockX = 256, k->blockY = 1, k->blockZ = 1;
  k->name = f::kKernelName;

  auto* m = append<CUpti_ActivityMemcpy6>(buffer, used, CUPTI_ACTIVITY_KIND_MEMCPY);
  m->start = now_cupti - 3 * f::kKernelNs;
  m->end = now_cupti - 2 * f::kKernelNs;
  m->copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
  m->bytes = f::kMemcpyBytes;
  m->streamId = f::kStream;
  m->correlationId = f::kKernelCorrelation - 1;

  auto* api = append<CUpti_ActivityAPI>(buffer, used, CUPTI_ACTIVITY_KIND_DRIVER);
  api->cbid = CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel;
  api->start = now_cupti - 2 * f::kKernelNs;
  api->end = api->start + 1000;
  api->processId = static_cast<uint32_t>(getpid());
  api->threadId = static_cast<uint32_t>(gettid());
  api->correlationId = f::kKernelCorrelation;

  auto* sync = append<CUpti_ActivitySynchronization2>(buffer, used, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION);
  sync->type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE;
  sync->start = now_cupti - f::kKernelNs;
  sync->end = now_cupti;
  sync->streamId = f::kStream;

  completed(nullptr, 0, buffer, size, used);
  std::printf("FED %llu %llu\n", static_cast<unsigned long long>(now_mono),
              static_cast<unsigned long long>(now_cupti));
  std::fflush(stdout);
  char line[64];
  (void)!std::fgets(line, sizeof line, stdin);  // a line or EOF: done
  return 0;
}
