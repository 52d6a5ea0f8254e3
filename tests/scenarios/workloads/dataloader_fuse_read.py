"""DataLoader workers whose dataset reads a file on a FUSE mount that never
answers reads: the workers hang in the kernel (one inside the FUSE request,
the other behind it on the page it is filling, state D), and the main process
waits for their batch.

    dataloader_fuse_read.py FILE

DataLoader(num_workers=2, batch_size=1): item i is 4 KiB of FILE at offset
0. Prints "READY main=<pid> workers=<a>,<b>" once the workers are started,
then waits for the first batch forever.
"""
import os
import sys

import torch
from torch.utils.data import DataLoader, Dataset


class Shard(Dataset):
    def __init__(self, path):
        self.path = path

    def __len__(self):
        return 1000

    def __getitem__(self, index):
        with open(self.path, "rb", buffering=0) as f:
            data = f.read(4096)
        return torch.frombuffer(bytearray(data), dtype=torch.uint8).sum()


def main():
    torch.set_num_threads(1)
    loader = DataLoader(Shard(sys.argv[1]), batch_size=1, num_workers=2, multiprocessing_context="fork")
    batches = iter(loader)
    workers = ",".join(str(w.pid) for w in batches._workers)
    print("READY main=%d workers=%s" % (os.getpid(), workers), flush=True)
    for batch in batches:
        print("BATCH %s" % batch, flush=True)


if __name__ == "__main__":
    main()
