"""Shape a of issue 18, data-starved: a DataLoader whose __getitem__ is slow
(a timed wait standing in for a remote fetch, then a little CPU) with 2
workers; the main thread computes little and waits ~80% of the time for its
batches.

    data_starved_loader.py LOG [TAG...] [--seconds S] [--fetch-ms MS]

Ground truth in LOG (groundtruth.py): main's "wait"/"compute", each item's
"io" (the wait) and "cpu" parts. Prints "READY main=<pid> workers=<a>,<b>".
"""
import time

import torch
from torch.utils.data import Dataset

from groundtruth import TruthLog, job_args, train


class SlowFetch(Dataset):
    def __init__(self, log, fetch_ms):
        self.log, self.fetch_s = log, fetch_ms / 1000.0

    def __len__(self):
        return 1_000_000

    def __getitem__(self, index):
        with self.log.span("io", index=index):
            time.sleep(self.fetch_s)          # the fetch: a timed wait
        with self.log.span("cpu", index=index):
            g = torch.Generator().manual_seed(index)
            x = torch.randn(32, 32, generator=g).mean(dim=0)
        return x, index


def main():
    args = job_args(__doc__, compute_ms=8.0, fetch_ms=20.0)
    log = TruthLog(args.log)
    train(SlowFetch(log, args.fetch_ms), args, log)


if __name__ == "__main__":
    main()
