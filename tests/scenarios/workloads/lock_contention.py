"""Shape c of issue 18, lock contention: the main thread and N Python threads
queue on one threading.Lock, each holding it while it does GIL-releasing
work (a time.sleep standing in for a file write or a torch op), then working
briefly outside it. With 4 threads holding 10 ms and 2 ms outside, the lock
is always held and each thread waits ~70% of the time to acquire it.

    lock_contention.py LOG [TAG...] [--threads N] [--hold-ms MS] [--outside-ms MS] [--seconds S]

Ground truth in LOG (groundtruth.py): each thread's "acquire" (waiting to
acquire) and "hold" intervals. Prints "READY main=<pid> threads=<tid>,..."
(the other threads' tids) once every thread has held the lock a few times.
"""
import os
import threading
import time

from groundtruth import TruthLog, job_args

def contend(log, shared, hold_s, outside_s, end, rounds):
    tid = threading.get_native_id()
    while time.monotonic() < end:
        with log.span("acquire"):
            shared.acquire()
        with log.span("hold"):
            time.sleep(hold_s)                 # the work done under the lock
            shared.release()
        rounds[tid] = rounds.get(tid, 0) + 1   # this thread's key only
        time.sleep(outside_s)                  # the work outside it


def main():
    args = job_args(__doc__, seconds=60.0, threads=3, hold_ms=10.0, outside_ms=2.0)
    log = TruthLog(args.log)
    shared = threading.Lock()
    end = time.monotonic() + args.seconds
    rounds = {}
    work = (log, shared, args.hold_ms / 1000.0, args.outside_ms / 1000.0, end, rounds)
    threads = [threading.Thread(target=contend, args=work, name="contender-%d" % i, daemon=True)
               for i in range(args.threads)]
    for t in threads:
        t.start()

    main_tid = threading.get_native_id()

    def ready():
        tids = [t.native_id for t in threads]
        while min(rounds.get(t, 0) for t in tids + [main_tid]) < 3:
            time.sleep(0.01)
        print("READY main=%d threads=%s" % (os.getpid(), ",".join(str(t) for t in tids)), flush=True)

    threading.Thread(target=ready, name="ready", daemon=True).start()
    contend(*work)
    print("DONE rounds=%s" % sorted(rounds.values()), flush=True)


if __name__ == "__main__":
    main()
