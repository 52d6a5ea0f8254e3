"""Two Python threads blocked at known lines, for python_stacks_test.

The main thread blocks in lock.acquire() inside inner() called from outer();
a second thread blocks in queue.get(). The READY line gives the tids and the
line numbers (read with inspect, so the test hard-codes none):
  READY pid=P main_tid=T main_line=L outer_line=L2 main_call_line=L0
        worker_tid=W worker_line=L3 py_minor=M gil=G
(gil=0: a free-threaded build running without the GIL).
With --spin, a third thread runs a pure-Python loop (so it holds the GIL) and
the line gains spin_tid=S spin_line=L4. Runs on CPython 3.8 and later (no
newer syntax).
"""
import os
import queue
import sys
import threading

from markers import line_in_file, line_of

LOCK = threading.Lock()
LOCK.acquire()
WORK = queue.Queue()
started = threading.Event()
worker_tid = []
spin_tid = []
spinning = threading.Event()


def consume():
    worker_tid.append(threading.get_native_id())
    started.set()
    WORK.get()  # BLOCK-WORKER


def spin():
    spin_tid.append(threading.get_native_id())
    spinning.set()
    n = 0
    while True:
        n += 1  # SPIN


def inner():
    extra = ""
    if spin_tid:
        extra = " spin_tid=%d spin_line=%d" % (spin_tid[0], line_of("SPIN", spin))
    print(
        "READY pid=%d main_tid=%d main_line=%d outer_line=%d main_call_line=%d worker_tid=%d worker_line=%d py_minor=%d gil=%d%s"
        % (
            os.getpid(),
            threading.get_native_id(),
            line_of("BLOCK-MAIN", inner),
            line_of("CALL-INNER", outer),
            line_in_file(__file__, "CALL-OUTER"),
            worker_tid[0],
            line_of("BLOCK-WORKER", consume),
            sys.version_info[1],
            getattr(sys, "_is_gil_enabled", lambda: True)(),
            extra,
        ),
        flush=True,
    )
    LOCK.acquire()  # BLOCK-MAIN


def outer():
    inner()  # CALL-INNER


if __name__ == "__main__":
    threading.Thread(target=consume, name="consumer", daemon=True).start()
    started.wait()
    if "--spin" in sys.argv:
        threading.Thread(target=spin, name="spinner", daemon=True).start()
        spinning.wait()
    outer()  # CALL-OUTER
    sys.exit(0)
