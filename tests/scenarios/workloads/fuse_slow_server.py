"""A throttled FUSE file system in pure Python over /dev/fuse: many small
files, each READ answered after a fixed delay (a slow NAS).

    fuse_slow_server.py MOUNTPOINT [--name NAME] [--files N] [--size BYTES] [--delay-ms MS]

Mounts fstype fuse.NAME (source NAME, default slowfs) on MOUNTPOINT (root)
with files sample-0000.bin .. sample-<N-1>.bin of BYTES bytes each (default
1000 x 16 KiB, byte i of file k is (k + i) % 256). Opens are direct I/O, so
every read(2) is one READ request that the daemon answers DELAY ms later
(default 15; a timer thread answers, so reads from several workers overlap
as on a NAS); LOOKUP, GETATTR, OPEN, RELEASE answered at once, anything else
ENOSYS. Prints "MOUNTED pid=P mount=MOUNTPOINT" once INIT is answered. The
caller unmounts (umount -l) and kills it.
"""
import argparse
import errno
import heapq
import stat
import struct
import threading
import time

from fuse_silent_server import (ATTR, FUSE_GETATTR, FUSE_LOOKUP, FUSE_OPEN, FUSE_READ, ROOT, reply, reply_attr,
                                reply_entry, fuse_mount, serve)

FUSE_RELEASE = 18
FOPEN_DIRECT_IO = 1 << 0
READ_IN = struct.Struct("<QQI")   # fh offset size (read_flags lock_owner flags padding follow)


class SlowFs:
    def __init__(self, files, size):
        self.files, self.size = files, size

    def node_of(self, name):
        if name.startswith(b"sample-") and name.endswith(b".bin"):
            digits = name[len(b"sample-"):-len(b".bin")]
            if digits.isdigit() and len(digits) == 4 and int(digits) < self.files:
                return ROOT + 1 + int(digits)
        return None

    def attr(self, node):
        if node == ROOT:
            return ATTR.pack(ROOT, 0, 0, 0, 0, 0, 0, 0, 0, stat.S_IFDIR | 0o755, 2, 0, 0, 0, 4096, 0)
        return ATTR.pack(node, self.size, (self.size + 511) // 512, 0, 0, 0, 0, 0, 0, stat.S_IFREG | 0o444,
                         1, 0, 0, 0, 4096, 0)

    def data(self, node, offset, size):
        k = node - ROOT - 1
        n = max(0, min(size, self.size - offset))
        return bytes((k + offset + i) % 256 for i in range(256)) * (n // 256) + \
            bytes((k + offset + i) % 256 for i in range(n % 256))


class Delayed(threading.Thread):
    """Writes each queued reply at its due time."""

    def __init__(self, fd):
        super().__init__(daemon=True)
        self.fd, self.heap, self.cond = fd, [], threading.Condition()

    def later(self, due, unique, payload):
        with self.cond:
            heapq.heappush(self.heap, (due, unique, payload))
            self.cond.notify()

    def run(self):
        while True:
            with self.cond:
                while not self.heap or self.heap[0][0] > time.monotonic():
                    self.cond.wait(None if not self.heap else self.heap[0][0] - time.monotonic())
                _, unique, payload = heapq.heappop(self.heap)
            try:
                reply(self.fd, unique, payload)
            except OSError as e:
                if e.errno not in (errno.ENOENT, errno.ENODEV):   # interrupted, or unmounted
                    raise


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mountpoint")
    ap.add_argument("--name", default="slowfs")
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--size", type=int, default=16384)
    ap.add_argument("--delay-ms", type=float, default=15.0)
    args = ap.parse_args()
    fd = fuse_mount(args.mountpoint, args.name)
    fs, delayed = SlowFs(args.files, args.size), Delayed(fd)
    delayed.start()

    def handle(fd, opcode, unique, node, _pid, body):
        if opcode == FUSE_LOOKUP:
            child = fs.node_of(body.rstrip(b"\0")) if node == ROOT else None
            if child:
                reply_entry(fd, unique, child, fs.attr(child))
            else:
                reply(fd, unique, error=errno.ENOENT)
        elif opcode == FUSE_GETATTR:
            reply_attr(fd, unique, fs.attr(node))
        elif opcode == FUSE_OPEN:
            reply(fd, unique, struct.pack("<QIi", node, FOPEN_DIRECT_IO, 0))
        elif opcode == FUSE_READ:
            _fh, offset, size = READ_IN.unpack_from(body)
            delayed.later(time.monotonic() + args.delay_ms / 1000.0, unique, fs.data(node, offset, size))
        elif opcode == FUSE_RELEASE:
            reply(fd, unique)
        else:
            return False
        return True

    serve(fd, args.mountpoint, handle)


if __name__ == "__main__":
    main()
