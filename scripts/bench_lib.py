"""Helpers shared by the benchmarks' Python drivers (scripts/bench_live.sh,
scripts/bench_daemon.sh, scripts/bench_fleet.sh) and scripts/bench_snapshot.sh
(`bench_lib.py time-rss`, below): reading a process's CPU time and memory from
/proc, waiting for a tracer to attach, the workloads' result lines, medians and
table cells, the CPU pinning convention, a private tracefs for tools that
need one; the processes a driver starts (killed at the end whatever happens),
a `hangtrace daemon` run with its /metrics, the PASS/FAIL lines, and a perf
profile of a process. The drivers import it with the scripts directory on
sys.path."""
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
import urllib.request

TICK = os.sysconf("SC_CLK_TCK")


def have(tool):
    return shutil.which(tool) is not None


def proc_cpu_s(pid):
    """utime+stime of pid (all its threads, not its children), in s; None if gone."""
    try:
        stat = open("/proc/%d/stat" % pid).read()
    except OSError:
        return None
    f = stat[stat.rfind(")") + 2:].split()
    return (int(f[11]) + int(f[12])) / TICK      # utime, stime: this process only


def proc_cpu_ns(pid):
    """CPU time of pid's live threads from /proc/PID/task/*/schedstat (ns, not
    ticks: fine enough for windows under a second); None if gone."""
    total, seen = 0, False
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return None
    for tid in tids:
        try:
            total += int(open("/proc/%d/task/%s/schedstat" % (pid, tid)).read().split()[0])
            seen = True
        except (OSError, ValueError, IndexError):
            pass
    return total if seen else None


def proc_status_kib(pid, field):
    """A kB field of /proc/PID/status (VmHWM, VmRSS); 0 if gone."""
    try:
        for line in open("/proc/%d/status" % pid):
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def proc_hwm_kib(pid):
    return proc_status_kib(pid, "VmHWM")


def bpf_links(pid, kinds=("bpf_link",)):
    """How many of pid's fds are anon inodes of these kinds (bpf_link;
    perf_event: a tracepoint or uprobe attached the old way, or a perf buffer)."""
    n = 0
    try:
        for fd in os.listdir("/proc/%d/fd" % pid):
            try:
                target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
            except OSError:
                continue
            if any(k in target for k in kinds):
                n += 1
    except OSError:
        pass
    return n


def wait_links_settle(proc, timeout=60, settle=0.3, kinds=("bpf_link",)):
    """Waits until the tracer `proc` (a Popen) holds BPF links (fds of these
    kinds) and their count stopped growing for `settle` s: it is attached.
    Returns the count (<= 0: it never attached or exited)."""
    deadline = time.monotonic() + timeout
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline and proc.poll() is None:
        k = bpf_links(proc.pid, kinds)
        if k != last:
            last, since = k, time.monotonic()
        elif k > 0 and time.monotonic() - since > settle:
            break
        time.sleep(0.02)
    return last


def prog_stats(pid):
    """{prog_id: (run_cnt, run_time_ns)} of pid's BPF program fds."""
    out = {}
    try:
        fds = os.listdir("/proc/%d/fdinfo" % pid)
    except OSError:
        return out
    for fd in fds:
        try:
            info = dict(l.split(":\t", 1) for l in open("/proc/%d/fdinfo/%s" % (pid, fd)).read().splitlines()
                        if ":\t" in l)
        except (OSError, ValueError):
            continue
        if "prog_id" in info and "run_cnt" in info:
            out[int(info["prog_id"])] = (int(info["run_cnt"]), int(info["run_time_ns"]))
    return out


PROG_NAMES = {}


def name_progs(ids):
    if all(i in PROG_NAMES for i in ids):
        return
    try:
        for p in json.loads(subprocess.run(["bpftool", "prog", "show", "-j"], capture_output=True,
                                           text=True, timeout=30).stdout):
            PROG_NAMES[p["id"]] = p.get("name", "?")
    except (OSError, ValueError, subprocess.TimeoutExpired):
        pass


def watch_until_exit(pid, timeout, sample=None):
    """Samples VmHWM (and calls sample(pid) if given) every 20 ms until pid
    exits; returns (peak KiB, cpu s, wall s of the process) read while it is
    a zombie (exited, not reaped)."""
    t0 = time.monotonic()
    hwm = 0
    while True:
        res = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        if res is not None:
            break
        hwm = max(hwm, proc_hwm_kib(pid))
        if sample is not None:
            sample(pid)
        if time.monotonic() - t0 > timeout:
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)
    return hwm, proc_cpu_s(pid), time.monotonic() - t0


def make_gate(path):
    """A FIFO the workloads' --gate reads one byte from before their loop."""
    if os.path.exists(path):
        os.unlink(path)
    os.mkfifo(path)
    return path


def open_gate(path):
    with open(path, "w") as g:
        g.write("g")


def read_result(path):
    """(iterations, loop ns) from a workload's --out file, or None."""
    try:
        text = open(path).read()
    except OSError:
        return None
    m = re.search(r"iters=(\d+) loop_ns=(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(v, spec, none="-"):
    return none if v is None else format(v, spec)


def pins():
    """(workload CPU or None, taskset argv prefix for tracers or []): the
    workload on the last CPU, every tracer on the others (PIN=0: neither)."""
    pin_cpu = (os.cpu_count() - 1) if os.environ.get("PIN", "1") != "0" and have("taskset") else None
    tracer_pin = ([shutil.which("taskset"), "-c", "0" if pin_cpu == 1 else "0-%d" % (pin_cpu - 1)]
                  if pin_cpu is not None and pin_cpu > 0 else [])
    return pin_cpu, tracer_pin


def tracefs_mounted():
    return any(l.split()[2] == "tracefs" for l in open("/proc/mounts") if len(l.split()) > 2)


def tracefs_ns():
    """argv prefix that gives a tool (perf trace, bpftrace: they read
    tracepoint formats from tracefs) a tracefs in a private mount namespace
    when the machine has none mounted; [] when it has (nothing leaks)."""
    return [] if tracefs_mounted() else [
        "unshare", "-m", "--propagation", "private", "sh", "-c",
        'mount -t tracefs none /sys/kernel/tracing && exec "$@"', "tracefs-ns"]


def time_rss(argv, runs):
    """Runs argv `runs` times, one after the other, stdout and stderr to
    /dev/null; [(wall s, CPU s, max RSS KiB)] of each run. The peak resident
    set is ru_maxrss as GNU time reports it (%M): a child forked from this
    Python would inherit Python's ~15 MiB in ru_maxrss, one forked from time
    ~2 MiB. Wall time is measured here, around the time process."""
    out = []
    with tempfile.NamedTemporaryFile("r", prefix="bench-time-") as report:
        for _ in range(runs):
            t0 = time.perf_counter()
            subprocess.run(["/usr/bin/time", "-f", "%M %U %S", "-o", report.name] + argv,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wall = time.perf_counter() - t0
            report.seek(0)
            fields = report.read().split()[-3:]  # after "Command exited with non-zero status N"
            out.append((wall, float(fields[1]) + float(fields[2]), int(fields[0])))
    return out


# ---- the processes a driver starts, and a hangtrace daemon ------------------------------

STARTED = []   # every process spawn() started: kill_started() at the end whatever happens


def spawn(argv, own_group=False, **kw):
    """Popen with stdin and stdout to /dev/null unless given; own_group: in a
    session of its own, ended as a group (forked workers go with it)."""
    kw.setdefault("stdin", subprocess.DEVNULL)
    kw.setdefault("stdout", subprocess.DEVNULL)
    if own_group:
        kw["start_new_session"] = True
    p = subprocess.Popen(argv, **kw)
    p.own_group = own_group
    STARTED.append(p)
    return p


def end(p, sig=signal.SIGTERM, timeout=15):
    """Sends sig (to its group if own_group), waits up to timeout, then kills."""
    if p.poll() is None:
        try:
            if getattr(p, "own_group", False):
                os.killpg(p.pid, sig)
            else:
                p.send_signal(sig)
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
        except ProcessLookupError:
            pass
    return p.wait()


def kill_started():
    for p in STARTED:
        if p.poll() is None:
            try:
                if getattr(p, "own_group", False):
                    os.killpg(p.pid, signal.SIGKILL)
                else:
                    p.kill()
            except OSError:
                pass
            p.wait()


VERDICTS = []   # the PASS/FAIL lines, repeated at the end


def verdict(ok, text):
    line = "[%s] %s" % ("PASS" if ok else "FAIL", text)
    VERDICTS.append(line)
    print(line, flush=True)


def ecma_literal(text):
    """A regex (ECMAScript, as the daemon compiles --match) that matches text."""
    return re.sub(r"([\\^$.|?*+()\[\]{}])", r"\\\1", text)


class HangtraceFailed(Exception):
    pass


def parse_metrics(text):
    """{'name' or 'name{labels}': value} of a /metrics text, buckets left out."""
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or "_bucket{" in line:
            continue
        key, _, value = line.rpartition(" ")
        try:
            out[key] = float(value)
        except ValueError:
            pass
    return out


def series_by_family(text):
    """(series in all, {family: series}) of a /metrics text: every line that
    is not a comment is one series; a histogram's _bucket, _sum and _count
    lines count under its family (named by its # TYPE line)."""
    families, counts, total = [], {}, 0
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            families.append(line.split()[2])
            continue
        if not line.strip() or line.startswith("#"):
            continue
        total += 1
        name = re.match(r"[A-Za-z_:][A-Za-z0-9_:]*", line).group(0)
        fam = next((f for f in families if name == f or (name.startswith(f + "_") and
                                                          name[len(f):] in ("_bucket", "_sum", "_count"))),
                   name)
        counts[fam] = counts.get(fam, 0) + 1
    return total, counts


class HangtraceDaemon:
    """One `hangtrace daemon`, its stderr in tmp/NAME-N.err, metrics on a free
    port of 127.0.0.1 (--metrics 127.0.0.1:0, the port read from its ready line)."""
    n = 0

    def __init__(self, ht, tmp, patterns, extra=(), pin=(), bundle_dir=None, name="daemon"):
        HangtraceDaemon.n += 1
        self.err_path = os.path.join(tmp, "%s-%d.err" % (name, HangtraceDaemon.n))
        self.bundle_dir = bundle_dir or os.path.join(tmp, "bundles")
        argv = list(pin) + [ht, "daemon", "--bundle-dir", self.bundle_dir, "--metrics", "127.0.0.1:0"] + list(extra)
        for p in patterns:
            argv += ["--match", p]
        self.proc = spawn(argv, stderr=open(self.err_path, "w"))
        self.pid = self.proc.pid
        deadline = time.monotonic() + 60
        while True:
            m = re.search(r"metrics on http://(\S+)/metrics", self.log())
            if m:
                self.address = m.group(1)
                self.url = "http://%s/metrics" % self.address
                break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise HangtraceFailed("hangtrace daemon did not start (%s): %s" % (
                    "exit %s" % self.proc.returncode if self.proc.poll() is not None else "no ready line in 60 s",
                    self.tail()))
            time.sleep(0.02)

    def log(self):
        try:
            return open(self.err_path).read()
        except OSError:
            return ""

    def tail(self):
        return self.log()[-400:].strip().replace("\n", " | ")

    def wait_tracking(self, roots, timeout=30):
        """Until the daemon said it tracks every pid of roots as a job."""
        deadline = time.monotonic() + timeout
        want = {"tracking job %d " % r for r in roots}
        while True:
            text = self.log()
            if all(w in text for w in want):
                return
            if self.proc.poll() is not None:
                raise HangtraceFailed("hangtrace daemon exited (%s): %s" % (self.proc.returncode, self.tail()))
            if time.monotonic() > deadline:
                raise HangtraceFailed("hangtrace daemon did not track %s within %.0f s: %s" % (
                    sorted(roots), timeout, self.tail()))
            time.sleep(0.02)

    def metrics_text(self):
        try:
            return urllib.request.urlopen(self.url, timeout=10).read().decode()
        except OSError as e:
            raise HangtraceFailed("hangtrace daemon's %s: %s" % (self.url, e))

    def metrics(self):
        return parse_metrics(self.metrics_text())

    def sample(self):
        """(monotonic s, schedstat ns, stat ticks s) now."""
        return time.monotonic(), proc_cpu_ns(self.pid), proc_cpu_s(self.pid)

    def stop(self):
        if self.proc.poll() is not None:
            raise HangtraceFailed("hangtrace daemon exited early (%s): %s" % (self.proc.returncode, self.tail()))
        rc = end(self.proc)
        if rc != 0:
            raise HangtraceFailed("hangtrace daemon exited %d on SIGTERM: %s" % (rc, self.tail()))


def cpu_pct(a, b):
    """% of one core between two HangtraceDaemon.sample()s: (schedstat, stat ticks)."""
    wall = b[0] - a[0]
    ns = (b[1] - a[1]) / 1e9 * 100 / wall if a[1] is not None and b[1] is not None else None
    ticks = (b[2] - a[2]) * 100 / wall if a[2] is not None and b[2] is not None else None
    return ns, ticks


def metric_cpu_pct(ma, mb, wall):
    k = "hangtrace_daemon_cpu_seconds_total"
    return (mb[k] - ma[k]) * 100 / wall if k in ma and k in mb else None


# ---- a perf profile of a process --------------------------------------------------------

def start_profile(pid, seconds, data):
    """perf record -g of pid for `seconds`, in the background, into `data`;
    None (and a line) without perf."""
    if not have("perf"):
        print("  profile: skipped: perf not installed (apt-get install linux-perf)")
        return None
    p = spawn(["perf", "record", "-q", "-F", "997", "-g", "--call-graph", "dwarf,16384", "-o", data,
               "-p", str(pid), "--", "sleep", str(seconds)], stderr=subprocess.DEVNULL)
    p.data, p.seconds = data, seconds
    return p


def report_profile(p, top=15):
    """Waits for start_profile's perf, prints the top of its report: self time
    by symbol, then inclusive, hangtrace's own functions only (main, _start,
    the syscall entry are 80-100 % and say nothing)."""
    if p is None:
        return
    if p.wait() != 0:
        print("  profile: perf record failed (exit %d)" % p.returncode)
        return
    for title, args, keep in (("self time", ["--no-children", "--sort", "dso,symbol"], lambda l: True),
                              ("inclusive, hangtrace's functions", ["--children", "--sort", "symbol"],
                               lambda l: "hangtrace::" in l and "run_daemon" not in l and "Daemon::run" not in l)):
        rep = subprocess.run(["perf", "report", "-i", p.data, "--stdio", "-g", "none", "--percent-limit", "1"]
                             + args, capture_output=True, text=True).stdout
        lines = [re.sub(r"\s{2,}", "  ", l).strip() for l in rep.splitlines() if l.strip() and not l.startswith("#")]
        lines = [re.sub(r"(\s+-)+$", "", l) for l in lines if keep(l)][:top]
        print("  profile (%s; %.0f s, perf record -F 997 -g --call-graph dwarf):" % (title, p.seconds))
        for l in lines:
            print("    " + l[:160])
    print("  (perf data: %s; KEEP=1 keeps it)" % p.data)


def main(argv):
    """bench_lib.py time-rss RUNS CMD...: prints "median_s min_s max_s
    cpu_median_s max_rss_kib" of RUNS runs of CMD."""
    if len(argv) < 3 or argv[0] != "time-rss":
        raise SystemExit("usage: bench_lib.py time-rss RUNS CMD...")
    runs = time_rss(argv[2:], int(argv[1]))
    walls = [r[0] for r in runs]
    print("%.6f %.6f %.6f %.6f %d" % (statistics.median(walls), min(walls), max(walls),
                                      statistics.median(r[1] for r in runs), max(r[2] for r in runs)))


if __name__ == "__main__":
    import sys
    main(sys.argv[1:])
