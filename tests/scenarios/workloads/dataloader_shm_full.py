"""A DataLoader under a Docker-sized /dev/shm (64 MiB), filling it up.

Field report shape: "DataLoader worker (pid N) is killed by signal: Bus
error. It is possible that dataloader's workers are out of shared memory",
from a job in a container started without --shm-size. Workers hand each batch
to the main process as a file in /dev/shm (unlinked right after creation,
still mapped); the main loop keeps every batch (a leak: outputs appended to a
list "for later"), so /dev/shm fills up.

What torch 1.13 really does: a worker whose next segment does not fit gets
SIGBUS while writing it (tmpfs pages are allocated on first touch) and dies;
the main process raises RuntimeError on the next wait. It does not hang by
itself. This job's error handler then waits -- with every batch still
referenced -- for its launcher to tell it what to do, the way jobs under an
elastic agent or a notebook kernel sit after a failure: /dev/shm stays full
while the process lives, which is what hangtrace is asked to explain.

Run it inside its own mount namespace with a small tmpfs on /dev/shm:
  unshare -m sh -c 'mount -t tmpfs -o size=64m tmpfs /dev/shm &&
                    exec /usr/bin/python3 dataloader_shm_full.py'

Images are 3 x 256 x 256 float32 (768 KiB) by default (--side): with 12 MiB
images (--side 1024) only five fit in 64 MiB and what the job still holds
after the crash lands anywhere between 75% and 90%; with small ones the
batches the job holds reach ~94% before a worker hits SIGBUS.

Prints "BATCH n shm_used=<bytes> shm_size=<bytes>" every 10 batches,
"LOADER-ERROR shm_used=.. shm_size=.. <message>" when the loader fails, then
"READY main=<pid> workers=<a>,<b> shm_used=<bytes> shm_size=<bytes>
kept=<batches> sigbus=<pids>|none" (sigbus: the workers dead of SIGBUS, as
their exit status says -- what PyTorch's own error names only when its
SIGCHLD handler saw the death before the main process met the closed
socket), and waits forever holding every batch -- or, with --exit,
exits with status 3 right after the READY line (a job without such a handler:
the only trace of the full /dev/shm is what was seen while it ran).
"""
import argparse
import os
import signal
import sys
import threading
import time

import torch
from torch.utils.data import DataLoader, Dataset


class LargeImages(Dataset):
    def __init__(self, side):
        self.side = side

    def __len__(self):
        return 10_000

    def __getitem__(self, index):
        return torch.full((3, self.side, self.side), float(index))


def shm_usage():
    st = os.statvfs("/dev/shm")
    size = st.f_blocks * st.f_frsize
    return size - st.f_bfree * st.f_frsize, size


def sigbus_workers(iterator, wait_s=5.0):
    """The pids of the loader's workers whose exit status says SIGBUS. The
    loader's error can come as a dying worker's socket closes, a moment
    before it can be reaped: the statuses are polled until one is there or
    `wait_s` has passed (a worker that raised instead exits 1, not killed)."""
    deadline = time.monotonic() + wait_s
    while True:
        dead = [w.pid for w in iterator._workers if w.exitcode == -signal.SIGBUS]
        if dead or time.monotonic() >= deadline:
            return dead
        time.sleep(0.05)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--side", type=int, default=256,
                    help="images are 3 x side x side float32 (1024: 12 MiB)")
    ap.add_argument("--exit", action="store_true",
                    help="exit (status 3) after the loader error instead of waiting")
    args = ap.parse_args()
    loader = DataLoader(LargeImages(args.side), batch_size=1, num_workers=2,
                        multiprocessing_context="fork")
    batches = iter(loader)
    workers = ",".join(str(w.pid) for w in batches._workers)
    kept = []                          # the leak

    def loader_error(e):
        used, size = shm_usage()
        print("LOADER-ERROR shm_used=%d shm_size=%d %s: %s"
              % (used, size, type(e).__name__, (str(e).splitlines() or [""])[0]), flush=True)

    def quiet_sigchld():
        # torch's SIGCHLD handler raises RuntimeError in the main thread on
        # every later worker death -- also in the middle of the reporting
        # below, when the second worker dies of SIGBUS a moment after the
        # first. One error is enough: stop it (retrying if it fires first).
        while True:
            try:
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                return
            except (RuntimeError, OSError):
                continue

    try:
        for n, batch in enumerate(batches):
            kept.append(batch)
            if n % 10 == 0:
                used, size = shm_usage()
                print("BATCH %d shm_used=%d shm_size=%d" % (n, used, size), flush=True)
    except (RuntimeError, OSError, EOFError) as e:  # a worker died of SIGBUS: RuntimeError,
        quiet_sigchld()                    # or ConnectionResetError / EOFError mid-handover
        loader_error(e)
    sigbus = sigbus_workers(batches)
    used, size = shm_usage()
    print("READY main=%d workers=%s shm_used=%d shm_size=%d kept=%d sigbus=%s"
          % (os.getpid(), workers, used, size, len(kept), ",".join(map(str, sigbus)) or "none"), flush=True)
    if args.exit:
        return 3
    while True:                        # "waiting for the launcher", batches held
        try:
            threading.Event().wait()
        except (RuntimeError, OSError, EOFError) as e:   # SIGCHLD handler: another worker died
            loader_error(e)


if __name__ == "__main__":
    sys.exit(main())
