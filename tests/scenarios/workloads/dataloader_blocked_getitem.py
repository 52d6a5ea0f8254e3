"""A DataLoader worker blocked inside the dataset's __getitem__, at a known line.

The dataset waits on a multiprocessing.Event that nobody sets, so the workers
block in __getitem__ (a futex/sem wait) and main waits for a batch. Prints
  READY main=<pid> workers=<pid>,... getitem_line=<line>
the line (read with inspect) being the one the workers block on.
"""
import inspect
import multiprocessing
import os

import torch
from torch.utils.data import DataLoader, Dataset

ctx = multiprocessing.get_context("fork")
never = ctx.Event()


class StuckDataset(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, index):
        never.wait()  # BLOCK-GETITEM
        return torch.zeros(4)


def getitem_line():
    lines, first = inspect.getsourcelines(StuckDataset.__getitem__)
    return first + next(i for i, text in enumerate(lines) if "# BLOCK-GETITEM" in text)


def main():
    loader = DataLoader(StuckDataset(), batch_size=2, num_workers=2, timeout=0, multiprocessing_context=ctx)
    batches = iter(loader)
    workers = ",".join(str(w.pid) for w in batches._workers)
    print("READY main=%d workers=%s getitem_line=%d" % (os.getpid(), workers, getitem_line()), flush=True)
    next(batches)


if __name__ == "__main__":
    main()
