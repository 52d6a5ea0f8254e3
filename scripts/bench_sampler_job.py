"""The torch job of scripts/bench_sampler.sh: ~100 threads (torch's intra-op
pool, set_num_threads, plus Python threads: a few doing small tensor work
every few ms like a loader or logger, the rest parked on a condition), and a
main thread that runs a fixed amount of work -- STEPS steps of matmuls and a
Python-level loop -- and times only that.

   bench_sampler_job.py --gate FIFO --out FILE [--steps N] [--threads T]
       [--py-threads P]
Prints "READY pid=PID threads=N" once every thread runs, reads one byte from
the FIFO, runs the steps, writes "iters=N loop_ns=NS" to FILE."""
import argparse
import os
import threading
import time

import torch


def busy_helper(stop, n):
    # A small op every 5 ms: on CPU now and then, like a loader or a logger.
    x = torch.randn(64, 64)
    while not stop.is_set():
        for _ in range(n):
            x = torch.tanh(x @ x) * 0.5
        stop.wait(0.005)


def parked(cond):
    with cond:
        cond.wait()


def python_work(n):
    # Python frames for the sampler to find.
    return sum(i * i % 7 for i in range(n))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gate", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--threads", type=int, default=8, help="torch.set_num_threads")
    ap.add_argument("--py-threads", type=int, default=80)
    ap.add_argument("--busy", type=int, default=4, help="of the Python threads, how many do tensor work")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    w = torch.randn(384, 384)
    torch.relu(w @ w)  # starts the intra-op pool
    stop = threading.Event()
    cond = threading.Condition()
    threads = []
    for i in range(a.py_threads):
        if i < a.busy:
            t = threading.Thread(target=busy_helper, args=(stop, 2), name="busy%d" % i, daemon=True)
        else:
            t = threading.Thread(target=parked, args=(cond,), name="parked%d" % i, daemon=True)
        t.start()
        threads.append(t)
    n = len(os.listdir("/proc/self/task"))
    print("READY pid=%d threads=%d" % (os.getpid(), n), flush=True)
    with open(a.gate) as g:
        g.read(1)

    t0 = time.perf_counter_ns()
    x = torch.randn(384, 384)
    for _ in range(a.steps):
        for _ in range(8):
            x = torch.tanh((x @ w) * 0.05)
        python_work(20000)
    loop_ns = time.perf_counter_ns() - t0

    stop.set()
    with cond:
        cond.notify_all()
    for t in threads:  # torch aborts an exit with its ops still running in daemon threads
        t.join()
    with open(a.out, "w") as f:
        f.write("iters=%d loop_ns=%d\n" % (a.steps, loop_ns))


if __name__ == "__main__":
    main()
