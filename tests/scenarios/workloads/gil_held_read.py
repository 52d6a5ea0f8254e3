"""A thread blocks in libc read() on a pipe while holding the GIL, and every
other Python thread of the process freezes waiting for it.

ctypes.PyDLL calls a C function without releasing the GIL (ctypes.CDLL would
release it); the thread calls read() on a pipe whose only writer is a child
(`sleep`) that never writes. The main thread and a second Python thread spin
in Python code and so wait for the GIL (take_gil, 5 ms timed retries) forever.

  gil_held_read.py [--torch] [--healthy]
      --torch:   import torch first (a PyTorch job; the system Python has it)
      --healthy: no blocking call: the three threads keep handing the GIL
                 around while they compute (a healthy multi-threaded job)

Prints "READY main=<pid> holder=<tid> waiter=<tid> writer=<pid> pipe=<inode>
py_minor=<minor>" right before the holder calls read() (or, with --healthy,
once all three threads compute).
"""
import ctypes
import os
import subprocess
import sys
import threading


def spin(stop=None):
    x = 0
    while stop is None or not stop.is_set():
        for i in range(1000):
            x += i
    return x


def main():
    if "--torch" in sys.argv:
        import torch  # noqa: F401  (a PyTorch job)
    healthy = "--healthy" in sys.argv
    r, w = os.pipe()
    # The writer: holds the write end as its stdout and never writes.
    writer = subprocess.Popen(["sleep", "1000000"], stdin=subprocess.DEVNULL, stdout=w)
    os.close(w)
    inode = os.fstat(r).st_ino

    waiter_tid = []
    waiter_started = threading.Event()

    def waiter():
        waiter_tid.append(threading.get_native_id())
        waiter_started.set()
        spin()

    threading.Thread(target=waiter, name="gil-waiter", daemon=True).start()
    waiter_started.wait()

    libc = ctypes.PyDLL("libc.so.6")   # PyDLL: the call keeps the GIL
    libc.read.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
    libc.read.restype = ctypes.c_ssize_t
    buf = ctypes.create_string_buffer(1)

    def holder():
        tid = threading.get_native_id()
        print("READY main=%d holder=%d waiter=%d writer=%d pipe=%d py_minor=%d"
              % (os.getpid(), tid, waiter_tid[0], writer.pid, inode, sys.version_info[1]), flush=True)
        if healthy:
            spin()
        libc.read(r, buf, 1)           # blocks holding the GIL: nobody writes

    threading.Thread(target=holder, name="gil-holder", daemon=True).start()
    spin()                             # wants the GIL every 5 ms
    return 0


if __name__ == "__main__":
    sys.exit(main())
