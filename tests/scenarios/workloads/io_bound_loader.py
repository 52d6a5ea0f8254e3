"""Shape b of issue 18, io-bound: DataLoader workers read many small files
through a throttled read path (fuse_slow_server.py's mount: each read(2)
answered ~15 ms later); the main thread waits ~80% of the time for batches,
the workers are mostly in read().

    io_bound_loader.py LOG ROOT [TAG...] [--files N] [--size BYTES] [--seconds S]

Item i is file ROOT/sample-<i % N>.bin, read whole with one read(2) (the
"io" part: open, read, close; "read_ns" the read alone) and summed (the
"cpu" part). Ground truth in LOG (groundtruth.py). Prints "READY main=<pid>
workers=<a>,<b>".
"""
import os
import time

import torch
from torch.utils.data import Dataset

from groundtruth import TruthLog, job_args, train


class Shards(Dataset):
    def __init__(self, log, root, files, size):
        self.log, self.root, self.files, self.size = log, root, files, size

    def __len__(self):
        return 1_000_000

    def __getitem__(self, index):
        path = os.path.join(self.root, "sample-%04d.bin" % (index % self.files))
        with self.log.span("io", index=index) as rec:
            fd = os.open(path, os.O_RDONLY)
            try:
                t0 = time.monotonic_ns()
                data = os.read(fd, self.size)
                rec["read_ns"] = time.monotonic_ns() - t0
            finally:
                os.close(fd)
        with self.log.span("cpu", index=index):
            x = torch.frombuffer(bytearray(data), dtype=torch.uint8).float().view(-1, 64).mean(dim=0)
        return x, index


def main():
    args = job_args(__doc__, positionals=("root",), compute_ms=5.0, files=1000, size=16384)
    log = TruthLog(args.log)
    train(Shards(log, args.root, args.files, args.size), args, log)


if __name__ == "__main__":
    main()
