"""A healthy training loop: the control case. hangtrace must not call this a hang.

DataLoader(num_workers=2) over a dataset that does a little real work per item
(~5 ms of tensor ops), a tiny model trained with SGD. Runs for --seconds
(default 60) unless killed. Prints "READY main=<pid> workers=<a>,<b>" after the
first batch and "STEP n loss=x" every 100 steps.
"""
import argparse
import os
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SyntheticImages(Dataset):
    def __len__(self):
        return 1_000_000

    def __getitem__(self, index):
        g = torch.Generator().manual_seed(index)
        x = torch.randn(64, 64, generator=g)
        deadline = time.perf_counter() + 0.005
        while time.perf_counter() < deadline:   # ~5 ms of "augmentation"
            x = torch.tanh(x @ x.T / 64.0)
        return x.mean(dim=0), torch.tensor(index % 10)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60.0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = DataLoader(SyntheticImages(), batch_size=4, num_workers=2,
                        multiprocessing_context="fork", persistent_workers=True)
    batches = iter(loader)
    end = time.monotonic() + args.seconds
    step = 0
    for x, y in batches:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step == 1:
            workers = ",".join(str(w.pid) for w in batches._workers)
            print("READY main=%d workers=%s" % (os.getpid(), workers), flush=True)
        if step % 100 == 0:
            print("STEP %d loss=%.3f" % (step, loss.item()), flush=True)
        if time.monotonic() > end:
            break
    print("DONE steps=%d" % step, flush=True)


if __name__ == "__main__":
    main()
