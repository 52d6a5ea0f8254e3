"""For the on-CPU sampler: a thread spins in spin_here() while the main thread
sits blocked reading stdin.
   READY pid=PID spinner=TID main=TID
   (EOF or a line on stdin ends it)"""
import os
import sys
import threading

stop = False


def spin_here():
    x = 0
    while not stop:
        x += 1
    return x


def spinner_main(ready):
    ready.append(threading.get_native_id())
    spin_here()


if __name__ == "__main__":
    ready = []
    t = threading.Thread(target=spinner_main, args=(ready,), name="spinner")
    t.start()
    while not ready:
        pass
    print(f"READY pid={os.getpid()} spinner={ready[0]} main={threading.get_native_id()}", flush=True)
    sys.stdin.readline()
    stop = True
    t.join()
