"""A live DataLoader for `hangtrace doctor --pid`: two forked workers, the
main process holding the first batch, the workers parked in __getitem__.

Each batch is a tuple of --tensors tensors of --tensor-mib MiB (float32).
Only sample 0 is produced; every later __getitem__ blocks forever, so the
job's /dev/shm use stays at one batch however small /dev/shm is, while a
real run (num_workers x prefetch_factor batches in flight) would not fit:
doctor has to predict the failure from what it measures.

Prints "READY main=<pid> workers=<a>,<b> shm_size=<bytes> shm_used=<bytes>"
once the main process holds batch 0, then waits forever.
"""
import argparse
import os
import threading

import torch
from torch.utils.data import DataLoader, Dataset


class Parked(Dataset):
    def __init__(self, tensors, numel):
        self.tensors = tensors
        self.numel = numel

    def __len__(self):
        return 1000

    def __getitem__(self, index):
        if index > 0:
            threading.Event().wait()   # parked: no more batches
        return tuple(torch.full((self.numel,), float(i)) for i in range(self.tensors))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tensors", type=int, default=2)
    ap.add_argument("--tensor-mib", type=float, default=20)
    args = ap.parse_args()
    numel = int(args.tensor_mib * (1 << 20)) // 4
    loader = DataLoader(Parked(args.tensors, numel), batch_size=1, num_workers=2,
                        prefetch_factor=2, multiprocessing_context="fork")
    it = iter(loader)
    batch = next(it)
    workers = ",".join(str(w.pid) for w in it._workers)
    st = os.statvfs("/dev/shm")
    size = st.f_blocks * st.f_frsize
    used = size - st.f_bfree * st.f_frsize
    print("READY main=%d workers=%s shm_size=%d shm_used=%d tensors=%d"
          % (os.getpid(), workers, size, used, len(batch)), flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
