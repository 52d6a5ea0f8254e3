/*
 * A stand-in libnccl.so.2 for the gpu concern's tests: the NCCL calls
 * hangtrace probes, under their real names and argument lists (nccl.h),
 * doing nothing but what matters to the probes: collectives launch a kernel
 * through libcuda (calls nest, as in real NCCL), and ncclBcast is
 * ncclBroadcast underneath (as in real NCCL). Builds without CUDA.
 */
#include <stddef.h>

typedef int ncclResult_t;
typedef int ncclDataType_t;
typedef int ncclRedOp_t;
typedef void* ncclComm_t;
typedef void* cudaStream_t;

/* From the stub libcuda.so.1 this library links to, resolved by the
 * dynamic linker as NCCL's own driver calls are. */
int cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shmem, void* stream, void** params, void** extra);

#define STUB __attribute__((visibility("default"), noinline, used))

static volatile unsigned long calls_by_line[512];
#define COUNT_CALL() (calls_by_line[__LINE__]++)

static ncclResult_t launch(cudaStream_t stream) {
  return cuLaunchKernel((void*)0x6e63636c, 8, 1, 1, 256, 1, 1, 0, stream, NULL, NULL);
}

STUB ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  COUNT_CALL();
  return launch(stream);
}
STUB ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                int root, ncclComm_t comm, cudaStream_t stream) {
  COUNT_CALL();
  return launch(stream);
}
STUB ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                            cudaStream_t stream) {
  COUNT_CALL();
  return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}
STUB ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                             ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  COUNT_CALL();
  return launch(stream);
}
STUB ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  COUNT_CALL();
  return launch(stream);
}
STUB ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                    ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                    cudaStream_t stream) {
  COUNT_CALL();
  return launch(stream);
}
STUB ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                           ncclComm_t comm, cudaStream_t stream) {
  COUNT_CALL();
  return 0;
}
STUB ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                           cudaStream_t stream) {
  COUNT_CALL();
  return 0;
}
STUB ncclResult_t ncclGroupStart(void) { return COUNT_CALL(), 0; }
STUB ncclResult_t ncclGroupEnd(void) { return COUNT_CALL(), 0; }
