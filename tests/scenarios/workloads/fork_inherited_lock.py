"""A training job whose DataLoader workers inherit a held lock through fork().

Field report shape: "training hangs at the first batch, workers at 0% CPU,
only with num_workers > 0". The dataset guards a cache with a module-level
threading.Lock. A background "cache refresher" thread in the main process
takes that lock and then waits for a refresh request with the lock still held.
The DataLoader forks its workers at that moment: each child gets a copy of
the lock in the *locked* state, but not the thread that holds it -- nobody in
the child can ever release it. Every worker blocks in __getitem__ (futex),
and the main thread waits for a batch that never comes (poll on the result
queue, re-armed every 5 s).

Prints "READY main=<pid> workers=<pid>,<pid>" right before next() blocks.
"""
import os
import sys
import threading

import torch
from torch.utils.data import DataLoader, Dataset

cache_lock = threading.Lock()          # guards _cache, in every process
_cache = {}
refresh_requested = threading.Event()  # never set in this job
refresher_holds_lock = threading.Event()


def cache_refresher():
    # The bug: waiting for work while holding the lock.
    with cache_lock:
        refresher_holds_lock.set()
        refresh_requested.wait()
        _cache.clear()


class CachedDataset(Dataset):
    def __len__(self):
        return 256

    def __getitem__(self, index):
        with cache_lock:               # a worker's copy is locked forever
            if index not in _cache:
                _cache[index] = torch.full((8,), float(index))
            return _cache[index]


def main():
    threading.Thread(target=cache_refresher, name="cache-refresher", daemon=True).start()
    refresher_holds_lock.wait()

    loader = DataLoader(CachedDataset(), batch_size=4, num_workers=2,
                        multiprocessing_context="fork")
    batches = iter(loader)             # forks the workers now
    workers = ",".join(str(w.pid) for w in batches._workers)
    print("READY main=%d workers=%s" % (os.getpid(), workers), flush=True)
    for batch in batches:              # blocks forever in the first next()
        print("BATCH", batch.shape, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
