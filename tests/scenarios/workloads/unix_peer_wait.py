"""A main process waits on a unix socket whose other end a child holds.

No torch: the shape of a launcher waiting on its agent, or a rank on a local
helper. The parent creates a socketpair and forks; the child keeps its end
and blocks reading a pipe nobody writes; the parent blocks in recv() on its
end. Prints "READY main=<pid> workers=<child>" right before recv().

  unix_peer_wait.py [--exit-after S]
      --exit-after S: the parent exits (status 0) after S seconds instead of
      waiting forever (the child is killed first): an ordinary end of a job.
"""
import os
import signal
import socket
import sys
import time


def main():
    exit_after = None
    if "--exit-after" in sys.argv:
        exit_after = float(sys.argv[sys.argv.index("--exit-after") + 1])
    mine, theirs = socket.socketpair()
    child = os.fork()
    if child == 0:
        mine.close()
        r, _w = os.pipe()
        os.read(r, 1)          # forever: holds `theirs` and never writes
        os._exit(0)
    theirs.close()
    print("READY main=%d workers=%d" % (os.getpid(), child), flush=True)
    if exit_after is not None:
        time.sleep(exit_after)
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        return 0
    mine.recv(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
