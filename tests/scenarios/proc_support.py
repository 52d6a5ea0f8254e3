"""The host side of the scenario tests: processes, their states and
namespaces in /proc, cgroups and ports -- polled for, never slept on.
scenario_support re-exports these; tests import them from there."""

import ctypes
import errno
import os
import random
import signal
import socket
import time


def ephemeral_port_range():
    """The kernel's range for the source ports of outgoing connections."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
            return low, high
    except (OSError, ValueError):
        return 32768, 60999


def free_port():
    """A TCP port on 127.0.0.1 nobody listens on right now, outside the
    ephemeral range: a port from that range (what binding port 0 gives) can
    meanwhile become some connection's source port, so the server that is
    to listen on it fails to bind, and a client that connects to it before
    its server listens can be given it as its own source port (TCP then
    connects the socket to itself and the client waits for its own answer).
    Which of these, if either, made a CI run's torchrun job start no rank in
    180 s is not known; neither can happen here."""
    low, high = ephemeral_port_range()
    candidates = list(range(20000, low)) if low > 21024 else list(range(high + 1, 65536))
    random.shuffle(candidates)
    for port in candidates[:1000]:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free TCP port outside the ephemeral range %d-%d" % (low, high))


def remove_cgroup(path):
    """SIGKILLs every process left in the cgroup directory `path` and removes
    it once empty (exiting tasks leave it asynchronously); a missing one is
    fine."""
    procs = os.path.join(path, "cgroup.procs")
    deadline = time.monotonic() + 30
    while True:
        try:
            with open(procs) as f:
                pids = [int(p) for p in f.read().split()]
        except OSError:
            return
        kill_pids(pids)
        if not pids:
            try:
                os.rmdir(path)
                return
            except OSError as e:
                if e.errno != errno.EBUSY or time.monotonic() > deadline:
                    raise
        elif time.monotonic() > deadline:
            raise AssertionError("cgroup %s still has %s" % (path, pids))
        time.sleep(0.01)


# ---- /proc -------------------------------------------------------------------

def _read(path):
    # errors="replace": a comm or a command line is raw bytes, UTF-8 or not.
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return None


def thread_states(pid):
    """[(tid, state, syscall_nr, wchan, comm)] for every thread of pid.

    syscall_nr: the number from /proc/PID/task/TID/syscall, -1 when not in a
    syscall, -2 when "running" or unreadable.
    """
    out = []
    try:
        tids = sorted(int(t) for t in os.listdir("/proc/%d/task" % pid))
    except OSError:
        return out
    for tid in tids:
        base = "/proc/%d/task/%d" % (pid, tid)
        stat = _read(base + "/stat")
        if stat is None:
            continue
        rp = stat.rfind(")")
        state = stat[rp + 2] if rp >= 0 and rp + 2 < len(stat) else "?"
        comm = stat[stat.find("(") + 1:rp]
        sc = (_read(base + "/syscall") or "").split()
        nr = -2
        if sc and sc[0].lstrip("-").isdigit():
            nr = int(sc[0])
        out.append((tid, state, nr, (_read(base + "/wchan") or "").strip(), comm))
    return out


def describe(pids):
    lines = []
    for pid in pids:
        states = thread_states(pid)
        if not states:
            lines.append("pid %d: gone" % pid)
        for tid, state, nr, wchan, comm in states:
            lines.append("pid %d tid %d (%s) state %s syscall %d wchan %s" % (pid, tid, comm, state, nr, wchan))
    return "\n".join(lines)


def _signature(pid, main_syscalls, all_threads):
    """What the checked threads of pid are doing, or None when one of them is
    not asleep in a syscall (or the main thread is not in main_syscalls)."""
    sig = []
    states = thread_states(pid)
    if not states:
        return None
    for tid, state, nr, _, _ in states:
        if tid != pid and not all_threads:
            continue
        if state not in ("S", "D") or nr < 0:
            return None
        if tid == pid and main_syscalls and nr not in main_syscalls:
            return None
        status = _read("/proc/%d/task/%d/status" % (pid, tid)) or ""
        switches = [l for l in status.splitlines() if l.startswith("voluntary_ctxt_switches")]
        sig.append((tid, state, _read("/proc/%d/task/%d/syscall" % (pid, tid)), tuple(switches)))
    return tuple(sig)


def wait_until_blocked(pids, main_syscalls=None, all_threads=True, timeout=60.0, settle=0.3):
    """Polls /proc every 10 ms until, for every pid, the threads sleep (state S
    or D) inside a syscall -- the main thread (tid == pid) in one of
    `main_syscalls` when given -- and nothing about them (syscall and its
    arguments, voluntary context switches) changed for `settle` seconds: they
    are parked, not passing through. With all_threads=False only the main
    thread is checked. Raises AssertionError after `timeout` with what it
    last saw."""
    if isinstance(pids, int):
        pids = [pids]
    deadline = time.monotonic() + timeout
    last, since = None, None
    while True:
        sigs = [_signature(p, main_syscalls, all_threads) for p in pids]
        now = time.monotonic()
        if any(s is None for s in sigs):
            last, since = None, None
        elif sigs != last:
            last, since = sigs, now
        elif now - since >= settle:
            return
        if now > deadline:
            raise AssertionError("not blocked after %.0fs (want main thread in %s):\n%s"
                                 % (timeout, main_syscalls, describe(pids)))
        time.sleep(0.01)


def descendants(pid):
    """Every live descendant of pid (children first seen by ppid in /proc)."""
    children = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        stat = _read("/proc/%s/stat" % name)
        if not stat:
            continue
        rest = stat[stat.rfind(")") + 2:].split()
        if len(rest) > 1:
            children.setdefault(int(rest[1]), []).append(int(name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for c in children.get(p, []):
            out.append(c)
            todo.append(c)
    return out


def kill_pids(pids):
    """SIGKILL each of `pids` that still exists."""
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass


def process_age_s(pid):
    """Seconds since `pid` started (its stat start time against /proc/uptime),
    or None once it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return uptime - start_ticks / os.sysconf("SC_CLK_TCK")


def connections_accepted_on(port):
    """How many ESTABLISHED TCP connections of this network namespace have
    `port` as their local port (/proc/net/tcp and tcp6): the connections a
    server listening on it accepted."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f, None)
                for line in f:
                    fields = line.split()
                    if len(fields) > 3 and fields[3] == "01" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        count += 1
        except OSError:
            continue
    return count


def parse_marker(line):
    """'READY main=1 workers=2,3 port=5' -> {'main': [1], 'workers': [2, 3], 'port': [5]}.
    Everything before the first key=value is ignored."""
    out = {}
    for word in line.split():
        if "=" not in word:
            continue
        key, _, value = word.partition("=")
        vals = []
        for v in value.split(","):
            try:
                vals.append(int(v))
            except ValueError:
                vals.append(v)
        out[key] = vals
    return out


def _state(pid):
    stat = _read("/proc/%d/stat" % pid)
    if not stat:
        return None
    return stat[stat.rfind(")") + 2]


def proc_state(pid):
    """The one-letter scheduler state of pid, None when it is gone."""
    return _state(pid)


def wait_for_child(pid, comm, timeout=30.0):
    """The pid of pid's child whose comm is `comm` (after its exec), polled
    for until it exists; AssertionError after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        for child in (_read("/proc/%d/task/%d/children" % (pid, pid)) or "").split():
            stat = _read("/proc/%s/stat" % child) or ""
            if stat[stat.find("(") + 1:stat.rfind(")")] == comm:
                return int(child)
        if time.monotonic() > deadline:
            raise AssertionError("no child %r of %d after %.0fs:\n%s"
                                 % (comm, pid, timeout, describe([pid] + descendants(pid))))
        time.sleep(0.01)


def ns_pids(pid):
    """pid in each pid namespace it is in, the host's first (NSpid in
    /proc/PID/status); [] when it is gone."""
    for line in (_read("/proc/%d/status" % pid) or "").splitlines():
        if line.startswith("NSpid:"):
            return [int(p) for p in line.split()[1:]]
    return []


def tracer_pid(pid):
    """The pid of pid's ptrace tracer (TracerPid in /proc/PID/status), 0 for
    none or when it is gone."""
    for line in (_read("/proc/%d/status" % pid) or "").splitlines():
        if line.startswith("TracerPid:"):
            return int(line.split()[1])
    return 0


def wait_for(condition, timeout, what, interval=0.2):
    """Polls `condition` (a real state, never a guess) until it is true and
    returns its value; AssertionError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.0f s waiting for %s" % (timeout, what))
        time.sleep(interval)


def host_pid(inner_pid, under):
    """The host pid of the descendant of `under` whose pid in its innermost
    pid namespace is `inner_pid` (a marker printed inside a container names
    that one); AssertionError when there is none."""
    for p in descendants(under):
        nspids = ns_pids(p)
        if len(nspids) > 1 and nspids[-1] == inner_pid:
            return p
    raise AssertionError("no descendant of %d is pid %d in a child pid namespace:\n%s"
                         % (under, inner_pid, describe([under] + descendants(under))))


# ---- mounts ------------------------------------------------------------------

MNT_DETACH = 2


def umount_lazy(path):
    """umount2(path, MNT_DETACH): detaches a mount even while its server is
    stuck or gone."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.umount2(path.encode(), MNT_DETACH)


def mounted(path):
    """Whether something is mounted on `path` (this process's mountinfo)."""
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f if len(line.split()) > 4)
