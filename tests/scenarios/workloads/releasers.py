"""Waits whose releaser is outside the job (test_wait_releasers.py).

  releasers.py lock-hold KIND PATH [cycle]
      takes a KIND lock (flock | posix | ofd) on PATH, prints
      "READY holder=PID", then keeps it -- or with `cycle`, holds it 0.5 s
      and lets it go 0.5 s, over and over (a lock that is released every second)
  releasers.py lock-take KIND PATH [loop]
      prints "READY main=PID", then waits for the same lock; with `loop`,
      takes it, works 50 ms, lets it go, over and over, printing "TOOK N"
  releasers.py lock-poll KIND PATH
      prints "READY main=PID", then tries the lock without blocking every
      50 ms until it gets it (LOCK_NB / F_SETLK, as lock-file libraries do),
      then prints "TOOK N" and holds it 0.2 s, lets it go and starts over
  releasers.py spawn-lock-take KIND PATH
      torch.multiprocessing.spawn()s two processes that each wait for the
      KIND lock on PATH; prints "READY main=PID children=A,B" and joins them
  releasers.py wait-file PATH
      prints "READY main=PID", then checks every 50 ms for PATH to appear
  releasers.py write-stdout
      prints "READY main=PID" on stdout, then writes lines to stdout forever
  releasers.py read-stdin MODE
      the reader of a pipe: forwards the first line it reads with its pid
      ("READY main=1 reader=PID"), then `sleep`s for an hour without reading,
      or reads 4 KiB every 50 ms (`slow`)
  releasers.py pause
      prints "READY main=PID", then waits in pause() for a signal nobody sends
  releasers.py sleep
      prints "READY main=PID", then sleeps ten minutes in time.sleep
  releasers.py popen-wait
      starts a child (`flood`) with stdout=PIPE, prints "READY main=PID
      child=PID", then Popen.wait()s for it: the child fills the pipe first
  releasers.py join-before-get
      starts a multiprocessing.Process that puts 1 MiB on a Queue, prints
      "READY main=PID child=PID", then join()s it before get()
  releasers.py dead-producer
      starts a multiprocessing.Process that exits without putting anything,
      prints "READY main=PID child=PID", then get()s from the Queue
  releasers.py flood
      writes 1 MiB to stdout
"""
import multiprocessing
import subprocess
import fcntl
import os
import signal
import struct
import sys
import time


def lock(kind, fd, blocking=True):
    if kind == "flock":
        fcntl.flock(fd, fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB)
    elif kind == "posix":
        fcntl.lockf(fd, fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB)
    elif kind == "ofd":
        # struct flock: l_type, l_whence, l_start, l_len, l_pid (0 for OFD locks)
        arg = struct.pack("hhqqi", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
        fcntl.fcntl(fd, fcntl.F_OFD_SETLKW if blocking else fcntl.F_OFD_SETLK, arg)
    else:
        raise SystemExit("unknown lock kind %r" % kind)


def unlock(kind, fd):
    if kind == "flock":
        fcntl.flock(fd, fcntl.LOCK_UN)
    elif kind == "posix":
        fcntl.lockf(fd, fcntl.LOCK_UN)
    else:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack("hhqqi", fcntl.F_UNLCK, os.SEEK_SET, 0, 0, 0))


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def produce(queue, put):
    if put:
        queue.put(b"x" * (1 << 20))


def take_lock_in_spawned(index, kind, path):
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    lock(kind, fd)
    time.sleep(3600)


def main():
    what = sys.argv[1]
    if what == "lock-hold":
        kind, path = sys.argv[2], sys.argv[3]
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        lock(kind, fd)
        say("READY holder=%d" % os.getpid())
        if sys.argv[4:] == ["cycle"]:
            while True:
                time.sleep(0.5)
                unlock(kind, fd)
                time.sleep(0.5)
                lock(kind, fd)
        while True:
            time.sleep(3600)
    elif what == "lock-take":
        kind, path = sys.argv[2], sys.argv[3]
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        say("READY main=%d" % os.getpid())
        if sys.argv[4:] == ["loop"]:
            n = 0
            while True:
                lock(kind, fd)
                time.sleep(0.05)
                unlock(kind, fd)
                n += 1
                say("TOOK %d" % n)
        lock(kind, fd)
        say("LOCKED")
        time.sleep(3600)
    elif what == "spawn-lock-take":
        import torch.multiprocessing
        kind, path = sys.argv[2], sys.argv[3]
        context = torch.multiprocessing.spawn(take_lock_in_spawned, args=(kind, path), nprocs=2, join=False)
        say("READY main=%d children=%s" % (os.getpid(), ",".join(str(p.pid) for p in context.processes)))
        while not context.join():
            pass
    elif what == "lock-poll":
        kind, path = sys.argv[2], sys.argv[3]
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        say("READY main=%d" % os.getpid())
        n = 0
        while True:
            try:
                lock(kind, fd, blocking=False)
            except OSError:
                time.sleep(0.05)
                continue
            n += 1
            say("TOOK %d" % n)
            time.sleep(0.2)
            unlock(kind, fd)
    elif what == "wait-file":
        path = sys.argv[2]
        say("READY main=%d" % os.getpid())
        while not os.path.exists(path):
            time.sleep(0.05)
        say("APPEARED")
    elif what == "write-stdout":
        say("READY main=%d" % os.getpid())
        line = "x" * 1023 + "\n"
        while True:
            sys.stdout.write(line)
    elif what == "read-stdin":
        first = sys.stdin.buffer.readline().decode().strip()
        print("%s reader=%d" % (first, os.getpid()), flush=True)
        if sys.argv[2] == "sleep":
            time.sleep(3600)
        while True:
            os.read(0, 4096)
            time.sleep(0.05)
    elif what == "pause":
        say("READY main=%d" % os.getpid())
        signal.pause()
    elif what == "popen-wait":
        child = subprocess.Popen([sys.executable, __file__, "flood"], stdout=subprocess.PIPE)
        say("READY main=%d child=%d" % (os.getpid(), child.pid))
        child.wait()
        say("WAITED")
    elif what in ("join-before-get", "dead-producer"):
        multiprocessing.set_start_method("fork")
        queue = multiprocessing.Queue()
        child = multiprocessing.Process(target=produce, args=(queue, what == "join-before-get"))
        child.start()
        say("READY main=%d child=%d" % (os.getpid(), child.pid))
        if what == "join-before-get":
            child.join()
        queue.get()
        say("GOT")
    elif what == "flood":
        sys.stdout.buffer.write(b"x" * (1 << 20))
        sys.stdout.flush()
    elif what == "sleep":
        say("READY main=%d" % os.getpid())
        time.sleep(600)
    else:
        raise SystemExit("unknown command %r" % what)


if __name__ == "__main__":
    main()
