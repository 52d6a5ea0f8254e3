"""A FUSE filesystem in pure Python over /dev/fuse that never answers a READ.

    fuse_silent_server.py MOUNTPOINT [NAME]

Opens /dev/fuse, mounts it on MOUNTPOINT with mount(2) (fstype fuse.NAME,
source NAME, default datasetfs; needs root), and serves one directory with
one file, shard-3.bin (1 MiB): INIT, LOOKUP, GETATTR, OPEN answered, READ
read and never answered, anything else ENOSYS. Prints "MOUNTED pid=P
mount=MOUNTPOINT" once INIT is answered and "READ pid=TID offset=N" for each
READ it swallows. Its own wait, between requests, is a read of /dev/fuse.
The caller unmounts (umount -l) and kills it.
"""
import ctypes
import errno
import os
import stat
import struct
import sys

FUSE_LOOKUP, FUSE_FORGET, FUSE_GETATTR, FUSE_OPEN, FUSE_READ = 1, 2, 3, 14, 15
FUSE_INIT, FUSE_INTERRUPT, FUSE_BATCH_FORGET, FUSE_DESTROY = 26, 36, 42, 38
NO_REPLY = (FUSE_FORGET, FUSE_BATCH_FORGET, FUSE_INTERRUPT)

IN_HEADER = struct.Struct("<IIQQIIIHH")   # len opcode unique nodeid uid gid pid total_extlen padding
OUT_HEADER = struct.Struct("<IiQ")        # len error unique
ATTR = struct.Struct("<QQQQQQIIIIIIIIII")  # ino size blocks atime mtime ctime *nsec mode nlink uid gid rdev blksize flags

ROOT, FILE = 1, 2
FILE_NAME = b"shard-3.bin"
FILE_SIZE = 1 << 20
MS_NOSUID, MS_NODEV = 2, 4
FOPEN_KEEP_CACHE = 1 << 1


def attr(node):
    if node == ROOT:
        return ATTR.pack(ROOT, 0, 0, 0, 0, 0, 0, 0, 0, stat.S_IFDIR | 0o755, 2, 0, 0, 0, 4096, 0)
    return ATTR.pack(FILE, FILE_SIZE, FILE_SIZE // 512, 0, 0, 0, 0, 0, 0, stat.S_IFREG | 0o444, 1, 0, 0, 0,
                     4096, 0)


def reply(fd, unique, payload=b"", error=0):
    os.write(fd, OUT_HEADER.pack(OUT_HEADER.size + len(payload), -error, unique) + payload)


def fuse_mount(mountpoint, name):
    """Opens /dev/fuse and mounts it on mountpoint (fstype fuse.NAME, source
    NAME); returns the descriptor. Exits when mount(2) fails."""
    fd = os.open("/dev/fuse", os.O_RDWR)
    libc = ctypes.CDLL(None, use_errno=True)
    opts = "fd=%d,rootmode=40000,user_id=0,group_id=0" % fd
    if libc.mount(name.encode(), mountpoint.encode(), ("fuse." + name).encode(), MS_NOSUID | MS_NODEV,
                  opts.encode()) != 0:
        e = ctypes.get_errno()
        sys.exit("mount: %s" % os.strerror(e))
    return fd


def reply_init(fd, unique, body):
    """Answers INIT: no FUSE_ASYNC_READ, so a read waits in its own request."""
    major, minor, readahead, _flags = struct.unpack_from("<IIII", body)
    # major minor max_readahead flags max_background congestion max_write time_gran
    # max_pages map_alignment flags2 max_stack_depth unused[6]
    out = struct.pack("<IIIIHHIIHHII24x", 7, min(minor, 31), readahead, 0, 16, 12, 128 * 1024, 1, 32,
                      0, 0, 0)
    reply(fd, unique, out)


def reply_entry(fd, unique, node, node_attr):
    """Answers LOOKUP with `node` and its attributes, both cached an hour."""
    reply(fd, unique, struct.pack("<QQQQII", node, 0, 3600, 3600, 0, 0) + node_attr)


def reply_attr(fd, unique, node_attr):
    """Answers GETATTR, cached an hour."""
    reply(fd, unique, struct.pack("<QII", 3600, 0, 0) + node_attr)


def serve(fd, mountpoint, handle):
    """Serves the file system mounted from fd until it is unmounted (or
    DESTROY): answers INIT (then prints "MOUNTED pid=P mount=MOUNTPOINT") and
    hands every other request to handle(fd, opcode, unique, node, pid,
    body); one it returns False for, and that expects a reply, gets ENOSYS."""
    while True:
        try:
            req = os.read(fd, 1 << 20 | 4096)
        except OSError as e:
            if e.errno in (errno.EINTR, errno.ENOENT):
                continue
            if e.errno == errno.ENODEV:   # unmounted and aborted
                return
            raise
        length, opcode, unique, node, _uid, _gid, pid, _ext, _pad = IN_HEADER.unpack_from(req)
        body = req[IN_HEADER.size:length]
        if opcode == FUSE_INIT:
            reply_init(fd, unique, body)
            print("MOUNTED pid=%d mount=%s" % (os.getpid(), mountpoint), flush=True)
        elif opcode == FUSE_DESTROY:
            return
        elif not handle(fd, opcode, unique, node, pid, body) and opcode not in NO_REPLY:
            reply(fd, unique, error=errno.ENOSYS)


def silent(fd, opcode, unique, node, pid, body):
    if opcode == FUSE_LOOKUP:
        if node == ROOT and body.rstrip(b"\0") == FILE_NAME:
            reply_entry(fd, unique, FILE, attr(FILE))
        else:
            reply(fd, unique, error=errno.ENOENT)
    elif opcode == FUSE_GETATTR:
        reply_attr(fd, unique, attr(node))
    elif opcode == FUSE_OPEN:
        # FOPEN_KEEP_CACHE: a second open does not drop the page the first read fills.
        reply(fd, unique, struct.pack("<QIi", 1, FOPEN_KEEP_CACHE, 0))
    elif opcode == FUSE_READ:
        offset = struct.unpack_from("<QQ", body)[1]
        print("READ pid=%d offset=%d" % (pid, offset), flush=True)   # ... and never answered
    else:
        return False
    return True


def main():
    mountpoint = sys.argv[1]
    serve(fuse_mount(mountpoint, sys.argv[2] if len(sys.argv) > 2 else "datasetfs"), mountpoint, silent)


if __name__ == "__main__":
    main()
