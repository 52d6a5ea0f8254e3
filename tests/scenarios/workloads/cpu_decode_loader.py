"""Shape d of issue 18, CPU-bound decode in the workers: each __getitem__
reads a small encoded sample from a local file (the "io" part) and burns
~15 ms of CPU in decode(), pure Python (the "cpu" part); 2 workers on a
2-core machine; the main thread waits a large share for batches.

    cpu_decode_loader.py LOG [TAG...] [--rounds N] [--batch-size B] [--seconds S]

decode() does a fixed amount of work (N rounds of a linear congruential
generator), not a fixed wall time: on a busy machine it takes longer, as a
real decoder would. Ground truth in LOG (groundtruth.py). The encoded samples live in
LOG.samples. Prints "READY main=<pid> workers=<a>,<b>".
"""
import torch
from torch.utils.data import Dataset

from groundtruth import TruthLog, job_args, train

SAMPLE = 4096


def decode(encoded, rounds):
    """The "JPEG decoder": pure Python, on the CPU the whole time."""
    x = int.from_bytes(encoded[:8], "little") | 1
    acc = 0
    for _ in range(rounds):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        acc ^= x >> 7
    return [(acc >> s) & 0xFF for s in range(0, 64, 2)]


class Encoded(Dataset):
    def __init__(self, log, path, rounds):
        self.log, self.path, self.rounds = log, path, rounds

    def __len__(self):
        return 1_000_000

    def __getitem__(self, index):
        with self.log.span("io", index=index):
            with open(self.path, "rb", buffering=0) as f:
                f.seek((index % 64) * SAMPLE)
                encoded = f.read(SAMPLE)
        with self.log.span("cpu", index=index):
            pixels = decode(encoded, self.rounds)
        return torch.tensor(pixels, dtype=torch.float32), index


def main():
    args = job_args(__doc__, compute_ms=3.0, rounds=160_000)
    log = TruthLog(args.log)
    samples = args.log + ".samples"
    with open(samples, "wb") as f:
        f.write(bytes(i * 7 % 251 for i in range(64 * SAMPLE)))
    train(Encoded(log, samples, args.rounds), args, log)


if __name__ == "__main__":
    main()
