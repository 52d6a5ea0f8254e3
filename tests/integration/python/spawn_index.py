"""Frames whose argument says who the process is, for python_stacks_test.

torch.multiprocessing.spawn runs each child as _wrap(fn, i, args,
error_queues) from torch/multiprocessing/spawn.py; hangtrace reads i from the
frame's locals. This program needs no torch: it writes a module of that path
whose _wrap has torch's signature into a temporary directory, and calls it
as spawn does -- in the main thread with i = 3, and in a second thread with
an index past 32 bits (an int of two 30-bit digits) -- and both then block.
  READY pid=P main_tid=T thread_tid=A py_minor=M
"""
import os
import shutil
import sys
import tempfile
import threading

WRAP = '''
def _wrap(fn, i, args, error_queues):
    fn(i, *args)
'''

root = tempfile.mkdtemp(prefix="ht-spawn-index-")
package = os.path.join(root, "torch", "multiprocessing")
os.makedirs(package)
for d in (os.path.join(root, "torch"), package):
    open(os.path.join(d, "__init__.py"), "w").close()
with open(os.path.join(package, "spawn.py"), "w") as f:
    f.write(WRAP)
sys.path.insert(0, root)
from torch.multiprocessing.spawn import _wrap  # noqa: E402  (the module written above)

shutil.rmtree(root)  # loaded: its code objects keep the path

BIG = 2**40 + 3
r, w = os.pipe()
tids = {}
started = threading.Barrier(2)


def work(i):
    tids[i] = threading.get_native_id()
    if i == BIG:
        started.wait()
    os.read(r, 1)


threading.Thread(target=_wrap, args=(work, BIG, (), None), daemon=True).start()
started.wait()
print("READY pid=%d main_tid=%d thread_tid=%d py_minor=%d"
      % (os.getpid(), threading.get_native_id(), tids[BIG], sys.version_info[1]), flush=True)
_wrap(work, 3, (), None)
