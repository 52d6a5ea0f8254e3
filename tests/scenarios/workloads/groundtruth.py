"""The ground truth of the slow-job workloads (issue 18): what each thread of
the job really spent its time on, measured by the job itself.

A workload opens one TruthLog on the file named on its command line before
it forks its DataLoader workers (they inherit the descriptor, opened
O_APPEND: each record is one write(2), whole) and writes one JSON line per
interval:

    {"kind": "wait", "pid": P, "tid": T, "start_ns": A, "end_ns": B, ...}

start_ns/end_ns are time.monotonic_ns() -- CLOCK_MONOTONIC, the clock of
hangtrace's live events; "cpu_ns" and "delay_ns" are the thread's time on a
CPU (time.thread_time_ns(): schedstat's runtime lags by up to a tick while
the thread runs) and waiting for one (run delay, schedstat's second field)
over the interval, so wall - cpu - delay is the time it was blocked. Kinds:
    wait     the main thread in next(iterator), waiting for its batch
    compute  the main thread's step compute
    io       a worker's I/O part of __getitem__ (open, read, close)
    cpu      a worker's CPU part of __getitem__
    acquire  a thread waiting to acquire the contended lock
    hold     a thread holding it
Other fields are informative ("read_ns": the read(2) call alone).

train() is the loop of the DataLoader workloads: it prints
"READY main=<pid> workers=<a>,<b>" once the loader is in its steady state
and runs until --seconds pass (or it is killed).
"""
import argparse
import json
import os
import threading
import time
from contextlib import contextmanager


class TruthLog:
    def __init__(self, path):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)

    def record(self, kind, start_ns, end_ns, **extra):
        rec = {"kind": kind, "pid": os.getpid(), "tid": threading.get_native_id(),
               "start_ns": start_ns, "end_ns": end_ns}
        rec.update(extra)
        os.write(self.fd, (json.dumps(rec, separators=(",", ":")) + "\n").encode())

    @contextmanager
    def span(self, kind, **extra):
        """Logs the body's interval as `kind`, with the thread's CPU time and
        run delay over it; the body may add fields to the dict it gets."""
        # The wall interval brackets the readings: a wait for a CPU they
        # count happened inside it.
        start = time.monotonic_ns()
        delay0, cpu0 = run_delay_ns(), time.thread_time_ns()
        yield extra
        cpu1, delay1 = time.thread_time_ns(), run_delay_ns()
        end = time.monotonic_ns()
        self.record(kind, start, end, cpu_ns=cpu1 - cpu0, delay_ns=delay1 - delay0, **extra)


def run_delay_ns():
    """The calling thread's time so far waiting for a CPU (exact while it
    runs: the delay is added when it is scheduled in)."""
    with open("/proc/thread-self/schedstat", "rb") as f:
        return int(f.read().split()[1])


def job_args(description, positionals=(), **defaults):
    """The common command line: LOG, the workload's `positionals`, any tag
    words (ignored: `pgrep -f TAG` finds the job by them), --seconds,
    --batch-size, --compute-ms, --ready-after and the workload's own options
    (`defaults`: name=default value)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("log", help="where the ground truth goes (JSON lines)")
    for name in positionals:
        ap.add_argument(name)
    ap.add_argument("tags", nargs="*", help="ignored; for pgrep -f")
    ap.add_argument("--seconds", type=float, default=defaults.pop("seconds", 60.0))
    ap.add_argument("--batch-size", type=int, default=defaults.pop("batch_size", 4))
    ap.add_argument("--compute-ms", type=float, default=defaults.pop("compute_ms", 5.0))
    ap.add_argument("--ready-after", type=int, default=defaults.pop("ready_after", 10),
                    help="steps before READY (past the workers' start)")
    for name, value in defaults.items():
        ap.add_argument("--" + name.replace("_", "-"), type=type(value), default=value)
    return ap.parse_args()


def busy(ms, x=None):
    """ms of wall time of the main thread's "step": small tensor ops until the
    deadline (a fixed wall time whatever else runs on the machine)."""
    import torch
    x = torch.ones(32, 32) if x is None else x
    deadline = time.perf_counter() + ms / 1000.0
    while time.perf_counter() < deadline:
        x = torch.tanh(x @ x.T / 32.0)
    return x


def train(dataset, args, log, num_workers=2, **loader_kw):
    """The training loop: each step waits for its batch (logged "wait") and
    computes for args.compute_ms of wall time (logged "compute")."""
    import torch
    from torch.utils.data import DataLoader
    torch.set_num_threads(1)
    loader = DataLoader(dataset, batch_size=args.batch_size, num_workers=num_workers,
                        multiprocessing_context="fork", persistent_workers=True, **loader_kw)
    batches = iter(loader)
    end = time.monotonic() + args.seconds
    step = 0
    state = torch.ones(32, 32)
    while time.monotonic() < end:
        with log.span("wait", step=step):
            next(batches)
        with log.span("compute", step=step):
            state = busy(args.compute_ms, state)
        step += 1
        if step == args.ready_after:
            workers = ",".join(str(w.pid) for w in batches._workers)
            print("READY main=%d workers=%s" % (os.getpid(), workers), flush=True)
        if step % 100 == 0:
            print("STEP %d" % step, flush=True)
    print("DONE steps=%d" % step, flush=True)
