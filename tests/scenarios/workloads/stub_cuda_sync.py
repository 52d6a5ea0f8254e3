"""A process that launches "kernels" on a stub libcuda, then waits in
cuCtxSynchronize forever (tests/integration/gpu_stubs/stub_cuda.c blocks
there reading the fd named by HT_STUB_CUDA_SYNC_FD: a pipe nobody writes).

  stub_cuda_sync.py LIBCUDA [--launch-for S]
Prints "READY main=<pid>" once the library is loaded, launches for S seconds
(default 0), then synchronizes.
"""
import ctypes
import os
import sys
import time


def main():
    library = sys.argv[1]
    launch_for = 0.0
    if "--launch-for" in sys.argv:
        launch_for = float(sys.argv[sys.argv.index("--launch-for") + 1])
    r, _w = os.pipe()
    os.environ["HT_STUB_CUDA_SYNC_FD"] = str(r)
    cuda = ctypes.CDLL(library)
    print("READY main=%d" % os.getpid(), flush=True)
    end = time.monotonic() + launch_for
    while time.monotonic() < end:
        cuda.cuLaunchKernel(None, 1, 1, 1, 1, 1, 1, 0, None, None, None)
        time.sleep(0.01)
    cuda.cuCtxSynchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
