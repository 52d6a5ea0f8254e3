"""Shared helpers for the PyTorch scenario tests.

A scenario starts a real workload (tests/scenarios/workloads/*.py) in its own
session, reads its stdout until a marker line ("READY main=1 workers=2,3"),
waits -- by polling /proc, never by guessing with sleeps -- until the given
processes really sleep inside a syscall, runs `hangtrace --pid P --json -`,
and parses the report. Every process it started, and every descendant of
those, is killed when the test ends.

Run as root on a kernel with BTF, with /usr/bin/python3 and torch; otherwise
the tests skip with the reason.
"""

import atexit
import errno
import importlib
import json
import os
import platform
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = os.path.join(HERE, "workloads")
REPO = os.path.dirname(os.path.dirname(HERE))
PYTHON = "/usr/bin/python3"   # the system Python that has torch
TIME = "/usr/bin/time"        # GNU time (Debian's `time`): a command's peak RSS

sys.path.insert(0, HERE)
from proc_support import (  # noqa: F401  (re-exported)
    connections_accepted_on,
    process_age_s,
    free_port,
    remove_cgroup,
    _read,
    thread_states,
    describe,
    _signature,
    wait_until_blocked,
    descendants,
    kill_pids,
    parse_marker,
    _state,
    proc_state,
    wait_for_child,
    ns_pids,
    host_pid,
    tracer_pid,
    wait_for,
    umount_lazy,
    mounted)



def _syscall_numbers():
    """{name: number} of the one syscall table, include/hangtrace/arch/<arch>/syscalls.h."""
    path = os.path.join(REPO, "include", "hangtrace", "arch", platform.machine(), "syscalls.h")
    with open(path) as f:
        return {m.group(1): int(m.group(2)) for m in re.finditer(r"^\s*X\((\w+),\s*(-?\d+),", f.read(), re.M)}


# The syscalls the scenarios wait for (clock_nanosleep: time.sleep()).
SYS_READ, SYS_POLL, SYS_ACCEPT, SYS_ACCEPT4, SYS_RECVFROM, SYS_FUTEX, SYS_CLOCK_NANOSLEEP = (
    _syscall_numbers()[name] for name in ("read", "poll", "accept", "accept4", "recvfrom", "futex", "clock_nanosleep"))


def hangtrace_bin():
    return os.environ.get("HANGTRACE_BIN") or os.path.join(REPO, "build", "hangtrace")


def workload(name):
    return os.path.join(WORKLOADS, name)


def repro_path(name):
    """The reproducer built from tests/integration/repro/<name>.cpp."""
    built = os.environ.get("HANGTRACE_REPRO_DIR") or os.path.join(REPO, "build", "tests", "repro")
    return os.path.join(built, name)


def _skip_reason():
    if os.geteuid() != 0:
        return "needs root (CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE)"
    if not os.path.exists("/sys/kernel/btf/vmlinux"):
        return "needs kernel BTF at /sys/kernel/btf/vmlinux"
    if os.path.realpath(sys.executable) != os.path.realpath(PYTHON) and not os.path.exists(PYTHON):
        return "needs %s" % PYTHON
    try:
        importlib.import_module("torch")   # the workloads need it
    except Exception as e:  # ImportError, or a broken install
        return "needs torch in %s: %s" % (sys.executable, e)
    if not os.access(hangtrace_bin(), os.X_OK):
        return "hangtrace binary not found at %s (set HANGTRACE_BIN)" % hangtrace_bin()
    return ""


SKIP_REASON = _skip_reason()
requires_bpf_and_torch = unittest.skipUnless(not SKIP_REASON, SKIP_REASON)

MEMCG_V1 = "/sys/fs/cgroup/memory"


def _memcg_skip_reason():
    if not os.path.exists(os.path.join(MEMCG_V1, "memory.limit_in_bytes")):
        return "needs the cgroup v1 memory controller at %s" % MEMCG_V1
    if not os.access(MEMCG_V1, os.W_OK):
        return "needs write access to %s" % MEMCG_V1
    return ""


MEMCG_SKIP_REASON = _memcg_skip_reason()
requires_memcg_v1 = unittest.skipUnless(not MEMCG_SKIP_REASON, MEMCG_SKIP_REASON)


class MemoryCgroup:
    """A fresh cgroup v1 memory group `name` limited to `limit` bytes (and
    memory+swap where swap is accounted), removed with whatever is left in it
    when `test` is cleaned up (after its tearDown has killed its job).
    `enter` is the argv prefix that moves a command into it, then execs it."""

    def __init__(self, test, name, limit):
        self.path = os.path.join(MEMCG_V1, name)
        os.mkdir(self.path)
        test.addCleanup(remove_cgroup, self.path)
        self.write("memory.limit_in_bytes", limit)
        try:
            self.write("memory.memsw.limit_in_bytes", limit)
        except OSError:
            pass   # no swap accounting here
        self.enter = ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', self.path]

    def write(self, name, value):
        with open(os.path.join(self.path, name), "w") as f:
            f.write(str(value))

    def oom_kills(self):
        """How many processes its OOM killer killed (memory.oom_control)."""
        with open(os.path.join(self.path, "memory.oom_control")) as f:
            return int(dict(l.split() for l in f.read().splitlines()).get("oom_kill", 0))


# ---- a workload ----------------------------------------------------------------

def under_shell(argv, env=None):
    """(argv, env) that run `argv` as the child of a bash that waits for it,
    the way a job started from a terminal runs. The command travels in the
    environment, not in bash's own command line, so `pgrep -f` on the job's
    arguments finds the job's processes and not the shell."""
    env = dict(env or {})
    env["HT_SHELL_ARGV"] = "\n".join(str(a) for a in argv)
    return ["bash", "-c", "IFS=$'\\n'; set -f; $HT_SHELL_ARGV & wait $!"], env


class Workload:
    """A process started in its own session whose stdout is read line by line
    by a background thread; stderr goes to a temporary file (shown in failures)."""

    def __init__(self, argv, env=None, cwd=None, stdin=None):
        self.argv = list(argv)
        self._stderr = tempfile.TemporaryFile(mode="w+b")
        full_env = dict(os.environ)
        full_env.setdefault("PYTHONUNBUFFERED", "1")
        full_env["PYTHONDONTWRITEBYTECODE"] = "1"
        if env:
            full_env.update(env)
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=self._stderr,
                                     stdin=subprocess.DEVNULL if stdin is None else stdin,
                                     start_new_session=True,
                                     env=full_env, cwd=cwd or WORKLOADS)
        self.pid = self.proc.pid
        self.also_kill = []               # pids outside the session to kill too
        self.lines = []                   # every stdout line so far
        self._queue = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        try:
            for raw in self.proc.stdout:
                line = raw.decode("utf-8", "replace").rstrip("\n")
                self.lines.append(line)
                self._queue.put(line)
        except (ValueError, OSError):
            pass  # kill() closed the pipe under the read (CPython raises ValueError there)
        self._queue.put(None)             # EOF

    def wait_for_line(self, prefix, timeout=120.0, anywhere=False):
        """The next stdout line that starts with `prefix` (with `anywhere`:
        that holds it, from `prefix` on -- processes sharing stdout may write
        a line's start before another's marker, as pdb's "(Pdb) " prompt
        does); AssertionError on EOF or timeout (with the workload's stderr)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("no %r line from %s within %.0fs\n%s"
                                     % (prefix, self.argv, timeout, self.stderr_tail()))
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                self._queue.put(None)
                raise AssertionError("%s ended (rc=%s) before printing %r\n%s"
                                     % (self.argv, self.proc.poll(), prefix, self.stderr_tail()))
            if line.startswith(prefix):
                return line
            if anywhere and prefix in line:
                return line[line.index(prefix):]

    def stderr_tail(self, n=4000):
        try:
            self._stderr.seek(0)
            data = self._stderr.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""
        return "--- stderr of %s ---\n%s" % (self.argv[-1], data[-n:])

    def alive(self):
        return self.proc.poll() is None

    def kill(self):
        """SIGKILL the whole session: the process group, and every descendant
        (a DataLoader worker blocked in a futex does not notice its parent
        died, and a double-forked helper may have left the group)."""
        if self.proc.poll() is None:
            victims = [self.pid] + descendants(self.pid)
        else:
            victims = []
        for p in self.also_kill:          # e.g. a job hangtrace left running
            if os.path.exists("/proc/%d" % p):
                victims += [p] + descendants(p)
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except OSError:
            pass
        kill_pids(victims)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        # Orphans of the group are reparented to init; wait until they are gone.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(os.path.exists("/proc/%d" % p) and
                                                  _state(p) not in ("Z", "X", None)
                                                  for p in victims):
            time.sleep(0.01)
        # Closing the pipe under a read in progress frees its buffer under the
        # reader (CPython: ValueError, or worse): its last writer is dead, so
        # the reader sees EOF and ends; a writer that escaped keeps it open.
        if self.proc.stdout:
            self._reader.join(timeout=5)
            if not self._reader.is_alive():
                self.proc.stdout.close()
        self._stderr.close()


# ---- hangtrace -------------------------------------------------------------------

class Report:
    def __init__(self, argv, completed):
        self.argv = argv
        self.returncode = completed.returncode
        self.stdout = completed.stdout
        self.stderr = completed.stderr
        try:
            self.json = json.loads(completed.stdout)
            self.parse_error = None
        except ValueError as e:
            self.json = None
            self.parse_error = str(e)

    @property
    def findings(self):
        if isinstance(self.json, dict):
            return self.json.get("findings") or []
        return []

    def of_kind(self, kind):
        return [f for f in self.findings if f.get("kind") == kind]

    def process(self, pid):
        for p in (self.json or {}).get("processes") or []:
            if p.get("pid") == pid:
                return p
        return None

    @property
    def reports(self):
        """One Report per job: `--json -` prints one report object for one
        job, an array of them for several."""
        if isinstance(self.json, list):
            return [self._view(r) for r in self.json]
        return [self] if isinstance(self.json, dict) else []

    def of_job(self, root_pid):
        """The report of the job whose root is root_pid (job.root_pid), or None."""
        for r in self.reports:
            if ((r.json or {}).get("job") or {}).get("root_pid") == root_pid:
                return r
        return None

    def _view(self, obj):
        view = object.__new__(Report)
        view.__dict__.update(self.__dict__)
        view.json, view._whole = obj, self
        return view

    def stderr_lines_naming(self, word):
        """The stderr lines in which `word` (a pid, an argument) stands alone."""
        pattern = re.compile(r"(?<![\w-])%s(?![\w-])" % re.escape(str(word)))
        return [l for l in self.stderr.splitlines() if pattern.search(l)]

    # A report larger than this is shown as hangtrace printed it, cut here.
    DUMP_LIMIT = 1 << 20

    def dump(self):
        """The whole run, for an assertion's message. unittest evaluates
        messages whether or not the assertion fails, dozens per report: made
        once, and a huge report (all the jobs of a busy host) is not
        re-encoded."""
        whole = getattr(self, "_whole", self)
        if getattr(whole, "_dump", None) is None:
            if whole.json is None:
                body = "(not JSON: %s)\n%s" % (whole.parse_error, whole.stdout[:self.DUMP_LIMIT])
            elif len(whole.stdout) > self.DUMP_LIMIT:
                body = "%s\n... (%d bytes in all)" % (whole.stdout[:self.DUMP_LIMIT], len(whole.stdout))
            else:
                body = json.dumps(whole.json, indent=2)
            whole._dump = "%s\nexit code %d\n--- stderr ---\n%s\n--- report ---\n%s" % (
                " ".join(whole.argv), whole.returncode, whole.stderr, body)
        return whole._dump


def bpftool_ids(kind, tries=20):
    """The ids of every BPF `kind` ("prog", "link") loaded now. bpftool
    walks the ids and then opens each object: one that another test
    (ctest -j) closes between the two makes the walk fail (exit 255), so a
    failed walk is taken again; only one that keeps failing is an error."""
    for attempt in range(tries):
        done = subprocess.run(["bpftool", "-j", kind, "show"], capture_output=True, text=True)
        if done.returncode == 0:
            return {p["id"] for p in json.loads(done.stdout or "[]")}
        time.sleep(0.05 * (attempt + 1))
    raise AssertionError("bpftool %s show failed %d times: %s" % (kind, tries, done.stderr.strip()))


def run_hangtrace(pid, *extra, timeout=180):
    """Runs hangtrace on pid. With HANGTRACE_REPORT_DIR set, also keeps each
    report there as <test id>-<pid>-<n>.json (for looking at passing runs)."""
    argv = [hangtrace_bin(), "--pid", str(pid), "--json", "-"] + [str(e) for e in extra]
    completed = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               stdin=subprocess.DEVNULL, timeout=timeout, text=True)
    _keep_report(pid, completed.stdout)
    return Report(argv, completed)


def run_hangtrace_args(args, timeout=180):
    """`hangtrace ARGS` as given (several pids, no pid, --cgroup ...)."""
    argv = [hangtrace_bin()] + [str(a) for a in args]
    completed = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               stdin=subprocess.DEVNULL, timeout=timeout, text=True)
    _keep_report(0, completed.stdout)
    return Report(argv, completed)

def run_hangtrace_measured(args, timeout=180):
    """`hangtrace ARGS`, measured: the Report also has wall_s, max_rss_kib
    (hangtrace's own peak RSS), raw_stdout and raw_stderr (bytes, as a
    terminal would get them) and timed_out (killed after `timeout` s, its
    output kept). The RSS comes from /usr/bin/time (None without it): wait4's would count
    this test's RSS too (a vfork()ed child's high-water mark is its parent's
    until it execs)."""
    argv = [hangtrace_bin()] + [str(a) for a in args]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile(mode="r", prefix="hangtrace-time-") as measured:
        start = time.monotonic()
        timed = [TIME, "-f", "rss_kib=%M", "-o", measured.name] if os.access(TIME, os.X_OK) else []
        proc = subprocess.Popen(timed + argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            proc.wait(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        wall_s = time.monotonic() - start
        out.seek(0)
        err.seek(0)
        raw_stdout, raw_stderr = out.read(), err.read()
        timing = measured.read()
    rc = proc.returncode
    signalled = re.search(r"Command terminated by signal (\d+)", timing)
    if signalled:
        rc = -int(signalled.group(1))
    rss = re.search(r"rss_kib=(\d+)", timing)
    _keep_report(proc.pid, raw_stdout.decode("utf-8", "replace"))
    report = Report(argv, _Completed(rc, raw_stdout.decode("utf-8", "replace"), raw_stderr.decode("utf-8", "replace")))
    report.raw_stdout, report.raw_stderr = raw_stdout, raw_stderr
    report.wall_s, report.timed_out = wall_s, timed_out
    report.max_rss_kib = int(rss.group(1)) if rss else None
    return report


# What a terminal acts on: C0 controls but newline, DEL, and C1 controls
# (U+0080-U+009F, as UTF-8).
TERMINAL_CONTROLS = re.compile(rb"[\x00-\x09\x0b-\x1f\x7f]|\xc2[\x80-\x9f]")


def terminal_unsafe(raw):
    """Why `raw` (bytes meant for a terminal) is unsafe to print: its first
    control character or invalid UTF-8, with context; "" when it is safe."""
    m = TERMINAL_CONTROLS.search(raw)
    if m:
        return "control character %r at byte %d: %r" % (m.group(), m.start(), raw[max(0, m.start() - 60):m.end() + 20])
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return "invalid UTF-8 at byte %d: %r" % (e.start, raw[max(0, e.start - 60):e.end + 20])
    return ""



_path_dir = None


def _hangtrace_path_dir():
    """A directory whose `hangtrace` is the binary under test."""
    global _path_dir
    if _path_dir is None:
        binary = os.path.abspath(hangtrace_bin())
        if os.path.basename(binary) == "hangtrace":
            _path_dir = os.path.dirname(binary)
        else:
            _path_dir = tempfile.mkdtemp(prefix="hangtrace-bin-")
            os.symlink(binary, os.path.join(_path_dir, "hangtrace"))
            atexit.register(shutil.rmtree, _path_dir, True)
    return _path_dir


def run_hangtrace_line(line, *args, env=None, timeout=180):
    """`bash -c LINE bash ARGS...` with the binary under test first on PATH as
    `hangtrace`: the line a user types, expansions and all. The Report's
    `pid` is bash's pid -- hangtrace's own after `exec hangtrace ...`."""
    full_env = dict(os.environ, **(env or {}))
    full_env["PATH"] = _hangtrace_path_dir() + os.pathsep + full_env.get("PATH", "/usr/bin:/bin")
    argv = ["bash", "-c", line, "bash"] + [str(a) for a in args]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, env=full_env, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError("`%s` did not finish within %.0fs\n%s" % (line, timeout, err))
    _keep_report(proc.pid, out)
    report = Report(argv, _Completed(proc.returncode, out, err))
    report.pid = proc.pid
    return report


_kept = 0


def _keep_report(pid, text):
    keep = os.environ.get("HANGTRACE_REPORT_DIR")
    if not keep:
        return
    os.makedirs(keep, exist_ok=True)
    global _kept
    _kept += 1
    name = "%s-%d-%d.json" % (os.environ.get("HANGTRACE_REPORT_TAG", "report"), pid, _kept)
    with open(os.path.join(keep, name), "w") as f:
        f.write(text)


class _Completed:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


class LaunchedJob:
    """`hangtrace --json FILE [options] -- COMMAND...`: hangtrace starts the
    job and traces it from its first instruction. hangtrace's stdout is the
    job's stdout (the job inherits it) plus the text report, read line by line
    like a Workload's -- so the job's marker lines can be waited for; the JSON
    report goes to a file, where the job's output cannot interleave with it."""

    def __init__(self, command, options=(), env=None):
        self._dir = tempfile.mkdtemp(prefix="hangtrace-scn-")
        self.json_path = os.path.join(self._dir, "report.json")
        argv = ([hangtrace_bin(), "--json", self.json_path] + [str(o) for o in options] +
                ["--"] + [str(c) for c in command])
        self.workload = Workload(argv, env=env)
        self.argv = argv

    @property
    def lines(self):
        return self.workload.lines

    def wait_for_line(self, prefix, timeout=120.0):
        return self.workload.wait_for_line(prefix, timeout)

    def finish(self, timeout=180.0):
        """Waits for hangtrace to exit (it reports when the job exits, or after
        --hang-after) and returns its Report; AssertionError on timeout."""
        try:
            rc = self.workload.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError("hangtrace did not exit within %.0fs: %s\n%s\n--- stdout ---\n%s"
                                 % (timeout, " ".join(self.argv), self.workload.stderr_tail(),
                                    "\n".join(self.lines[-40:])))
        self.workload._reader.join(timeout=10)   # the rest of stdout
        text = _read(self.json_path) or ""
        _keep_report(self.workload.pid, text)
        stderr = self.workload.stderr_tail(8000)
        stderr += "\n--- stdout (job output, text report) ---\n" + "\n".join(self.lines[-60:])
        return Report(self.argv, _Completed(rc, text, stderr))

    def kill(self):
        self.workload.kill()
        try:
            os.unlink(self.json_path)
        except OSError:
            pass
        try:
            os.rmdir(self._dir)
        except OSError:
            pass


# On the command line of every Python workload ScenarioTestCase.start()
# starts (an -X option: the interpreter keeps it in sys._xoptions and
# otherwise ignores it), unique to this test process.
TEST_TAG = "hangtrace_test=%d" % os.getpid()


def own_match(script):
    """A --match pattern for workloads/<script> started by this test process:
    a daemon given it never picks up the same workload that a test running
    beside this one (ctest -j) started."""
    return r"-X %s -u \S*/%s\b" % (re.escape(TEST_TAG), re.escape(script))


class ScenarioTestCase(unittest.TestCase):
    """Starts workloads with self.start(...) and kills them (and their
    descendants) when the test ends, pass or fail."""

    maxDiff = None

    def setUp(self):
        self._workloads = []

    def tearDown(self):
        for w in reversed(self._workloads):
            w.kill()
        self._workloads = []

    def assertStalledNaming(self, report, words, releaser=None):
        """Exit 2 and a critical first finding with advice, whose summary and
        chain hold `words`; with `releaser`, that process is named among who
        could end the wait, and is in the report as a peer (outside the job)."""
        self.assertEqual(report.returncode, 2, report.dump())
        first = report.findings[0]
        self.assertEqual(first.get("severity"), "critical", report.dump())
        text = first.get("summary", "") + "\n" + chain_text(first)
        for w in words:
            self.assertIn(w, text, report.dump())
        self.assertTrue(first.get("advice"), report.dump())
        if releaser is not None:
            self.assertIn(releaser, first.get("pids", []) +
                          [r.get("pid") for r in (first.get("details") or {}).get("releasers", [])], report.dump())
            entry = report.process(releaser)
            self.assertIsNotNone(entry, report.dump())
            self.assertEqual(entry.get("role"), "peer", report.dump())
        return first

    def shared_dir(self, prefix):
        """A temporary directory every user may write to (a lock, socket or
        FIFO another uid's process opens there), removed when the test ends."""
        path = tempfile.mkdtemp(prefix=prefix)
        os.chmod(path, 0o777)
        self.addCleanup(shutil.rmtree, path, True)
        return path

    def start(self, script, *args, python=True, env=None, wrapper=None, shell=False):
        argv = ([PYTHON, "-X", TEST_TAG, "-u", workload(script)] if python else [workload(script)]) + \
            [str(a) for a in args]
        if wrapper:
            argv = list(wrapper) + argv
        return self.start_argv(argv, env=env, shell=shell)

    def start_argv(self, argv, env=None, shell=False, stdin=None):
        """Starts `argv` as a Workload -- with shell=True as the child of a
        bash (under_shell) -- killed with its descendants when the test ends.
        `stdin`: a file descriptor for its stdin (/dev/null when None)."""
        if shell:
            argv, env = under_shell(argv, env)
        w = Workload(argv, env=env, stdin=stdin)
        self._workloads.append(w)
        return w

    def launch(self, command, *options, env=None):
        """Starts `hangtrace --json FILE OPTIONS -- COMMAND`; killed (with the
        job) when the test ends."""
        job = LaunchedJob(command, options, env=env)
        self._workloads.append(job)
        return job

    def launched_report(self, job, timeout=180.0):
        report = job.finish(timeout)
        self.assertIsNotNone(report.json, report.dump())
        self.assertEqual(report.json.get("schema"), "hangtrace.report/1", report.dump())
        self.assertIsInstance(report.json.get("live"), dict, "no live block\n" + report.dump())
        return report

    def hangtrace(self, pid, *extra, **kw):
        report = run_hangtrace(pid, *extra, **kw)
        # Whatever the verdict, the output must be a well-formed report.
        self.assertIsNotNone(report.json, report.dump())
        self.assertEqual(report.json.get("schema"), "hangtrace.report/1", report.dump())
        self.assertEqual(report.json.get("target_pid"), pid, report.dump())
        return report

    def assertNoCrash(self, report):
        """hangtrace ended by itself, without a signal, an abort or a
        traceback, whatever it was given."""
        self.assertGreaterEqual(report.returncode, 0, report.dump())
        self.assertNotIn(report.returncode, (134, 136, 139), report.dump())
        for sign in ("terminate called", "Traceback", "Segmentation fault", "Aborted", "core dumped"):
            self.assertNotIn(sign, report.stderr, report.dump())

    def one_job(self, report):
        """The report of the one job `report` is about: one JSON object (not
        an array) with a job block; returns its "job"."""
        self.assertIsInstance(report.json, dict, "expected one report object\n" + report.dump())
        self.assertEqual(report.json.get("schema"), "hangtrace.report/1", report.dump())
        job = report.json.get("job")
        self.assertIsInstance(job, dict, "no job block\n" + report.dump())
        return job

    def assertGiven(self, report, job, pids):
        """job.given lists exactly `pids`; returns {pid: role}."""
        given = {g.get("pid"): g.get("role") for g in job.get("given") or []}
        self.assertEqual(sorted(given), sorted(pids), report.dump())
        for pid, role in given.items():
            self.assertIsInstance(role, str, report.dump())
        return given

    def assertRoleLine(self, report, pattern):
        """stderr has a line saying what a given pid is (`pattern`, a regex:
        "pid 8979 is a DataLoader worker of job 8974")."""
        found = [l for l in report.stderr.splitlines() if re.search(r"(?<!\d)%s(?!\d)" % pattern, l)]
        self.assertTrue(found, "no stderr line /%s/\n%s" % (pattern, report.dump()))

    def assertHang(self, report):
        self.assertEqual(report.returncode, 2, report.dump())
        self.assertEqual(report.json["verdict"]["status"], "hang", report.dump())

    def assertOrphanedLock(self, report, workers):
        """A hang whose orphaned-lock findings, certain and critical, cover
        every one of `workers` (fork_inherited_lock.py's locked copies)."""
        self.assertHang(report)
        orphaned = report.of_kind("orphaned-lock")
        self.assertTrue(orphaned, "no orphaned-lock finding\n" + report.dump())
        covered = set()
        for f in orphaned:
            self.assertEqual(f.get("confidence"), "certain", report.dump())
            self.assertEqual(f.get("severity"), "critical", report.dump())
            covered.update(f.get("pids") or [])
        self.assertTrue(set(workers) <= covered,
                        "orphaned-lock findings cover pids %s, not every worker %s\n%s"
                        % (sorted(covered), workers, report.dump()))

    def only_finding(self, report, kind):
        found = report.of_kind(kind)
        self.assertEqual(len(found), 1, "expected one %s finding\n%s" % (kind, report.dump()))
        return found[0]

    def assertPidsInclude(self, finding, pids, report):
        missing = set(pids) - set(finding.get("pids") or [])
        self.assertFalse(missing, "finding lacks pids %s\n%s" % (sorted(missing), report.dump()))

    def assertWorkerKilled(self, report, victim):
        """`victim` has one process-killed finding, critical and naming it;
        returns that finding's details."""
        killed = killed_findings(report, victim)
        self.assertEqual(len(killed), 1, "no process-killed finding for worker %d\n%s"
                         % (victim, report.dump()))
        f = killed[0]
        self.assertEqual(f.get("severity"), "critical", report.dump())
        self.assertIn(victim, f.get("pids") or [], report.dump())
        return f["details"]


class FuseMountMixin:
    """For a ScenarioTestCase: self.mnt, an empty directory in a temporary
    one for a FUSE daemon (a workload, self.start_fuse(...)) to mount on.
    However the test ends, the mount is lazily detached and the daemon killed
    before the other workloads, then the directory removed."""

    def setUp(self):
        super().setUp()
        self.server = None
        top = tempfile.mkdtemp(prefix="hangtrace-fuse-")
        self.mnt = os.path.join(top, "mnt")
        os.mkdir(self.mnt)
        # Cleanups run after tearDown has killed the workloads: unmount, then
        # remove the directory (the daemon is one of the workloads).
        self.addCleanup(shutil.rmtree, top, True)
        self.addCleanup(umount_lazy, self.mnt)

    def start_fuse(self, script, *args):
        """Starts workloads/<script> MNT ARGS; returns its MOUNTED marker."""
        self.server = self.start(script, self.mnt, *args)
        return parse_marker(self.server.wait_for_line("MOUNTED", timeout=60))

    def tearDown(self):
        # Detach the mount, then kill the daemon first: a request it has read
        # holds its waiter even against SIGKILL until the connection aborts,
        # which closing /dev/fuse does. Then the loader and its workers.
        if mounted(self.mnt):
            umount_lazy(self.mnt)
        if self.server is not None:
            self.server.kill()
        super().tearDown()


requires_fuse = unittest.skipUnless(os.path.exists("/dev/fuse") and os.geteuid() == 0, "needs /dev/fuse and root")


def chain_text(finding):
    """A finding's wait chain as lines "FROM EDGE TO", for assertIn."""
    return "\n".join("%s %s %s" % (s.get("from"), s.get("edge"), s.get("to")) for s in finding.get("chain", []))


def killed_findings(report, pid):
    """The process-killed findings of process `pid`."""
    return [f for f in report.of_kind("process-killed") if (f.get("details") or {}).get("pid") == pid]


# ---- torch.distributed ---------------------------------------------------------------


def start_gloo_ranks(steps=3):
    """The gloo workload with two ranks, once rank 0's main thread waits in
    all_reduce (a futex wait for gloo's worker) and rank 1's sleeps outside
    any collective. Main threads only: the TCPStore's threads poll with a
    timeout and keep waking. Returns (workload, marker)."""
    job = Workload([PYTHON, "-u", workload("gloo_allreduce_skip.py"), "--steps", str(steps)])
    try:
        marker = parse_marker(job.wait_for_line("READY", timeout=180))
        wait_until_blocked(marker["rank0"][0], main_syscalls=[SYS_FUTEX], all_threads=False, settle=1.0)
        wait_until_blocked(marker["rank1"][0], main_syscalls=[SYS_CLOCK_NANOSLEEP], all_threads=False, settle=1.0)
    except BaseException:
        job.kill()
        raise
    return job, marker


def _why_no_rank(job, logs):
    """The tail of each file under torchrun's --log_dir `logs`, and
    hangtrace's text report on the job, for a start that failed."""
    out = []
    for root, _, files in os.walk(logs or "/nonexistent"):
        for name in sorted(files):
            path = os.path.join(root, name)
            try:
                with open(path, "rb") as f:
                    f.seek(max(0, os.path.getsize(path) - 2048))
                    out.append("--- %s ---\n%s" % (path, f.read().decode("utf-8", "replace")))
            except OSError:
                pass
    if job.alive():
        done = subprocess.run([hangtrace_bin(), "--pid", str(job.pid)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True, timeout=120)
        out.append("--- hangtrace --pid %d (exit %d) ---\n%s" % (job.pid, done.returncode, done.stdout[-6000:]))
    return "\n".join(out)


def start_rank_job(test, shape, launcher, ranks=(0, 1), tag="", prefix=(), options=(), stdin=None):
    """workloads/ranks.py SHAPE under `launcher` ("plain": a per-rank
    launcher with Slurm's variables, "spawn": torch.multiprocessing.spawn,
    "torchrun"), as a Workload of `test` (a ScenarioTestCase), its command
    after `prefix` (a wrapper that execs it), ranks.py's `options` after the
    shape, the job's stdin `stdin` (a file descriptor; /dev/null when None).
    Waits for the RANK marker of each rank in `ranks` and until their main
    threads are parked over a second (oom: the test waits for the kill;
    healthy, long-collective: they move). Returns (job, {rank: marker})."""
    script = workload("ranks.py")
    port = str(free_port())
    if launcher == "torchrun":
        logs = tempfile.mkdtemp(prefix="hangtrace-ranks-")
        test.addCleanup(shutil.rmtree, logs, ignore_errors=True)
        # torch 1.13 on Python 3.11 needs --redirects/--tee (test_torchrun_job.py).
        argv = [PYTHON, "-u", "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
                "--master_addr", "127.0.0.1", "--master_port", port, "--redirects", "2", "--tee", "2",
                "--log_dir", logs, script, shape, "--launcher", "torchrun", "--port", "0"]
    else:
        argv = [PYTHON, "-u", script, shape, "--launcher", launcher, "--start", ",".join(map(str, ranks)),
                "--port", port]
    job = test.start_argv(list(prefix) + argv + list(options) + ([tag] if tag else []), stdin=stdin)
    markers = {}
    for _ in ranks:
        try:
            # The ranks share stdout: rank 0's pdb prompt ("(Pdb) ", no
            # newline) may come before rank 1's marker on the same line.
            m = parse_marker(job.wait_for_line("RANK ", timeout=180, anywhere=True))
        except AssertionError as e:
            # A torchrun job that started no rank in time (seen, rarely, in
            # CI under load): what each rank logged, and what hangtrace says.
            raise AssertionError("%s\n%s" % (e, _why_no_rank(job, logs if launcher == "torchrun" else None)))
        markers[m["rank"][0]] = m
    if shape == "never-joins":
        # Rank 0's store polls for its workers (no settled wait to see): the
        # marker is its own client's connection, accepted by the store.
        wait_for(lambda: connections_accepted_on(int(port)) >= 1, 120, "rank 0's store to accept its own client")
        # And older than the tests' --stall-after (1 s), with a margin.
        rank0 = markers[min(markers)]["pid"][0]
        wait_for(lambda: (process_age_s(rank0) or 0) >= 2.0, 30, "rank 0 to be 2 s old")
    elif shape not in ("healthy", "long-collective", "oom"):
        wait_until_blocked([m["pid"][0] for m in markers.values()], all_threads=False, settle=1.2)
    return job, markers


class GlooJobClass:
    """Mixin for a TestCase whose tests share one gloo job (start_gloo_ranks)
    and one temp dir: setUpClass starts them and hands the marker to the
    class's examine(marker); the job is killed and the dir removed after the
    last test, or at once when starting fails."""

    tmp_prefix = "hangtrace-"

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix=cls.tmp_prefix)
        cls.job = None
        try:
            cls.job, marker = start_gloo_ranks(steps=3)
            cls.examine(marker)
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        if cls.job:
            cls.job.kill()
        shutil.rmtree(cls.tmp, ignore_errors=True)


# ---- the daemon ---------------------------------------------------------------------

class Daemon(Workload):
    """`hangtrace daemon ARGS` in its own session (after `wrapper`, e.g. a
    host's namespaces: fleet_support.Host.wrap), its stderr (where it logs
    "ready", "tracking job", "bundle written") read line by line like a
    workload's stdout."""

    def __init__(self, bundle_dir, *args, metrics="127.0.0.1:0", wrapper=()):
        self.bundle_dir = bundle_dir
        argv = ["sh", "-c", 'exec "$@" 2>&1', "sh"] + list(wrapper) + [
            hangtrace_bin(), "daemon", "--bundle-dir", bundle_dir, "--metrics", metrics] + [str(a) for a in args]
        super().__init__(argv)
        ready = self.wait_for_line("hangtrace daemon: ready", timeout=120)
        self.metrics_address = None
        if "metrics on http://" in ready:
            self.metrics_address = ready.split("metrics on http://", 1)[1].split("/", 1)[0]

    def stderr_tail(self, n=4000):
        return "--- hangtrace daemon (rc=%s) ---\n%s" % (self.proc.poll(), "\n".join(self.lines)[-n:])

    def wait_for_job(self, pid, timeout=60.0):
        return self.wait_for_line("hangtrace daemon: tracking job %d " % pid, timeout=timeout)

    def wait_for_bundle(self, timeout=120.0):
        """The path of the next bundle the daemon writes."""
        line = self.wait_for_line("hangtrace daemon: bundle written: ", timeout=timeout)
        return line.split("bundle written: ", 1)[1].split(" (", 1)[0]

    def metrics(self):
        import urllib.request
        with urllib.request.urlopen("http://%s/metrics" % self.metrics_address, timeout=10) as r:
            return r.read().decode()


def read_bundle_meta(path):
    with open(os.path.join(path, "meta.json")) as f:
        return json.load(f)


BUNDLE_FILES = ["report.txt", "report.json", "snapshot.json", "stacks.folded", "flamegraph.svg",
                "trace.json", "recorder.json", "meta.json"]
# Only when the bundle's diagnosis has a stall profile (bundle.h: optional_bundle_file_names).
OPTIONAL_BUNDLE_FILES = ["wall.folded", "wall-flamegraph.svg"]


# ---- slow jobs (issue 18): the workload's ground truth vs the stall profile --------

PROFILE_SECONDS = 8
SHARE_TOLERANCE = 0.10   # ±10 points
SLOW_KINDS = ("data-starved", "io-bound", "lock-contention", "gpu-idle", "collective-skew")


class GroundTruth:
    """The JSON lines a slow-job workload writes (workloads/groundtruth.py):
    {"kind", "pid", "tid", "start_ns", "end_ns", ...} on CLOCK_MONOTONIC,
    the clock of hangtrace's profile window."""

    def __init__(self, path):
        self.path = path
        self._records = None

    def read(self):
        out = []
        try:
            with open(self.path) as f:
                for line in f:
                    if line.endswith("\n"):       # a record being written is not whole yet
                        out.append(json.loads(line))
        except FileNotFoundError:
            pass
        return out

    @property
    def records(self):
        return self._records if self._records is not None else self.read()

    def settle(self, end_ns, timeout=30.0):
        """Waits until every thread that logged near end_ns has logged an
        interval ending past it (the ones open at the window's end are
        closed), then keeps the records."""
        def closed():
            last = {}
            for r in self.read():
                last[r["tid"]] = max(last.get(r["tid"], 0), r["end_ns"])
            near = [t for t, e in last.items() if e > end_ns - 2_000_000_000]
            return bool(near) and all(last[t] >= end_ns for t in near)
        wait_for(closed, timeout, "the ground truth in %s past the window's end" % self.path, interval=0.05)
        self._records = self.read()

    def tids(self, kind, pids=None):
        """The threads that logged `kind` (of processes `pids` when given)."""
        return sorted({r["tid"] for r in self.records
                       if r["kind"] == kind and (pids is None or r["pid"] in pids)})

    def seconds(self, kind, window, tids=None, part="wall"):
        """Seconds of `kind` intervals inside window (start_ns, end_ns) of
        threads `tids` (all when None): their wall time, or the part of it
        on a CPU ("cpu"), waiting for one ("delay") or blocked, neither
        ("blocked"), prorated by the part of each interval inside the window."""
        lo, hi = window
        total = 0.0
        for r in self.records:
            if r["kind"] != kind or (tids is not None and r["tid"] not in tids):
                continue
            inside = min(r["end_ns"], hi) - max(r["start_ns"], lo)
            if inside <= 0:
                continue
            wall = r["end_ns"] - r["start_ns"]
            ns = {"wall": wall, "cpu": r["cpu_ns"], "delay": r["delay_ns"],
                  "blocked": max(0, wall - r["cpu_ns"] - r["delay_ns"])}[part]
            total += ns * inside / max(1, wall)
        return total / 1e9

    def share(self, kind, window, tids, part="wall"):
        """seconds() over the window times the number of threads `tids`."""
        return self.seconds(kind, window, set(tids), part) / ((window[1] - window[0]) / 1e9 * max(1, len(tids)))

    def calls_ms(self, kind, window, field):
        """`field` (ns) of the `kind` records that start inside window, in ms."""
        lo, hi = window
        return sorted(r[field] / 1e6 for r in self.records
                      if r["kind"] == kind and field in r and lo <= r["start_ns"] < hi)


def cause_share(entry, cause):
    """The share of `cause` in a profile thread or critical-path step (0 when absent)."""
    for c in entry.get("causes") or []:
        if c.get("cause") == cause:
            return c.get("share") or 0.0
    return 0.0


def cause_entry(entry, cause):
    for c in entry.get("causes") or []:
        if c.get("cause") == cause:
            return c
    return None


def path_steps(step):
    """Every step of a critical path, depth first."""
    yield step
    for child in step.get("next") or []:
        yield from path_steps(child)


class SlowJobTestCase(ScenarioTestCase):
    """A slow-job scenario: a workload writing its ground truth to a log in a
    temporary directory, `hangtrace --duration 8` on it, and assertions of
    the report's "profile" against the truth over the profile's window."""

    def setUp(self):
        super().setUp()
        self.tmp = tempfile.mkdtemp(prefix="hangtrace-slow-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.truth = GroundTruth(os.path.join(self.tmp, "truth.jsonl"))

    def start_job(self, script, *args, shell=False):
        """Starts workloads/<script> LOG ARGS (until READY); returns (workload, marker)."""
        job = self.start(script, self.truth.path, *args, shell=shell)
        return job, parse_marker(job.wait_for_line("READY", timeout=180))

    def profile_of(self, report):
        """`hangtrace --pid PID --duration 8 --json -` when given a pid, or
        the report already run. Returns (report, profile, window) with the
        ground truth settled past the window (start_ns, end_ns)."""
        if not isinstance(report, Report):
            report = self.hangtrace(report, "--duration", PROFILE_SECONDS, timeout=PROFILE_SECONDS + 180)
        self.assertNoCrash(report)
        self.assertIsInstance(report.json, dict, report.dump())
        profile = report.json.get("profile")
        self.assertIsInstance(profile, dict, "no profile\n" + self.slow_dump(report))
        start, end = profile.get("start_ns"), profile.get("end_ns")
        self.assertIsInstance(start, int, self.slow_dump(report))
        self.assertIsInstance(end, int, self.slow_dump(report))
        self.assertAlmostEqual((end - start) / 1e9, profile.get("window_s", 0), delta=0.05,
                               msg=self.slow_dump(report))
        self.assertAlmostEqual(profile["window_s"], PROFILE_SECONDS, delta=1.0, msg=self.slow_dump(report))
        self.truth.settle(end)
        return report, profile, (start, end)

    def pgrep_profile(self, tag, expected_pids):
        """The user's line, `hangtrace --pid $(pgrep -f TAG) --duration 8
        --json -`, once pgrep prints exactly `expected_pids`; returns
        profile_of's (report, profile, window)."""
        found = subprocess.run(["pgrep", "-f", tag], capture_output=True, text=True).stdout.split()
        self.assertEqual(sorted(int(p) for p in found), sorted(expected_pids), "precondition: pgrep -f")
        report = run_hangtrace_line('hangtrace --pid $(pgrep -f "$TAG") --duration %d --json -' % PROFILE_SECONDS,
                                    env={"TAG": tag}, timeout=PROFILE_SECONDS + 180)
        return self.profile_of(report)

    def slow_dump(self, report):
        """What a slow-job assertion shows: the command, exit code, stderr,
        verdict, findings and profile (not the whole report)."""
        whole = getattr(report, "_whole", report)
        if not isinstance(whole.json, dict):
            return report.dump()
        if getattr(whole, "_slow_dump", None) is None:  # made once: see Report.dump
            shown = {k: whole.json.get(k) for k in ("verdict", "findings", "profile")}
            whole._slow_dump = "%s\nexit code %d\n--- stderr ---\n%s\n--- verdict, findings, profile ---\n%s" % (
                " ".join(whole.argv), whole.returncode, whole.stderr[-4000:], json.dumps(shown, indent=1))
        return whole._slow_dump

    def main_thread(self, report, profile, main):
        """The profile's entry of main's main thread (tid == pid, role main)."""
        for t in profile.get("threads") or []:
            if t.get("tid") == main:
                self.assertEqual(t.get("pid"), main, self.slow_dump(report))
                self.assertEqual(t.get("role"), "main", self.slow_dump(report))
                self.assertCausesAddUp(report, t)
                return t
        self.fail("no profile thread for main %d\n%s" % (main, self.slow_dump(report)))

    def main_path(self, report, profile, main):
        """The critical path (depth 0) of main's main thread."""
        for step in profile.get("critical_path") or []:
            if main in (step.get("tids") or []) and step.get("depth") == 0:
                return step
        self.fail("no critical path of main %d\n%s" % (main, self.slow_dump(report)))

    def step_via(self, report, parent, via, depth=1):
        """The child step of `parent` reached `via` a cause (the one that
        ended most of the parent's waits)."""
        steps = [s for s in parent.get("next") or [] if s.get("via") == via]
        self.assertTrue(steps, "no step via %s under %s\n%s" % (via, parent.get("label"), self.slow_dump(report)))
        step = max(steps, key=lambda s: s.get("ended_s") or 0)
        self.assertEqual(step.get("depth"), depth, self.slow_dump(report))
        self.assertCausesAddUp(report, step)
        return step

    def assertCausesAddUp(self, report, entry):
        """Seconds add up to the entry's window and shares to 1."""
        causes = entry.get("causes") or []
        self.assertTrue(causes, "no causes in %s\n%s" % (entry.get("label") or entry.get("tid"), self.slow_dump(report)))
        window = entry.get("window_s") or 0
        self.assertAlmostEqual(sum(c.get("seconds", 0) for c in causes), window, delta=max(0.05, 0.01 * window),
                               msg=self.slow_dump(report))
        self.assertAlmostEqual(sum(c.get("share", 0) for c in causes), 1.0, delta=0.01, msg=self.slow_dump(report))
        seconds = [c.get("seconds", 0) for c in causes]
        self.assertEqual(seconds, sorted(seconds, reverse=True), "causes not biggest first\n" + self.slow_dump(report))

    def assertShare(self, what, measured, reported, report, tolerance=SHARE_TOLERANCE):
        # The figures, pass or fail, in the test's log (ctest -V, .ci/run's output).
        sys.stderr.write("share %s: measured %.3f, reported %.3f\n" % (what, measured, reported))
        self.assertLessEqual(abs(measured - reported), tolerance,
                             "%s: measured %.3f, reported %.3f (tolerance ±%.2f)\n%s"
                             % (what, measured, reported, tolerance, self.slow_dump(report)))

    def measured_step_share(self, kind, window, step, part="blocked"):
        """The ground truth's share of `kind` for a critical-path step: the
        logged seconds (`part` of them) of the step's threads over the
        step's time (the window times its threads; a step's threads that log
        nothing, such as a worker's queue feeder, count with their time)."""
        return self.truth.share(kind, window, step.get("tids") or step.get("pids") or [], part)

    def assertMainWaitShare(self, report, profile, window, main):
        """main's "dataloader" share vs the time it was blocked in next()
        (its wall time there less its time on a CPU or waiting for one);
        returns main's profile thread."""
        thread = self.main_thread(report, profile, main)
        self.assertShare("main %d's dataloader share (wall in next() %.3f, of it runnable %.3f)"
                         % (main, self.truth.share("wait", window, [main]),
                            self.truth.share("wait", window, [main], "delay")),
                         self.truth.share("wait", window, [main], "blocked"), cause_share(thread, "dataloader"), report)
        return thread

    def assertLoaderStep(self, report, profile, main, workers):
        """The step of main's path via "dataloader" names the workers (their
        main threads among its threads); returns it."""
        step = self.step_via(report, self.main_path(report, profile, main), "dataloader")
        self.assertEqual(sorted(step.get("pids") or []), sorted(workers), self.slow_dump(report))
        self.assertTrue(set(workers) <= set(step.get("tids") or []),
                        "the workers' main threads are not on the path\n" + self.slow_dump(report))
        return step

    def profile_loader(self, script, *args, tag=None):
        """Starts the DataLoader workload `script` LOG ARGS (2 workers) and
        profiles it: with `tag` (among ARGS), started from a shell and run
        the user's way (pgrep_profile), else `--pid MAIN`. Asserts main's
        dataloader share and the path's step via "dataloader" naming the
        workers. Returns a namespace: job, main, workers, report, profile,
        window, step."""
        job, marker = self.start_job(script, *args, shell=tag is not None)
        main, workers = marker["main"][0], marker["workers"]
        self.assertEqual(len(workers), 2, marker)
        if tag is None:
            report, profile, window = self.profile_of(main)
        else:
            report, profile, window = self.pgrep_profile(tag, [main] + workers)
        self.assertMainWaitShare(report, profile, window, main)
        step = self.assertLoaderStep(report, profile, main, workers)
        return types.SimpleNamespace(job=job, main=main, workers=workers, report=report, profile=profile,
                                     window=window, step=step)

    def assertSlowFinding(self, report, kind):
        """The one `kind` finding: a warning; the job is "slow", exit 0. Returns its details."""
        self.assertEqual(report.returncode, 0, self.slow_dump(report))
        verdict = report.json.get("verdict") or {}
        self.assertEqual(verdict.get("status"), "slow", self.slow_dump(report))
        self.assertTrue((verdict.get("summary") or "").startswith("slow"), self.slow_dump(report))
        found = report.of_kind(kind)
        self.assertEqual(len(found), 1, "expected one %s finding\n%s" % (kind, self.slow_dump(report)))
        self.assertEqual(found[0].get("severity"), "warning", self.slow_dump(report))
        return found[0].get("details") or {}

    def assertDataStarved(self, report, window, main, workers):
        """data-starved: its share vs main's measured wait, the worker pids."""
        details = self.assertSlowFinding(report, "data-starved")
        # The verdict names the root cause: data-starved itself, or the
        # finding that explains it (io-bound workers), found by caused_by.
        starved = report.of_kind("data-starved")[0]
        root = starved
        if starved.get("caused_by"):
            root = next(f for f in report.json["findings"] if f["id"] == starved["caused_by"])
        self.assertIn(root["kind"], report.json["verdict"]["summary"], self.slow_dump(report))
        self.assertShare("data-starved share", self.truth.share("wait", window, [main], "blocked"),
                         details.get("share", -1), report)
        self.assertEqual(sorted(details.get("worker_pids") or []), sorted(workers), self.slow_dump(report))
        return details
