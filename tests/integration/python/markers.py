"""Line numbers of marked lines, for the READY lines of the test workloads.

A marker is a comment "# NAME" on the line; the tests compare the frames
hangtrace reads with these, so no workload hard-codes a line number.
Runs on CPython 3.8 and later.
"""
import inspect


def line_of(marker, func):
    """The line of `func` that carries "# marker"."""
    lines, first = inspect.getsourcelines(func)
    for i, text in enumerate(lines):
        if "# " + marker in text:
            return first + i
    raise RuntimeError(marker)


def line_in_file(path, marker):
    """The line of file `path` that ends with "# marker"."""
    with open(path) as f:
        for i, text in enumerate(f, 1):
            if text.rstrip().endswith("# " + marker):
                return i
    raise RuntimeError(marker)
