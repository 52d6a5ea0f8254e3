"""Main process and its workers deadlocked on a multiprocessing.Lock.

Field report shape: a job serialises access to a shared resource (a log file,
an LMDB handle, a download cache) with a multiprocessing.Lock created before
the DataLoader so that the workers inherit it. The main process takes the lock
around "its" critical section and, inside it, asks the loader for the next
batch. The workers need the same lock in __getitem__ to produce that batch:
main waits for the workers (result queue), the workers wait for main (lock).

  main_worker_cycle.py dataloader   DataLoader(num_workers=2, timeout=0): the
                                    main thread's wait is a poll re-armed every
                                    5 s (MP_STATUS_CHECK_INTERVAL)
  main_worker_cycle.py process      the same cycle with a plain Process and a
                                    Queue: main calls q.get() with no timeout

Prints "READY main=<pid> workers=<pid>,..." right before main blocks.
"""
import multiprocessing
import os
import sys

import torch
from torch.utils.data import DataLoader, Dataset

ctx = multiprocessing.get_context("fork")
shared_lock = ctx.Lock()               # created before any worker exists


class LockedDataset(Dataset):
    def __len__(self):
        return 256

    def __getitem__(self, index):
        with shared_lock:              # held by the main process: waits forever
            return torch.full((8,), float(index))


def dataloader_variant():
    loader = DataLoader(LockedDataset(), batch_size=4, num_workers=2, timeout=0,
                        multiprocessing_context=ctx)
    shared_lock.acquire()              # main's critical section ...
    batches = iter(loader)
    workers = ",".join(str(w.pid) for w in batches._workers)
    print("READY main=%d workers=%s" % (os.getpid(), workers), flush=True)
    batch = next(batches)              # ... waits for a batch inside it
    shared_lock.release()
    print("BATCH", batch.shape, flush=True)


def producer(q):
    with shared_lock:
        q.put(torch.zeros(8))


def process_variant():
    q = ctx.Queue()
    shared_lock.acquire()
    child = ctx.Process(target=producer, args=(q,), name="producer")
    child.start()
    print("READY main=%d workers=%d" % (os.getpid(), child.pid), flush=True)
    item = q.get()                     # no timeout: read() on the queue's pipe
    shared_lock.release()
    print("ITEM", item.shape, flush=True)


if __name__ == "__main__":
    variant = sys.argv[1] if len(sys.argv) > 1 else "dataloader"
    {"dataloader": dataloader_variant, "process": process_variant}[variant]()
