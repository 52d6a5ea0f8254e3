"""Jobs for scripts/bench_daemon.sh (the always-on daemon's benchmark).

  bench_daemon_job.py idle [WORKERS [TAG]]
      import torch, run one matmul (its intra-op threads exist), fork WORKERS
      (0) children that wait too (idle DataLoader workers: the same command
      line, so the same job), print READY, then wait forever: an idle
      training process that the daemon tracks. TAG is only there to be
      matched (scripts/bench_fleet.sh: --match picks groups of jobs by it).
  bench_daemon_job.py short SECONDS
      a job that lives SECONDS and exits 0 (the harness starts these now and
      then so that jobs come and go during the soak as on a fleet node).
  bench_daemon_job.py soak SECONDS STATS_JSON
      a busy training job, compressed: what grows with time in a tracker,
      much faster than a real job makes it. Each epoch (~1 s here; ~5 min in a
      real job) a fresh DataLoader (persistent_workers=False) forks
      SOAK_WORKERS worker processes that exit at the epoch's end; the main
      thread trains a small model on their batches (intra-op threads, futex
      and pipe traffic), hands a line per batch to a logger thread (futex),
      and starts and joins SOAK_THREADS short-lived threads. Every
      SOAK_LONG_EVERY epochs: a 1.2 s futex wait (a barrier) and a 1.1 s
      blocking pipe read (a rendezvous), both past the daemon's 1 s flight
      recorder threshold; every SOAK_RSS_EVERY epochs: RSS up and down by
      SOAK_RSS_MIB (past the 64 MiB RSS step the kernel side streams).
      Writes what it did to STATS_JSON at the end.
  bench_daemon_job.py train STEPS GATE OUT_JSON
      fixed work for the job-side cost on training throughput: a small model
      trained for STEPS steps on batches from a DataLoader with TRAIN_WORKERS
      (2) persistent workers, with a logger thread fed per step -- a
      syscall- and switch-heavy loop, as real loops go. Prints READY, reads
      one byte from the FIFO GATE (a tracer attaches meanwhile), then times
      the STEPS steps only (workers started and warmed up before) and writes
      {"steps", "seconds"} to OUT_JSON.
"""
import json
import os
import queue
import sys
import threading
import time


def idle(workers):
    import ctypes
    import signal
    import torch
    x = torch.randn(256, 256)
    (x @ x).sum().item()
    for _ in range(workers):
        if os.fork() == 0:
            ctypes.CDLL(None).prctl(1, signal.SIGKILL)    # PR_SET_PDEATHSIG: go with the parent
            while True:
                time.sleep(3600)
    print("READY pid=%d" % os.getpid(), flush=True)
    threading.Event().wait()


def short(seconds):
    time.sleep(seconds)


def soak(seconds, stats_path):
    import torch
    import torch.utils.data as tud

    workers = int(os.environ.get("SOAK_WORKERS", "8"))
    n_threads = int(os.environ.get("SOAK_THREADS", "4"))
    long_every = int(os.environ.get("SOAK_LONG_EVERY", "5"))
    rss_every = int(os.environ.get("SOAK_RSS_EVERY", "10"))
    rss_mib = int(os.environ.get("SOAK_RSS_MIB", "160"))
    batches = int(os.environ.get("SOAK_BATCHES", "32"))

    class Synthetic(tud.Dataset):
        def __len__(self):
            return batches * 16

        def __getitem__(self, i):
            return torch.full((64,), float(i % 7))

    model = torch.nn.Linear(64, 8)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    log = queue.Queue()
    logged = [0]

    def logger():
        while log.get() is not None:
            logged[0] += 1

    log_thread = threading.Thread(target=logger, name="logger")
    log_thread.start()
    st = {"epochs": 0, "workers": 0, "threads": 0, "batches": 0, "long_waits": 0, "rss_steps": 0}
    print("READY pid=%d" % os.getpid(), flush=True)
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        loader = tud.DataLoader(Synthetic(), batch_size=16, num_workers=workers, persistent_workers=False)
        for xb in loader:
            loss = model(xb).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            log.put("loss %.3f" % loss.item())
            st["batches"] += 1
        del loader
        st["epochs"] += 1
        st["workers"] += workers
        # Short-lived threads (a checkpoint writer, a prefetcher): each hands
        # a value back through a queue.
        done = queue.Queue()
        ts = [threading.Thread(target=lambda k=k: done.put(sum(range(1000 * k)))) for k in range(n_threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        st["threads"] += n_threads
        if long_every and st["epochs"] % long_every == 0:
            threading.Event().wait(1.2)                 # a futex wait past 1 s
            r, w = os.pipe()
            threading.Timer(1.1, os.write, (w, b"x")).start()
            os.read(r, 1)                               # a blocking read past 1 s
            os.close(r)
            os.close(w)
            st["long_waits"] += 2
        if rss_every and st["epochs"] % rss_every == 0:
            blob = torch.ones(rss_mib << 18)            # rss_mib MiB of float32, touched
            blob.add_(1)
            del blob
            st["rss_steps"] += 1
    log.put(None)
    log_thread.join()
    st["seconds"] = time.monotonic() - t0
    st["logged"] = logged[0]
    with open(stats_path, "w") as f:
        json.dump(st, f)


def train(steps, gate, out_path):
    import torch
    import torch.utils.data as tud

    torch.manual_seed(0)
    workers = int(os.environ.get("TRAIN_WORKERS", "2"))

    class Synthetic(tud.Dataset):
        def __len__(self):
            return 1 << 30

        def __getitem__(self, i):
            return torch.full((128,), float(i % 7))

    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = iter(tud.DataLoader(Synthetic(), batch_size=32, num_workers=workers, persistent_workers=True))
    log = queue.Queue()
    log_thread = threading.Thread(target=lambda: [None for _ in iter(log.get, None)], name="logger")
    log_thread.start()

    def step():
        xb = next(loader)
        loss = model(xb).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        log.put(loss.item())

    for _ in range(50):     # the workers are up and prefetching
        step()
    print("READY pid=%d" % os.getpid(), flush=True)
    with open(gate) as g:
        g.read(1)
    t0 = time.monotonic()
    for _ in range(steps):
        step()
    seconds = time.monotonic() - t0
    log.put(None)
    log_thread.join()
    with open(out_path, "w") as f:
        json.dump({"steps": steps, "seconds": seconds}, f)
    os._exit(0)     # the persistent workers go with the process


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "idle":
        idle(int(sys.argv[2]) if len(sys.argv) > 2 else 0)   # argv[3], a TAG, is for --match only
    elif mode == "short":
        short(float(sys.argv[2]))
    elif mode == "soak":
        soak(float(sys.argv[2]), sys.argv[3])
    elif mode == "train":
        train(int(sys.argv[2]), sys.argv[3], sys.argv[4])
    else:
        sys.exit("usage: bench_daemon_job.py idle [WORKERS [TAG]] | short SECONDS | soak SECONDS STATS_JSON | "
                 "train STEPS GATE OUT_JSON")
