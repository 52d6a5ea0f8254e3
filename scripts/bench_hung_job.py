"""The hung jobs of scripts/bench_snapshot.sh (a benchmark input, not a test).

  bench_hung_job.py job DEMO
      The bundled hung job (scripts/demo_hung_job.py: a DataLoader whose
      forked workers inherited a held lock), padded with threads parked on an
      Event, the way I/O, logging and prefetch threads sit idle in real jobs:
      BENCH_THREADS in all over the main process and its 2 workers.

  bench_hung_job.py node DEMO
      A node-sized job, shaped like torchrun: this process is the launcher
      (no torch; it waits on its ranks), BENCH_RANKS ranks (RANK, LOCAL_RANK,
      WORLD_SIZE in their environment), each one the demo job with
      BENCH_RANK_THREADS threads in its main process and BENCH_WORKERS forked
      DataLoader workers of BENCH_WORKER_THREADS threads each. Every rank hangs
      the demo's way (its workers block on the inherited lock, the rank's main
      thread waits for a batch); the launcher waits on its ranks forever.

Both print the demo's READY line once every worker is stuck:
  hangtrace-demo: READY main=<pid> workers=<pid>,... [ranks=<pid>,...]
(node: main is the launcher, workers every other process of the job).
"""
import os
import runpy
import subprocess
import sys
import threading
import warnings


def env_int(name, default):
    return int(os.environ.get(name, default))


def tasks_now():
    return len(os.listdir("/proc/self/task"))


PARKED = threading.Event()


def park(n, prefix):
    for i in range(n):
        threading.Thread(target=PARKED.wait, name="%s-%d" % (prefix, i), daemon=True).start()


def run_demo(demo, main_parked, workers, worker_parked):
    """Runs the demo in this process with main_parked parked threads (a
    callable: how many, called after torch is imported) and `workers`
    DataLoader workers with worker_parked parked threads each."""
    import torch.utils.data as tud  # after the launcher forked: each rank imports torch

    park(main_parked(), "io")
    original_init = tud.DataLoader.__init__

    def padded_init(self, *args, **kwargs):
        kwargs["num_workers"] = workers
        kwargs.setdefault("worker_init_fn", lambda worker_id: park(worker_parked, "prefetch"))
        original_init(self, *args, **kwargs)

    tud.DataLoader.__init__ = padded_init
    sys.argv = [demo]
    runpy.run_path(demo, run_name="__main__")


def job(demo):
    total = env_int("BENCH_THREADS", 40)
    per_worker = max(0, (total - 6) // 3)  # 3 processes; the demo has ~6 threads of its own
    run_demo(demo, lambda: max(0, total - 6 - 2 * per_worker), 2, per_worker)


def node(demo):
    ranks = env_int("BENCH_RANKS", 8)
    rank_threads = env_int("BENCH_RANK_THREADS", 120)
    workers = env_int("BENCH_WORKERS", 8)
    worker_threads = env_int("BENCH_WORKER_THREADS", 2)
    procs = []
    for rank in range(ranks):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(ranks),
                   LOCAL_WORLD_SIZE=str(ranks))
        procs.append(subprocess.Popen(
            [sys.executable, "-u", __file__, "rank", demo], env=env, stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL, text=True))
    rank_pids, worker_pids = [], []
    for p in procs:  # each rank prints the demo's READY line once its workers are stuck
        for line in p.stdout:
            if line.startswith("hangtrace-demo: READY"):
                fields = dict(f.split("=", 1) for f in line.split()[2:])
                rank_pids.append(fields["main"])
                worker_pids += fields["workers"].split(",")
                break
        else:
            sys.exit("bench_hung_job: rank %d exited before its READY line" % p.pid)
    print("hangtrace-demo: READY main=%d workers=%s ranks=%s"
          % (os.getpid(), ",".join(rank_pids + worker_pids), ",".join(rank_pids)), flush=True)
    for p in procs:  # the launcher's wait: forever, as the ranks never finish
        p.wait()


def rank(demo):
    # The rank's main process: BENCH_RANK_THREADS with torch's own, the demo's
    # cache refresher and one queue feeder thread per worker; each worker: its
    # main thread and the parked ones.
    threads, workers = env_int("BENCH_RANK_THREADS", 120), env_int("BENCH_WORKERS", 8)
    warnings.filterwarnings("ignore", message="This DataLoader will create")  # more workers than CPUs
    run_demo(demo, lambda: max(0, threads - tasks_now() - 1 - workers), workers,
             max(0, env_int("BENCH_WORKER_THREADS", 2) - 1))


if __name__ == "__main__":
    {"job": job, "node": node, "rank": rank}[sys.argv[1]](sys.argv[2])
