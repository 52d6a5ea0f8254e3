/*
 * A stand-in libcuda.so.1 for the gpu concern's tests: the driver API
 * functions hangtrace probes, under their real names and with their real
 * argument lists (cuda.h), doing nothing -- so uprobes fire for real on a
 * machine without a GPU. Own minimal typedefs: it builds without CUDA.
 *
 * cuCtxSynchronize blocks, as a synchronize with work pending does, until
 * one byte can be read from the fd named by HT_STUB_CUDA_SYNC_FD (when set).
 * cuStreamSynchronize waits as the driver does for a kernel still running,
 * when HT_STUB_CUDA_STREAM_SYNC_US is "SPIN,SLEEP": it spins SPIN us on the
 * clock (the driver's default spin-wait), then sleeps SLEEP us in the kernel.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef void* CUfunction;
typedef void* CUstream;
typedef void* CUevent;
typedef void* CUcontext;
typedef unsigned long long CUdeviceptr;
typedef struct CUlaunchConfig_st CUlaunchConfig;

#define STUB __attribute__((visibility("default"), noinline, used))

/* Every stub counts its calls under its own name: no two bodies are alike,
 * so the compiler cannot fold two functions into one address. */
static volatile unsigned long calls_by_line[2048];
#define COUNT_CALL() (calls_by_line[__LINE__]++)

STUB CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                             unsigned bz, unsigned shmem, CUstream stream, void** params, void** extra) {
  return COUNT_CALL(), 0;
}
STUB CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                  unsigned by, unsigned bz, unsigned shmem, CUstream stream, void** params,
                                  void** extra) {
  return COUNT_CALL(), 0;
}
STUB CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  return COUNT_CALL(), 0;
}
STUB CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  return COUNT_CALL(), 0;
}
STUB CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                        unsigned by, unsigned bz, unsigned shmem, CUstream stream,
                                        void** params) {
  return COUNT_CALL(), 0;
}
STUB CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                             unsigned by, unsigned bz, unsigned shmem, CUstream stream,
                                             void** params) {
  return COUNT_CALL(), 0;
}

STUB CUresult cuCtxSynchronize(void) {
  COUNT_CALL();
  const char* fd = getenv("HT_STUB_CUDA_SYNC_FD");
  if (fd) {
    char byte;
    while (read(atoi(fd), &byte, 1) < 0 && errno == EINTR) {
    }
  }
  return 0;
}
STUB CUresult cuCtxSynchronize_v2(CUcontext ctx) { return COUNT_CALL(), 0; }
static unsigned long long monotonic_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000ull;
}

STUB CUresult cuStreamSynchronize(CUstream stream) {
  COUNT_CALL();
  const char* how = getenv("HT_STUB_CUDA_STREAM_SYNC_US");
  unsigned long spin_us = 0, sleep_us = 0;
  if (how && sscanf(how, "%lu,%lu", &spin_us, &sleep_us) == 2) {
    unsigned long long until = monotonic_us() + spin_us;
    while (monotonic_us() < until) {
    }
    struct timespec nap = {(time_t)(sleep_us / 1000000), (long)(sleep_us % 1000000) * 1000};
    while (nanosleep(&nap, &nap) < 0 && errno == EINTR) {
    }
  }
  return 0;
}
STUB CUresult cuStreamSynchronize_ptsz(CUstream stream) { return COUNT_CALL(), 0; }
STUB CUresult cuEventSynchronize(CUevent event) { return COUNT_CALL(), 0; }
STUB CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned flags) { return COUNT_CALL(), 0; }
STUB CUresult cuStreamWaitEvent_ptsz(CUstream stream, CUevent event, unsigned flags) {
  return COUNT_CALL(), 0;
}

STUB CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t bytes) { return COUNT_CALL(), 0; }
STUB CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t bytes) { return COUNT_CALL(), 0; }
STUB CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t bytes) { return COUNT_CALL(), 0; }
STUB CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void* src, size_t bytes) { return COUNT_CALL(), 0; }
STUB CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t bytes) { return COUNT_CALL(), 0; }
STUB CUresult cuMemcpyDtoH_v2_ptds(void* dst, CUdeviceptr src, size_t bytes) { return COUNT_CALL(), 0; }
STUB CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes) { return COUNT_CALL(), 0; }
STUB CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t bytes) { return COUNT_CALL(), 0; }
STUB CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx,
                           size_t bytes) {
  return COUNT_CALL(), 0;
}
STUB CUresult cuMemcpyPeer_ptds(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx,
                                size_t bytes) {
  return COUNT_CALL(), 0;
}
STUB CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  return COUNT_CALL(), 0;
}
STUB CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  return COUNT_CALL(), 0;
}
STUB CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream) {
  return COUNT_CALL(), 0;
}
STUB CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream) {
  return COUNT_CALL(), 0;
}
STUB CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  return COUNT_CALL(), 0;
}
STUB CUresult cuMemcpyDtoHAsync_v2_ptsz(void* dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  return COUNT_CALL(), 0;
}
STUB CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  return COUNT_CALL(), 0;
}
STUB CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  return COUNT_CALL(), 0;
}
STUB CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx,
                                size_t bytes, CUstream stream) {
  return COUNT_CALL(), 0;
}
STUB CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx,
                                     size_t bytes, CUstream stream) {
  return COUNT_CALL(), 0;
}

STUB CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t n) { return COUNT_CALL(), 0; }
STUB CUresult cuMemsetD8_v2_ptds(CUdeviceptr dst, unsigned char value, size_t n) { return COUNT_CALL(), 0; }
STUB CUresult cuMemsetD16_v2(CUdeviceptr dst, unsigned short value, size_t n) { return COUNT_CALL(), 0; }
STUB CUresult cuMemsetD16_v2_ptds(CUdeviceptr dst, unsigned short value, size_t n) { return COUNT_CALL(), 0; }
STUB CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned value, size_t n) { return COUNT_CALL(), 0; }
STUB CUresult cuMemsetD32_v2_ptds(CUdeviceptr dst, unsigned value, size_t n) { return COUNT_CALL(), 0; }
STUB CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, CUstream stream) {
  return COUNT_CALL(), 0;
}
STUB CUresult cuMemsetD8Async_ptsz(CUdeviceptr dst, unsigned char value, size_t n, CUstream stream) {
  return COUNT_CALL(), 0;
}
STUB CUresult cuMemsetD16Async(CUdeviceptr dst, unsigned short value, size_t n, CUstream stream) {
  return COUNT_CALL(), 0;
}
STUB CUresult cuMemsetD16Async_ptsz(CUdeviceptr dst, unsigned short value, size_t n, CUstream stream) {
  return COUNT_CALL(), 0;
}
STUB CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned value, size_t n, CUstream stream) {
  return COUNT_CALL(), 0;
}
STUB CUresult cuMemsetD32Async_ptsz(CUdeviceptr dst, unsigned value, size_t n, CUstream stream) {
  return COUNT_CALL(), 0;
}
