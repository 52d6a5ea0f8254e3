"""A thread pool whose tasks wait on tasks they submit to the same pool.

Field report shape: a data pipeline prefetches with a ThreadPoolExecutor, and
its load() task, to decode a sample, submits decode() to the same executor and
waits for the result. With as many outer tasks in flight as the pool has
threads, every pool thread waits on a future that no free thread will ever
run; the main thread waits on the outer futures. No lock is orphaned and no
fork is involved: the pool waits on itself.

  pool_self_wait.py thread    concurrent.futures.ThreadPoolExecutor
  pool_self_wait.py mpool     multiprocessing.pool.ThreadPool (apply_async().get())

Prints "READY main=<pid> workers=<n>" once every pool thread runs an outer
task (each has entered load()), right before main waits.
"""
import os
import sys
import threading

import torch

WORKERS = 3
entered = threading.Barrier(WORKERS + 1)


def decode(index):
    return torch.full((4,), float(index))


def thread_variant():
    import concurrent.futures as cf
    pool = cf.ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="prefetch")

    def load(index):
        entered.wait()
        inner = pool.submit(decode, index)  # queued behind the outer tasks: never runs
        return inner.result()

    outer = [pool.submit(load, i) for i in range(WORKERS)]
    entered.wait()
    print("READY main=%d workers=%d" % (os.getpid(), WORKERS), flush=True)
    for f in outer:
        print("BATCH", f.result().shape, flush=True)


def mpool_variant():
    from multiprocessing.pool import ThreadPool
    pool = ThreadPool(WORKERS)

    def load(index):
        entered.wait()
        return pool.apply_async(decode, (index,)).get()

    outer = [pool.apply_async(load, (i,)) for i in range(WORKERS)]
    entered.wait()
    print("READY main=%d workers=%d" % (os.getpid(), WORKERS), flush=True)
    for r in outer:
        print("BATCH", r.get().shape, flush=True)


if __name__ == "__main__":
    {"thread": thread_variant, "mpool": mpool_variant}[sys.argv[1] if len(sys.argv) > 1 else "thread"]()
