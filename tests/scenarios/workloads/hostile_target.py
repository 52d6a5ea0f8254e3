"""A process that is hard to look at (test_hostile_target.py):
hostile_target.py TAG MODE ... (TAG first: a command line cut at 1 MiB keeps
it, so a daemon matching it still finds the 1 MiB one); MODE is one of

  fds N DIR      N open fds (RLIMIT_NOFILE raised to fit, else as many as
                 its hard limit allows): pipes, a socket pair, an eventfd and
                 files in DIR, dup()ed up to N; READY says fds=HOW_MANY
  threads N      N threads (64 KiB stacks), each parked on one Event
  args ...       nothing but its own arguments (the test makes them 1 MiB)
  names DIR      its comm, a thread's comm and the files it holds open (in
                 DIR) full of terminal escapes, control characters and
                 bytes that are no UTF-8; the test adds such arguments too

Every mode prints "READY main=PID" once in place, then the main thread
sleeps in a read of a pipe nobody writes until killed.
"""
import ctypes
import os
import resource
import socket
import sys
import threading

PR_SET_NAME = 15
_libc = ctypes.CDLL(None, use_errno=True)

# What a terminal would act on (OSC title, clear screen, colour, bell, CR,
# C1 CSI as UTF-8) and bytes that decode as nothing.
HOSTILE = b"\x1b]0;owned\x07\x1b[2J\x1b[31m\r\xc2\x9b\xff\xfe\x01\x7f"


def set_comm(name):
    """prctl(PR_SET_NAME): the calling thread's comm, 15 bytes of `name`."""
    _libc.prctl(PR_SET_NAME, ctypes.c_char_p(name[:15]), 0, 0, 0)


def open_fds(count, directory):
    """Opens `count` fds, or as many as the hard limit allows where it cannot
    be raised (no CAP_SYS_RESOURCE); returns how many."""
    need = count + 64
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, need), max(hard, need)))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        count = min(count, hard - 64)
    kinds = list(os.pipe()) + [s.detach() for s in socket.socketpair()] + [os.eventfd(0)]
    for i in range(4):
        kinds.append(os.open(os.path.join(directory, "file-%d" % i), os.O_CREAT | os.O_RDWR, 0o600))
    opened = len(kinds)
    while opened < count:
        os.dup(kinds[opened % len(kinds)])
        opened += 1
    return count


def start_threads(count):
    threading.stack_size(64 * 1024)
    parked = threading.Event()
    for _ in range(count):
        threading.Thread(target=parked.wait, daemon=True).start()


def hostile_names(directory):
    set_comm(b"ev\x1b[31m\x07\xff\xfe\r\x01il")
    named = threading.Event()

    def thread():
        set_comm(b"\x1b]0;t\x07\xc2\x9b\xff")
        named.set()
        threading.Event().wait()

    threading.Thread(target=thread, daemon=True).start()
    named.wait()
    held = []
    for i, name in enumerate([HOSTILE + b".txt", b"line\nbreak\ttab", b"\xff\xfe\xfd" * 20, HOSTILE * 4]):
        held.append(os.open(os.path.join(os.fsencode(directory), name + b"-%d" % i), os.O_CREAT | os.O_RDWR, 0o600))
    return held


def main():
    mode, argv = sys.argv[2], sys.argv[2:]
    keep = None
    extra = ""
    if mode == "fds":
        extra = " fds=%d" % open_fds(int(argv[1]), argv[2])
    elif mode == "threads":
        start_threads(int(argv[1]))
    elif mode == "names":
        keep = hostile_names(argv[1])
    elif mode != "args":
        raise SystemExit("unknown mode %r" % mode)
    r, _w = os.pipe()
    print("READY main=%d%s" % (os.getpid(), extra), flush=True)
    os.read(r, 1)
    return keep


if __name__ == "__main__":
    main()
