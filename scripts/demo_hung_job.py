"""hangtrace demo: a small training job that hangs at its first batch.

The bug (a classic one): the dataset caches decoded samples behind a
threading.Lock, and a background thread in the main process refreshes that
cache while holding the lock -- it takes the lock, then waits for the next
refresh request. The DataLoader forks its two workers at that moment. Each
worker gets a copy of the lock in the *locked* state, but not the thread that
holds it, so nobody in a worker can ever release it: both workers block in
__getitem__, and the main process waits forever for a batch.

Needs only python3 and torch. Prints
  hangtrace-demo: READY main=<pid> workers=<a>,<b>
when the workers are stuck and the main thread is about to wait in next();
then hangs until killed. Try: sudo hangtrace --pid <main>
"""
import os
import sys
import threading
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

cache_lock = threading.Lock()        # guards _cache, in every process
_cache = {}
refresh_request = threading.Event()  # never set: the refresher waits forever
refresher_has_lock = threading.Event()


def cache_refresher():
    with cache_lock:                 # BUG: waits for work while holding the lock
        refresher_has_lock.set()
        refresh_request.wait()
        _cache.clear()


class CachedDataset(Dataset):
    def __len__(self):
        return 1024

    def __getitem__(self, index):
        with cache_lock:             # a forked worker's copy is locked forever
            if index not in _cache:
                _cache[index] = (torch.randn(16), index % 4)
            return _cache[index]


def sleeps_in_futex(pid):
    """True when /proc says the process sleeps in futex(2) (a lock wait)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        with open("/proc/%d/syscall" % pid) as f:
            nr = f.read().split()[0]
    except (OSError, IndexError):
        return False
    return state == "S" and nr == "202"   # x86_64 futex


def main():
    threading.Thread(target=cache_refresher, name="cache-refresher", daemon=True).start()
    refresher_has_lock.wait()

    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(CachedDataset(), batch_size=8, num_workers=2,
                        multiprocessing_context="fork")

    batches = iter(loader)           # forks the two workers now
    workers = [w.pid for w in batches._workers]
    seen, deadline = 0, time.monotonic() + 30   # wait until both are stuck
    while seen < 5 and time.monotonic() < deadline:
        seen = seen + 1 if all(sleeps_in_futex(p) for p in workers) else 0
        time.sleep(0.05)
    print("hangtrace-demo: READY main=%d workers=%s"
          % (os.getpid(), ",".join(map(str, workers))), flush=True)

    for x, y in batches:             # the first next() never returns
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return 0


if __name__ == "__main__":
    sys.exit(main())
