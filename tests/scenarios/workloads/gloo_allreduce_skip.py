"""Two gloo ranks; one runs out of batches and never joins the last all_reduce.

Field report shape: data is sharded unevenly across ranks, so rank 1's loader
ends one step early. Rank 1 leaves the training loop and waits for its
checkpoint upload (a sleep loop here, nothing to do with torch.distributed),
while rank 0 enters the next all_reduce and waits there for a peer that never
comes. gloo's timeout is set to 10 minutes, so nothing ends during a test.

  gloo_allreduce_skip.py [--steps N]
      The launcher: picks a free port on 127.0.0.1 and starts two ranks as its
      child processes with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
      MASTER_PORT in their environment (what torchrun does), then waits for
      them. Prints "READY launcher=<pid> rank0=<pid> rank1=<pid> port=<port>
      steps=<N>" once rank 0 is about to enter its last all_reduce and rank 1
      is about to park.
  gloo_allreduce_skip.py [--steps N] --nnodes 2 --node-rank K --master ADDR:PORT
      The launcher of one node of two (like `torchrun --nnodes 2
      --nproc-per-node 1` on each host): starts rank K alone, the rendezvous
      at ADDR:PORT (rank 0's host: its launcher is started there), and prints
      "READY launcher=<pid> rank<K>=<pid> port=<port> steps=<N>" once that
      rank reached its hang.
  gloo_allreduce_skip.py rank --steps N
      One rank (reads its identity from the environment). Rank 0 does N steps,
      rank 1 does N - 1. Each reports to the launcher on stdout.
"""
import argparse
import datetime
import os
import socket
import subprocess
import sys
import time


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(steps, node_ranks=(0, 1), master=None):
    addr, port = master.rsplit(":", 1) if master else ("127.0.0.1", free_port())
    ranks = []
    for rank in node_ranks:
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank if not master else 0),
                   MASTER_ADDR=addr, MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        ranks.append(subprocess.Popen([sys.executable, "-u", os.path.abspath(__file__), "rank",
                                       "--steps", str(steps)],
                                      env=env, stdout=subprocess.PIPE, text=True))
    # Each rank prints one line when it reaches where the hang happens.
    seen = {}
    for rank, proc in zip(node_ranks, ranks):
        for line in proc.stdout:
            print("rank %d: %s" % (rank, line.rstrip()), flush=True)
            if line.startswith(("LAST_ALL_REDUCE", "PARKED")):
                seen[rank] = proc.pid
                break
        else:
            sys.exit("rank %d exited (rc=%s) before reaching its last step" % (rank, proc.wait()))
    print("READY launcher=%d %s port=%s steps=%d" % (os.getpid(), " ".join(
        "rank%d=%d" % (rank, pid) for rank, pid in sorted(seen.items())), port, steps), flush=True)
    for proc in ranks:
        proc.wait()


def wait_for_checkpoint_upload():
    # Stands for "the rank left the training loop": not a collective, and
    # never returns while the test looks at it.
    while True:
        time.sleep(3600)


def run_rank(steps):
    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", init_method="env://", rank=rank,
                            world_size=int(os.environ["WORLD_SIZE"]),
                            timeout=datetime.timedelta(minutes=10))
    batches = steps if rank == 0 else steps - 1   # uneven shards
    grad = torch.ones(16)
    for step in range(batches):
        if rank == 0 and step == steps - 1:
            print("LAST_ALL_REDUCE rank=%d pid=%d step=%d" % (rank, os.getpid(), step), flush=True)
        dist.all_reduce(grad)
    print("PARKED rank=%d pid=%d after=%d steps" % (rank, os.getpid(), batches), flush=True)
    wait_for_checkpoint_upload()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("role", nargs="?", default="launch", choices=["launch", "rank"])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--nnodes", type=int, choices=[1, 2], default=1)
    parser.add_argument("--node-rank", type=int, choices=[0, 1], default=0)
    parser.add_argument("--master", help="ADDR:PORT of the rendezvous, with --nnodes 2")
    args = parser.parse_args()
    if args.role == "rank":
        run_rank(args.steps)
    elif args.nnodes == 2:
        if not args.master:
            parser.error("--nnodes 2 needs --master ADDR:PORT")
        launch(args.steps, node_ranks=(args.node_rank,), master=args.master)
    else:
        launch(args.steps)
