"""A main process fed by a worker over a pipe: the worker writes a line every
50 ms, the main process reads them. Once the worker is stopped (SIGSTOP from
outside: a scheduler's suspend, a script, Ctrl-Z in its terminal) main waits
in read() forever.

Prints "READY main=<pid> worker=<pid>" once main has read its first line.
"""
import os
import sys
import time

read_end, write_end = os.pipe()
worker = os.fork()
if worker == 0:
    os.close(read_end)
    while True:
        os.write(write_end, b"batch\n")
        time.sleep(0.05)
os.close(write_end)
with os.fdopen(read_end, "rb", buffering=0) as feed:
    feed.readline()
    print("READY main=%d worker=%d" % (os.getpid(), worker), flush=True)
    while feed.readline():
        pass
sys.exit(0)
