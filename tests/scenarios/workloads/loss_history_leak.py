"""A training loop that keeps every step's loss *with its autograd graph*.

Field report shape: "host memory grows every iteration until the job is
OOM-killed hours later", from code like

    losses.append(loss)          # meant: losses.append(loss.item())

`loss` is a 0-dim tensor that still references the graph that produced it.
Here backward runs with retain_graph=True (added once to silence "Trying to
backward through the graph a second time", as it often is), so the graph
keeps every activation saved for backward -- and the list keeps every graph:
each step leaks the step's activations (about 3 MiB at the defaults), and RSS
grows steadily while the loop otherwise runs fine (it is not hung: it makes
progress).

--keep item is the control: the same loop appending loss.item() (a Python
float), whose RSS is flat after the first steps.

Prints "READY main=<pid> step=<n> rss=<bytes>" after --warmup steps (the
allocator's caches are filled by then), "STEP n rss=<bytes>" every 20 steps,
stops growing at --max-rss-mib of RSS (it then idles, alive), and exits 0
after --seconds, so a forgotten run cannot eat the host.
"""
import argparse
import os
import sys
import time

import torch
from torch import nn


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Gate(nn.Module):
    """y = x * scale + shift, per feature."""

    def __init__(self, width):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(width))
        self.shift = nn.Parameter(torch.zeros(width))

    def forward(self, x):
        return x * self.scale + self.shift


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keep", choices=("graph", "item"), default="graph",
                    help="graph: losses.append(loss) (the leak); item: loss.item()")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--width", type=int, default=8192)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--max-rss-mib", type=int, default=4096)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)           # two cores: leave one to the tracer
    # Cheap to compute, costly to keep: feature-wise gates save their whole
    # input for backward (this host's torch has a reference BLAS, so the
    # matmuls stay small).
    w = args.width
    model = nn.Sequential(Gate(w), nn.GELU(), Gate(w), nn.GELU(), Gate(w), nn.GELU(),
                          nn.Linear(w, 10))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(args.batch, w)
    y = torch.randint(0, 10, (args.batch,))
    losses = []
    deadline = time.monotonic() + args.seconds
    step = 0
    while time.monotonic() < deadline:
        if rss_bytes() >= args.max_rss_mib * 1024 * 1024:
            # Hold at the cap rather than exit: the test reads this process's
            # /proc after its window, and on a fast host the leak reaches the
            # cap inside that window.
            time.sleep(0.1)
            continue
        opt.zero_grad()
        # A fresh input each step, as from a loader: the saved activations
        # of every step are distinct tensors.
        loss = nn.functional.cross_entropy(model(x + 0.01 * step), y)
        loss.backward(retain_graph=True)
        opt.step()
        losses.append(loss if args.keep == "graph" else loss.item())
        step += 1
        if step == args.warmup:
            print("READY main=%d step=%d rss=%d" % (os.getpid(), step, rss_bytes()), flush=True)
        elif step % 20 == 0:
            print("STEP %d rss=%d" % (step, rss_bytes()), flush=True)
    print("DONE step=%d rss=%d" % (step, rss_bytes()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
