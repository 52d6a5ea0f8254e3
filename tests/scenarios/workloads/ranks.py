"""Two-rank gloo jobs on CPU that stop in the shapes of issue 36, under three
launchers.

  ranks.py SHAPE --port PORT --launcher plain [--start 0,1]
      A per-rank launcher, as srun is: starts each rank in --start as its
      child with SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, MASTER_ADDR and
      MASTER_PORT in its environment (no RANK), stdin a pipe it never writes,
      then waits for them.
  ranks.py SHAPE --port PORT --launcher spawn
      torch.multiprocessing.spawn(nprocs=2): no rank in any environment; the
      rank is the spawn index.
  python -m torch.distributed.run ... ranks.py SHAPE --launcher torchrun
      One rank under torchrun (RANK, WORLD_SIZE, LOCAL_RANK).

Shapes (world size 2):
  never-joins  only the ranks in --start run (0): rank 0 waits in
               init_process_group for a rank 1 that never starts.
  pdb          after one all_reduce rank 0 stops in pdb.set_trace(), reading
               stdin (a pipe nobody writes); rank 1 waits in the next
               all_reduce.
  mismatch     after one all_reduce, `if rank == 0: barrier() else:
               all_reduce()`: each waits in its own collective.
  healthy      all_reduce every 20 ms, for --seconds.
  long-collective
               all_reduce of --mib MiB of floats, one after another, for
               --seconds: each takes long (1 GiB: ~1 s), moving data all along.
  oom          after one all_reduce rank 1 forks a helper (it keeps rank 1's
               gloo sockets) and allocates until its memory cgroup's OOM
               killer takes it (run the job in a limited cgroup); rank 0
               waits in the next all_reduce.

Each rank writes "RANK rank=<r> pid=<pid> ppid=<ppid> state=<state>" in one
write(2) (the ranks share stdout) right before it blocks: state "joining"
before init_process_group, "stepping" for healthy and long-collective (with
collective_s=<the first all_reduce's seconds> for the latter), "allocating" (with
helper=<pid>) for oom's rank 1, "stopped" for the others. The plain launcher
writes "EXITED pid=<pid> status=<wait status>" as it reaps each rank. gloo's timeout is 10 minutes: nothing ends during a test.
"""
import argparse
import datetime
import os
import subprocess
import sys
import time

WORLD = 2


def say(line):
    os.write(1, (line + "\n").encode())


def marker(rank, state, extra=""):
    say("RANK rank=%d pid=%d ppid=%d state=%s%s" % (rank, os.getpid(), os.getppid(), state, extra))


def run_rank(rank, shape, seconds, mib):
    import torch
    import torch.distributed as dist

    if shape == "never-joins":
        marker(rank, "joining")
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(minutes=10))
    grad = torch.ones(16)
    dist.all_reduce(grad)
    if shape == "healthy":
        end = time.monotonic() + seconds
        step = 0
        while time.monotonic() < end:
            dist.all_reduce(grad)
            step += 1
            if step == 5:
                marker(rank, "stepping")
            time.sleep(0.02)
        dist.barrier()
        return
    if shape == "long-collective":
        big = torch.ones(mib << 18)  # floats
        end = time.monotonic() + seconds
        step = 0
        while time.monotonic() < end:
            started = time.monotonic()
            dist.all_reduce(big)
            step += 1
            if step == 1:
                marker(rank, "stepping", " collective_s=%.2f" % (time.monotonic() - started))
        return
    if shape == "oom" and rank == 1:
        helper = os.fork()
        if helper == 0:                # keeps rank 1's sockets open after it dies
            while True:
                time.sleep(3600)
        marker(rank, "allocating", " helper=%d" % helper)
        hog = []
        while True:                    # until the cgroup's OOM killer takes it
            hog.append(b"x" * (16 << 20))
    marker(rank, "stopped")
    if shape == "pdb" and rank == 0:
        import pdb
        pdb.set_trace()               # a breakpoint left in: reads stdin
    if shape == "mismatch" and rank == 0:
        dist.barrier()                # the others are in all_reduce
    else:
        dist.all_reduce(grad)


def spawned(index, shape, seconds, mib):
    run_rank(index, shape, seconds, mib)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("shape", choices=["never-joins", "pdb", "mismatch", "healthy", "long-collective", "oom"])
    parser.add_argument("--launcher", choices=["plain", "spawn", "torchrun", "rank"], default="plain")
    parser.add_argument("--start", default="0,1", help="plain: the ranks started")
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--mib", type=int, default=256, help="long-collective: MiB each all_reduce moves")
    parser.add_argument("--port", type=int, required=True, help="plain, spawn: the rendezvous port (free)")
    args, tag = parser.parse_known_args()   # extra words: a tag for pgrep -f

    if args.launcher == "torchrun":
        run_rank(int(os.environ["RANK"]), args.shape, args.seconds, args.mib)
    elif args.launcher == "rank":        # a child of the plain launcher
        run_rank(int(os.environ["SLURM_PROCID"]), args.shape, args.seconds, args.mib)
    elif args.launcher == "spawn":
        import torch.multiprocessing as mp
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port))
        mp.spawn(spawned, args=(args.shape, args.seconds, args.mib), nprocs=WORLD)
    else:
        port = str(args.port)
        ranks = []
        for rank in (int(r) for r in args.start.split(",")):
            env = dict(os.environ, SLURM_PROCID=str(rank), SLURM_NTASKS=str(WORLD), SLURM_LOCALID=str(rank),
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=port, OMP_NUM_THREADS="1")
            ranks.append(subprocess.Popen([sys.executable, "-u", os.path.abspath(__file__), args.shape,
                                           "--launcher", "rank", "--seconds", str(args.seconds), "--port", port,
                                           "--mib", str(args.mib)] + tag,
                                          env=env, stdin=subprocess.PIPE))
        for _ in ranks:
            pid, status = os.wait()
            say("EXITED pid=%d status=%d" % (pid, status))


if __name__ == "__main__":
    main()
