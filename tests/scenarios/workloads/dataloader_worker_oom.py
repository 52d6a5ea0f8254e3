"""A DataLoader worker that is OOM-killed under a memory cgroup limit.

Field report shape: "RuntimeError: DataLoader worker (pid(s) N) exited
unexpectedly" / "DataLoader worker (pid N) is killed by signal: Killed." from
a job in a container with a memory limit, and nothing else: the kernel log
(which names the OOM kill and the cgroup) is not visible from inside the
container. The dataset memoises decoded samples in a per-worker cache that
nobody ever evicts (each worker is a forked copy, so the cache grows once per
worker and never reaches the main process), so a worker's RSS grows until the
cgroup's OOM killer picks it -- it is the biggest process in the cgroup.

Run the whole job inside the cgroup (the launcher moves itself in, then
execs), e.g.:
  sh -c 'echo $$ > /sys/fs/cgroup/memory/<group>/cgroup.procs &&
         exec /usr/bin/python3 dataloader_worker_oom.py'

Prints "START main=<pid> workers=<a>" once the worker exists, "BATCH n" as
batches arrive, then, when the loader fails, "LOADER-ERROR <type>: <first line
of the message>" and exits with status 3. Exits 0 (unexpectedly) if the
worker survives --max-batches batches.
"""
import argparse
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class CachedSamples(Dataset):
    def __init__(self, sample_mib):
        self.numel = sample_mib * 1024 * 1024 // 4
        self.cache = {}                # the leak: never evicted, one per worker

    def __len__(self):
        return 1_000_000

    def __getitem__(self, index):
        if index not in self.cache:
            # torch.ones touches every page: resident, charged to the cgroup.
            self.cache[index] = torch.ones(self.numel)
        return self.cache[index][:16].clone()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sample-mib", type=int, default=32)
    ap.add_argument("--max-batches", type=int, default=1000)
    ap.add_argument("--go-file", help="after START, wait until this file exists (a tracer is attached)")
    args = ap.parse_args()
    loader = DataLoader(CachedSamples(args.sample_mib), batch_size=1, num_workers=1,
                        multiprocessing_context="fork")
    batches = iter(loader)
    workers = ",".join(str(w.pid) for w in batches._workers)
    print("START main=%d workers=%s" % (os.getpid(), workers), flush=True)
    if args.go_file:
        while not os.path.exists(args.go_file):
            time.sleep(0.01)
    try:
        for n, _ in enumerate(batches):
            if n % 4 == 0:
                print("BATCH %d" % n, flush=True)
            if n >= args.max_batches:
                return 0
    except (RuntimeError, OSError) as e:
        print("LOADER-ERROR %s: %s" % (type(e).__name__, (str(e).splitlines() or [""])[0]), flush=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
