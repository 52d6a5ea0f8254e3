"""Threads parked on a threading.Lock and an RLock, for python_stacks_test.

The main thread holds LOCK and RLOCK; thread "lock-waiter" blocks acquiring
LOCK, thread "rlock-waiter" acquiring RLOCK; the main thread then sleeps.
  READY pid=P main_tid=T lock_tid=A rlock_tid=B lock_id=X rlock_id=Y py_minor=M
(ids are id() of the lock objects: their addresses in CPython).
"""
import os
import sys
import threading
import time

LOCK = threading.Lock()
RLOCK = threading.RLock()
tids = {}
started = threading.Barrier(3)


def wait_on(name, lock):
    tids[name] = threading.get_native_id()
    started.wait()
    lock.acquire()


LOCK.acquire()
RLOCK.acquire()
threading.Thread(target=wait_on, args=("lock", LOCK), name="lock-waiter", daemon=True).start()
threading.Thread(target=wait_on, args=("rlock", RLOCK), name="rlock-waiter", daemon=True).start()
started.wait()
print(
    "READY pid=%d main_tid=%d lock_tid=%d rlock_tid=%d lock_id=%d rlock_id=%d py_minor=%d"
    % (
        os.getpid(),
        threading.get_native_id(),
        tids["lock"],
        tids["rlock"],
        id(LOCK),
        id(RLOCK),
        sys.version_info[1],
    ),
    flush=True,
)
time.sleep(3600)
