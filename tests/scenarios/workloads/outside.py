"""A job that waits on a process outside it, and that process
(test_outside_releasers.py). The outside side is started on its own, never
by the job; each side prints one READY line with its pid.

Outside the job:
  outside.py serve-eventfd SOCK [live]
      makes an eventfd, prints "READY server=PID", and hands it to whoever
      connects to the unix socket SOCK (SCM_RIGHTS); then sleeps -- or, with
      `live`, adds 1 to it every 0.2 s
  outside.py serve-silent SOCK
      listens on the unix socket SOCK, prints "READY server=PID", accepts one
      connection and sleeps without reading or answering it
  outside.py hold-fifo PATH
      opens the FIFO PATH for writing (waits for a reader), prints
      "READY writer=PID", then sleeps without writing
  outside.py hold-sem NAME
      makes the POSIX semaphore NAME (/dev/shm/sem.NAME) with value 1, takes
      it, prints "READY holder=PID", then sleeps holding it
  outside.py sleeper
      prints "READY sleeper=PID", then sleeps an hour

The job:
  outside.py take-eventfd SOCK      gets the eventfd from SOCK, prints
      "READY main=PID", then reads it forever, printing "GOT N" per value
  outside.py ask SOCK               connects to SOCK, sends a request, prints
      "READY main=PID", then waits for the answer
  outside.py select-fifo PATH       opens the FIFO PATH for reading, prints
      "READY main=PID", then select()s on it for data
  outside.py take-sem NAME          opens the semaphore NAME, prints
      "READY main=PID", then waits to take it
  outside.py wait-exit PID          opens a pidfd of PID, prints
      "READY main=PID", then poll()s it for PID's exit
  outside.py signalfd               blocks SIGUSR1, reads it from a signalfd
      after printing "READY main=PID"
  outside.py open-fifo PATH         prints "READY main=PID", then opens the
      FIFO PATH for reading: open() waits for a writer that never comes
"""
import ctypes
import os
import select
import signal
import socket
import sys
import time


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def listen(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    os.chmod(path, 0o777)
    s.listen(4)
    return s


def connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    return s


def named_semaphore(name, create):
    import _multiprocessing
    kind, value, maxvalue = 1, 1, 1  # multiprocessing.synchronize.SEMAPHORE
    if create:
        return _multiprocessing.SemLock(kind, value, maxvalue, name, False)
    return _multiprocessing.SemLock._rebuild(0, kind, maxvalue, name)


def main():
    what, args = sys.argv[1], sys.argv[2:]
    if what == "serve-eventfd":
        efd = os.eventfd(0)
        server = listen(args[0])
        say("READY server=%d" % os.getpid())
        conn, _ = server.accept()
        socket.send_fds(conn, [b"e"], [efd])
        conn.close()
        while True:
            if args[1:] == ["live"]:
                time.sleep(0.2)
                os.eventfd_write(efd, 1)
            else:
                time.sleep(3600)
    elif what == "serve-silent":
        server = listen(args[0])
        say("READY server=%d" % os.getpid())
        conn, _ = server.accept()
        time.sleep(3600)
    elif what == "hold-fifo":
        fd = os.open(args[0], os.O_WRONLY)
        say("READY writer=%d" % os.getpid())
        time.sleep(3600)
        os.close(fd)
    elif what == "hold-sem":
        sem = named_semaphore(args[0], create=True)
        sem.acquire()
        say("READY holder=%d" % os.getpid())
        time.sleep(3600)
    elif what == "sleeper":
        say("READY sleeper=%d" % os.getpid())
        time.sleep(3600)
    elif what == "take-eventfd":
        conn = connect(args[0])
        _, fds, _, _ = socket.recv_fds(conn, 1, 1)
        conn.close()
        say("READY main=%d" % os.getpid())
        n = 0
        while True:
            n += os.eventfd_read(fds[0])
            say("GOT %d" % n)
    elif what == "ask":
        conn = connect(args[0])
        conn.sendall(b"status?\n")
        say("READY main=%d" % os.getpid())
        conn.recv(4096)
        say("ANSWERED")
    elif what == "select-fifo":
        fd = os.open(args[0], os.O_RDONLY | os.O_NONBLOCK)
        say("READY main=%d" % os.getpid())
        while True:
            select.select([fd], [], [])
            if not os.read(fd, 4096):
                break
    elif what == "take-sem":
        sem = named_semaphore(args[0], create=False)
        say("READY main=%d" % os.getpid())
        sem.acquire()
        say("TOOK")
    elif what == "wait-exit":
        pidfd = os.pidfd_open(int(args[0]))
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        say("READY main=%d" % os.getpid())
        poller.poll()
        say("EXITED")
    elif what == "signalfd":
        libc = ctypes.CDLL(None, use_errno=True)
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
        mask = (ctypes.c_uint64 * 16)()  # a sigset_t: 1024 bits
        mask[0] = 1 << (signal.SIGUSR1 - 1)
        sfd = libc.signalfd(-1, mask, 0)
        if sfd < 0:
            raise OSError(ctypes.get_errno(), "signalfd")
        say("READY main=%d" % os.getpid())
        os.read(sfd, 128)
        say("SIGNALLED")
    elif what == "open-fifo":
        say("READY main=%d" % os.getpid())
        os.open(args[0], os.O_RDONLY)
        say("OPENED")
    else:
        raise SystemExit("unknown command %r" % what)


if __name__ == "__main__":
    main()
