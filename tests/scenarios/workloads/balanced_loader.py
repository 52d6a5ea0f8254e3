"""Shape e of issue 18, a balanced healthy job: the loader keeps ahead (2
workers, prefetch, a fast __getitem__ of ~0.5 ms) and the main thread
computes ~30 ms a step, almost never waiting for its batch. No slow-job
finding.

    balanced_loader.py LOG [TAG...] [--compute-ms MS] [--seconds S]

Ground truth in LOG (groundtruth.py). Prints "READY main=<pid> workers=<a>,<b>".
"""
import time

import torch
from torch.utils.data import Dataset

from groundtruth import TruthLog, job_args, train


class Fast(Dataset):
    def __init__(self, log):
        self.log = log

    def __len__(self):
        return 1_000_000

    def __getitem__(self, index):
        with self.log.span("io", index=index):
            time.sleep(0.0002)                 # a fetch from a warm cache
        with self.log.span("cpu", index=index):
            g = torch.Generator().manual_seed(index)
            x = torch.randn(64, 64, generator=g)
            x = torch.tanh(x @ x.T / 64.0).mean(dim=0)
        return x                               # one tensor a batch: one fd to pass


def main():
    args = job_args(__doc__, compute_ms=30.0)
    log = TruthLog(args.log)
    train(Fast(log), args, log)


if __name__ == "__main__":
    main()
