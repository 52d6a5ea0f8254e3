// CUDA driver and NCCL calls for the gpu concern's test (live_gpu_test.cpp),
// through libraries loaded as PyTorch loads libcuda: dlopen() by path.
//
//   repro_gpu_calls LIBCUDA LIBNCCL   the stub libraries (tests/integration/gpu_stubs)
//   repro_gpu_calls --nccl LIBNCCL    a real libnccl.so.2: only calls that need no GPU
//   repro_gpu_calls --unseen-return LIBCUDA
//                                     a cuCtxSynchronize left by siglongjmp on SIGUSR1
//                                     (its return never runs), then ("resumed") a launch
//                                     and the same cuCtxSynchronize again
//
// Prints "LOADED pid=N tid=N" once the libraries are mapped, waits for a "go"
// line on stdin, makes its calls, then (stubs) prints "syncing" and calls
// cuCtxSynchronize -- which the stub holds until HT_STUB_CUDA_SYNC_FD gives
// it a byte -- and prints "done" (with HT_STARVE_ON_FD: "starving", then it
// reads that fd instead of synchronizing).
#include <dlfcn.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <cstdlib>
#include <cstring>

namespace {

using CUresult = int;
using CUstream = void*;
using CUdeviceptr = unsigned long long;
using ncclComm_t = void*;

// The layout of cuda.h's CUlaunchConfig.
struct LaunchConfig {
  unsigned grid[3], block[3], shared_mem_bytes;
  CUstream stream;
  void* attrs;
  unsigned num_attrs;
};

constexpr uintptr_t kStream = 0x5151;
constexpr uintptr_t kComm = 0x1234;
constexpr int kNcclInt8 = 0, kNcclInt32 = 2, kNcclFloat32 = 7, kNcclSum = 0;

void* open_library(const char* path) {
  void* lib = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
  if (!lib) {
    std::fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
    std::exit(2);
  }
  return lib;
}

template <class F>
F symbol(void* lib, const char* name) {
  void* f = dlsym(lib, name);
  if (!f) {
    std::fprintf(stderr, "dlsym %s: %s\n", name, dlerror());
    std::exit(2);
  }
  return reinterpret_cast<F>(f);
}

void wait_for_go() {
  char c;
  while (read(STDIN_FILENO, &c, 1) == 1 && c != '\n') {
  }
}

void say(const char* line) {
  std::printf("%s\n", line);
  std::fflush(stdout);
}

// A tracer that attaches when it notices the libraries (launch mode re-reads
// the job's mappings every 500 ms) may come after the calls: with
// HT_WAIT_FOR_UPROBES set, the calls wait until the functions carry a uprobe,
// which shows in this process's own view of their code as a breakpoint
// (int3 on x86_64). Prints "UPROBED" then.
void wait_for_uprobes(std::initializer_list<const void*> functions) {
#if defined(__x86_64__)
  for (int i = 0; i < 3000; ++i) {
    bool all = true;
    for (const void* f : functions) all &= *static_cast<const volatile unsigned char*>(f) == 0xcc;
    if (all) {
      std::printf("UPROBED\n");
      std::fflush(stdout);
      return;
    }
    usleep(10'000);
  }
  std::fprintf(stderr, "no uprobe on the functions after 30 s\n");
  std::exit(3);
#else
  (void)functions;
#endif
}

void announce() {
  std::printf("LOADED pid=%d tid=%ld\n", getpid(), static_cast<long>(syscall(SYS_gettid)));
  std::fflush(stdout);
}

int real_nccl(const char* libnccl) {
  void* nccl = open_library(libnccl);
  auto group_start = symbol<int (*)()>(nccl, "ncclGroupStart");
  auto group_end = symbol<int (*)()>(nccl, "ncclGroupEnd");
  auto all_reduce =
      symbol<int (*)(const void*, void*, size_t, int, int, ncclComm_t, CUstream)>(nccl, "ncclAllReduce");
  announce();
  wait_for_go();
  group_start();
  group_start();
  group_end();
  // No communicator: NCCL refuses it (ncclInvalidArgument) without touching a GPU.
  float buf[4] = {};
  int ret = all_reduce(buf, buf, 4, kNcclFloat32, kNcclSum, nullptr, reinterpret_cast<CUstream>(kStream));
  std::printf("done ncclAllReduce=%d\n", ret);
  std::fflush(stdout);
  wait_for_go();
  return 0;
}

sigjmp_buf out_of_the_call;

// A call the thread leaves without returning from it: a uretprobe then
// never fires for it, as for a call that began before its return probe was
// attached. The calls after it are the thread's own, not nested in it: a
// launch (another call site), then the same synchronize again (the same call
// site, in the same frame).
int unseen_return(const char* libcuda) {
  void* cuda = open_library(libcuda);
  auto launch = symbol<CUresult (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                    unsigned, CUstream, void**, void**)>(cuda, "cuLaunchKernel");
  auto ctx_synchronize = symbol<CUresult (*)()>(cuda, "cuCtxSynchronize");
  struct sigaction leave {};
  leave.sa_handler = [](int) { siglongjmp(out_of_the_call, 1); };
  sigaction(SIGUSR1, &leave, nullptr);
  announce();
  wait_for_go();
  volatile int rounds = 0;  // kept across the longjmp
  while (rounds < 2) {
    const int round = rounds;
    rounds = round + 1;
    if (sigsetjmp(out_of_the_call, 1) != 0) continue;  // round 0's synchronize, left
    if (round == 1) {
      say("resumed");
      launch(reinterpret_cast<void*>(0x3000), 1, 1, 1, 1, 1, 1, 0, reinterpret_cast<CUstream>(kStream),
             nullptr, nullptr);
    }
    say(round == 0 ? "syncing" : "syncing again");
    ctx_synchronize();
  }
  say("done");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--nccl") == 0) return real_nccl(argv[2]);
  if (argc == 3 && std::strcmp(argv[1], "--unseen-return") == 0) return unseen_return(argv[2]);
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s LIBCUDA LIBNCCL | --nccl LIBNCCL\n", argv[0]);
    return 2;
  }
  void* cuda = open_library(argv[1]);
  void* nccl = open_library(argv[2]);
  auto launch = symbol<CUresult (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                    unsigned, CUstream, void**, void**)>(cuda, "cuLaunchKernel");
  auto launch_ex = symbol<CUresult (*)(const LaunchConfig*, void*, void**, void**)>(cuda, "cuLaunchKernelEx");
  auto memcpy_htod = symbol<CUresult (*)(CUdeviceptr, const void*, size_t)>(cuda, "cuMemcpyHtoD_v2");
  auto memset_d32 = symbol<CUresult (*)(CUdeviceptr, unsigned, size_t)>(cuda, "cuMemsetD32_v2");
  auto ctx_synchronize = symbol<CUresult (*)()>(cuda, "cuCtxSynchronize");
  auto all_reduce =
      symbol<int (*)(const void*, void*, size_t, int, int, ncclComm_t, CUstream)>(nccl, "ncclAllReduce");
  auto bcast = symbol<int (*)(void*, size_t, int, int, ncclComm_t, CUstream)>(nccl, "ncclBcast");
  auto send = symbol<int (*)(const void*, size_t, int, int, ncclComm_t, CUstream)>(nccl, "ncclSend");
  auto group_start = symbol<int (*)()>(nccl, "ncclGroupStart");
  auto group_end = symbol<int (*)()>(nccl, "ncclGroupEnd");
  announce();
  if (std::getenv("HT_WAIT_FOR_UPROBES"))
    wait_for_uprobes({reinterpret_cast<const void*>(launch), reinterpret_cast<const void*>(ctx_synchronize)});
  wait_for_go();

  auto stream = reinterpret_cast<CUstream>(kStream);
  auto comm = reinterpret_cast<ncclComm_t>(kComm);
  for (int i = 0; i < 100; ++i)
    launch(reinterpret_cast<void*>(0x1000 + i), 64, 1, 1, 128, 1, 1, 0, stream, nullptr, nullptr);
  LaunchConfig config{{64, 1, 1}, {128, 1, 1}, 0, stream, nullptr, 0};
  launch_ex(&config, reinterpret_cast<void*>(0x2000), nullptr, nullptr);
  static char host[4096];
  for (int i = 0; i < 3; ++i) memcpy_htod(0xd000, host, sizeof host);
  memset_d32(0xd000, 0, 256);  // 1 KiB

  static float grads[1024];
  for (int i = 0; i < 3; ++i) all_reduce(grads, grads, 1024, kNcclFloat32, kNcclSum, comm, stream);
  bcast(host, 64, kNcclInt8, 2, comm, stream);
  group_start();
  group_start();
  send(host, 256, kNcclInt32, 1, comm, stream);
  group_end();  // one group left open, as a rank stuck before its ncclGroupEnd

  // HT_STARVE_ON_FD: instead of waiting for the GPU, the thread that fed it
  // waits on the host (a read that never returns), and the GPU goes idle.
  if (const char* fd = std::getenv("HT_STARVE_ON_FD")) {
    say("starving");
    char c;
    ssize_t n = read(std::atoi(fd), &c, 1);
    std::printf("done read=%zd\n", n);
    return 0;
  }
  say("syncing");
  ctx_synchronize();
  say("done");
  return 0;
}
