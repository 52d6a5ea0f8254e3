"""Under torchrun: two gloo ranks with two DataLoader workers each; rank 1
stops taking part while rank 0 waits for it in all_reduce.

Field report shape: "torchrun job hangs after the first steps, every process
at 0% CPU". Each rank trains from a DataLoader (num_workers=2, the workers
forked from the rank). After the first steps rank 1 hands its checkpoint to
an upload thread and joins it before the next step; the upload waits for an
acknowledgement on a pipe nobody ever writes, so rank 1 never reaches the
next all_reduce, and rank 0 waits there (gloo timeout: 10 minutes, so
nothing ends during a test).

Run it the way users do:
  python3 -m torch.distributed.run --nnodes 1 --nproc_per_node 2 \
      --master_addr 127.0.0.1 --master_port PORT torchrun_rank_hang.py [TAG...]
(torchrun sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT;
extra arguments are ignored -- a tag for `pgrep -f`.)

Each rank prints, on torchrun's stdout, right before it blocks:
  "RANK rank=<r> local_rank=<l> world_size=<w> pid=<pid> workers=<a>,<b>
   ppid=<torchrun's pid> state=<all_reduce|upload>"
"""
import datetime
import os
import threading

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

STEPS_BEFORE_CHECKPOINT = 2


class Samples(Dataset):
    def __len__(self):
        return 1024

    def __getitem__(self, index):
        return torch.full((16,), float(index))


def say(line):
    # One write(2) per line: print() writes the text and its newline apart,
    # and the two ranks share torchrun's stdout -- their markers, printed
    # the same instant, would interleave into one line.
    os.write(1, (line + "\n").encode())


def upload_checkpoint(ack_fd):
    os.read(ack_fd, 1)                 # the acknowledgement that never comes


def main():
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    # The workers are forked before gloo starts its threads: a fork while
    # one of them holds a lock would give a worker a lock nobody unlocks
    # (a different hang, and a flaky start).
    loader = DataLoader(Samples(), batch_size=4, num_workers=2, persistent_workers=True,
                        multiprocessing_context="fork")
    batches = iter(loader)             # forks the workers now
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(minutes=10))
    workers = ",".join(str(w.pid) for w in batches._workers)
    grad = torch.zeros(16)
    for _ in range(STEPS_BEFORE_CHECKPOINT):
        grad += next(batches).sum(0)
        dist.all_reduce(grad)

    marker = ("RANK rank=%d local_rank=%d world_size=%d pid=%d workers=%s ppid=%d"
              % (rank, local_rank, world_size, os.getpid(), workers, os.getppid()))
    if rank == 1:
        ack_r, ack_w = os.pipe()       # ack_w stays open: read() never sees EOF
        upload = threading.Thread(target=upload_checkpoint, args=(ack_r,), name="ckpt-upload")
        upload.start()
        say(marker + " state=upload")
        upload.join()                  # never returns
    grad += next(batches).sum(0)
    say(marker + " state=all_reduce")
    dist.all_reduce(grad)              # rank 0: waits for rank 1 forever
    say("STEP-DONE rank=%d" % rank)


if __name__ == "__main__":
    main()
