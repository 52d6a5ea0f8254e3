"""Issue 19 (hardened), item 3: targets that lie to hangtrace or are merely
huge, and names a terminal would act on.

- A fake CPython 3.13 (integration/repro/repro_fake_cpython.cpp, run as a
  copy named python3.13): its _PyRuntime's _Py_DebugOffsets table is taken
  at its word, and the interpreter / thread-state / frame graph behind it has
  cycles, huge counts and lengths, pointers into unmapped memory, and a
  thread list another thread rewrites while hangtrace reads it. The report
  must show that the graph was walked (each trap's thread has the error it
  ran into, the deep one a bounded stack) and what could not be read.
- 100,000 fds; 10,000 threads; a 1 MiB command line; a comm, a thread's comm,
  arguments and open files' names full of terminal escapes, control
  characters and bytes that are no UTF-8 (workloads/hostile_target.py).

Each is examined three ways: `hangtrace --pid P -v --json FILE` (text on
stdout), the same with `--duration 2`, and `--json -`. Each must end on its
own (exit 0, 1 or 2, no signal, no abort) within generous bounds of wall
time and peak RSS (measured with wait4; the figures go to the test's log),
its JSON must parse as UTF-8, and its terminal text (stdout and stderr) must
hold no raw control character and no invalid UTF-8: what came from the
target is escaped. A daemon watching all of them at once keeps serving
/metrics, and writes each one's on-demand bundle.
"""
import json
import os
import shutil
import signal
import sys
import tempfile
import unittest

from scenario_support import (PYTHON, SYS_READ, TIME, Daemon, ScenarioTestCase, hangtrace_bin, parse_marker,
                              repro_path, requires_bpf_and_torch, run_hangtrace_measured, terminal_unsafe,
                              wait_for, wait_until_blocked, workload)

TAG = "ht-hostile-%d" % os.getpid()

# Generous: a snapshot of an ordinary job takes ~1 s and ~50 MiB here; these
# bounds catch a runaway (a walk without end, a copy of everything), not a
# slowdown.
FDS = 100_000
THREADS = 10_000
SNAPSHOT_WALL_S = 90
LIVE_WALL_S = 90
MAX_RSS_KIB = 1536 * 1024
LIVE_SECONDS = 2

# Bytes hostile_target.py and the fake put where hangtrace shows them, each
# of which must come out escaped.
HOSTILE_ARG = b"arg\x1b]0;owned\x07\x1b[2J\x1b[31m\r\xc2\x9b\xff\xfe\x01\x7f"


def process_of(report_json, pid):
    for p in report_json.get("processes") or []:
        if p.get("pid") == pid:
            return p
    return None


def threads_by_tid(report_json, pid):
    p = process_of(report_json, pid) or {}
    return {t.get("tid"): t for t in p.get("threads") or []}


@requires_bpf_and_torch
@unittest.skipUnless(os.access(TIME, os.X_OK), "needs %s (Debian's time) for hangtrace's peak RSS" % TIME)
class HostileTarget(ScenarioTestCase):
    def setUp(self):
        super().setUp()
        self.tmp = tempfile.mkdtemp(prefix="hangtrace-hostile-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    # ---- the three looks at one process --------------------------------------------

    def examine(self, pid, what):
        """The three runs of the module docstring on `pid`, each checked, each
        also saving its snapshot; returns {"snapshot", "live", "stdout"}:
        (report, parsed JSON report, parsed JSON snapshot)."""
        out = {}
        runs = [("snapshot", ["-v"], SNAPSHOT_WALL_S), ("live", ["-v", "--duration", LIVE_SECONDS], LIVE_WALL_S),
                ("stdout", None, SNAPSHOT_WALL_S)]
        for name, extra, bound in runs:
            json_path = os.path.join(self.tmp, "%s-%s.json" % (what, name))
            snapshot_path = os.path.join(self.tmp, "%s-%s.snapshot.json" % (what, name))
            args = ["--pid", pid, "--save-snapshot", snapshot_path]
            args += extra + ["--json", json_path] if extra is not None else ["--json", "-"]
            report = run_hangtrace_measured(args, timeout=bound + 60)
            raw_json = report.raw_stdout if extra is None else (_read_bytes(json_path) or b"")
            parsed = self.assertSoundRun(report, raw_json, terminal=extra is not None, bound=bound)
            snapshot = self.parsed_json(_read_bytes(snapshot_path) or b"", "the snapshot", report)
            self.assertEqual(snapshot.get("schema"), "hangtrace.snapshot/1", brief(report))
            sys.stderr.write("hostile %s, %s: exit %d, %.2f s, peak RSS %.0f MiB, report %d KiB; not read: %s\n"
                             % (what, name, report.returncode, report.wall_s, report.max_rss_kib / 1024,
                                len(raw_json) // 1024, json.dumps(parsed.get("limitations"))[:600]))
            out[name] = (report, parsed, snapshot)
        live = out["live"][1].get("live")
        self.assertIsInstance(live, dict, "no live block\n" + brief(out["live"][0]))
        return out

    def parsed_json(self, raw, what, report):
        try:
            parsed = json.loads(raw.decode("utf-8"))
        except ValueError as e:  # UnicodeDecodeError is one
            self.fail("%s does not parse: %s\n%s\n%r" % (what, e, brief(report), raw[:2000]))
        self.assertIsInstance(parsed, dict, brief(report))
        return parsed

    def assertSoundRun(self, report, raw_json, terminal, bound):
        """Ended by itself in bounds, exit 0/1/2, JSON that parses (as
        UTF-8), terminal text with nothing raw; returns the parsed report."""
        self.assertFalse(report.timed_out, "still running after %.0f s\n%s" % (report.wall_s, brief(report)))
        self.assertNoCrash(report)
        self.assertIn(report.returncode, (0, 1, 2), brief(report))
        self.assertLess(report.wall_s, bound, brief(report))
        self.assertLess(report.max_rss_kib, MAX_RSS_KIB, "peak RSS %d KiB\n%s" % (report.max_rss_kib, brief(report)))
        parsed = self.parsed_json(raw_json, "the JSON report", report)
        self.assertEqual(parsed.get("schema"), "hangtrace.report/1", brief(report))
        unsafe = terminal_unsafe(report.raw_stderr + (report.raw_stdout if terminal else b""))
        self.assertEqual(unsafe, "", "raw target bytes on the terminal\n" + brief(report))
        return parsed

    def start_hostile(self, *args):
        """workloads/hostile_target.py ARGS (bytes allowed) tagged with TAG,
        until its main thread sleeps in read(); returns its marker."""
        args = [a if isinstance(a, bytes) else str(a) for a in args]
        w = self.start_argv([PYTHON, "-u", workload("hostile_target.py"), TAG] + args)
        marker = parse_marker(w.wait_for_line("READY", timeout=120))
        wait_until_blocked(marker["main"][0], main_syscalls=[SYS_READ], all_threads=False)
        return marker

    def start_fds(self):
        """hostile_target.py with FDS fds, or as many as RLIMIT_NOFILE's hard
        limit allows where it cannot be raised; returns (pid, how many)."""
        marker = self.start_hostile("fds", FDS, self.tmp)
        if marker["fds"][0] < FDS:
            sys.stderr.write("hostile: only %d fds: RLIMIT_NOFILE cannot be raised here (no CAP_SYS_RESOURCE)\n"
                             % marker["fds"][0])
        return marker["main"][0], marker["fds"][0]

    # ---- the cases --------------------------------------------------------------------

    def test_a_fake_cpython_runtime_is_walked_and_survived(self):
        # The name makes it CPython 3.13 (python_runtime.cpp: python_file, version_from_name).
        fake = os.path.join(self.tmp, "python3.13")
        shutil.copy(repro_path("repro_fake_cpython"), fake)
        w = self.start_argv([fake, TAG])
        marker = parse_marker(w.wait_for_line("READY", timeout=60))
        pid = marker["pid"][0]
        runs = self.examine(pid, "fake-cpython")
        for name in ("snapshot", "live", "stdout"):
            report, parsed, _ = runs[name]
            threads = threads_by_tid(parsed, pid)
            errors = {trap: (threads.get(marker[trap][0]) or {}).get("python_stack_error") or ""
                      for trap in ("loop", "unmapped", "huge", "notcode", "shims")}
            why = "%s: %s\n%s" % (name, errors, brief(report))
            # Each trap's thread has the error its own trap causes: the walk got there.
            self.assertIn("frame chain loops", errors["loop"], why)
            self.assertRegex(errors["unmapped"], r"cannot read frame at 0x[0-9a-f]+", why)
            self.assertIn("co_filename has length 1099511627776", errors["huge"], why)
            self.assertRegex(errors["notcode"], r"0x[0-9a-f]+ is not a code object", why)
            self.assertIn("frame chain runs past 1024 frames, 0 of them Python's", errors["shims"], why)
            # 2,000 code objects sharing a 1 MiB line table: each thread's
            # 250 frames read, with their line, within the RSS bound
            # (assertSoundRun) a copy of each decoded table would break.
            for t in range(8):
                shared = (threads.get(marker["shared%d" % t][0]) or {}).get("python_stack") or []
                self.assertEqual(len(shared), 250, why)
                self.assertEqual({(f.get("function"), f.get("line")) for f in shared}, {("shared_frame", 60)}, why)
            # 100,000 frames: a bounded stack of them, read.
            deep = (threads.get(marker["deep"][0]) or {}).get("python_stack") or []
            self.assertTrue(0 < len(deep) <= 1024, "%d deep frames\n%s" % (len(deep), why))
            self.assertEqual({f.get("function") for f in deep}, {"deep_frame"}, why)
            # The names, as read (JSON carries them; the terminal gets them escaped).
            names = [f.get("function") or "" for f in
                     (threads.get(marker["names"][0]) or {}).get("python_stack") or []]
            self.assertEqual(len(names), 2, why)
            self.assertTrue(names[0].startswith("evil\x1b]0;owned\x07"), why)
            self.assertEqual(names[1], "A" * 1024 + "...", why)
            # What could not be read is said: thread list C points into unmapped memory.
            self.assertTrue(any("Python stacks of %d not read" % pid in l for l in parsed.get("limitations") or []),
                            why)
        text = runs["snapshot"][0].raw_stdout.decode()
        self.assertIn("evil\\x1b]0;owned\\x07", text, "the names are shown, escaped\n" + text[-3000:])

    def test_100000_fds(self):
        pid, count = self.start_fds()
        runs = self.examine(pid, "%d-fds" % count)
        for name, (report, _, snapshot) in runs.items():
            fds = (process_of(snapshot, pid) or {}).get("fds") or []
            self.assertGreaterEqual(len(fds), count, "%s\n%s" % (name, brief(report)))

    def test_10000_threads(self):
        pid = self.start_hostile("threads", THREADS)["main"][0]
        runs = self.examine(pid, "10k-threads")
        for name, (report, parsed, snapshot) in runs.items():
            for what in (parsed, snapshot):
                p = process_of(what, pid) or {}
                self.assertGreaterEqual(len(p.get("threads") or []), THREADS, "%s\n%s" % (name, brief(report)))

    def test_a_1mib_command_line(self):
        # 16 arguments of 64 KiB (one may hold at most 128 KiB: MAX_ARG_STRLEN).
        args = ["%02d" % i + "x" * (64 * 1024 - 2) for i in range(16)]
        pid = self.start_hostile("args", *args)["main"][0]
        runs = self.examine(pid, "1mib-cmdline")
        for name, (report, parsed, snapshot) in runs.items():
            for what in (parsed, snapshot):
                p = process_of(what, pid)
                self.assertIsNotNone(p, brief(report))
                self.assertIn("00xxxx", p.get("cmdline") or "", name)

    def test_names_with_escapes_control_characters_and_invalid_utf8(self):
        directory = os.path.join(self.tmp, "dir\x1b[31m\x07")
        os.mkdir(directory)
        pid = self.start_hostile("names", directory, HOSTILE_ARG, b"\xff\xfe\xfd" * 100, b"tab\there")["main"][0]
        runs = self.examine(pid, "names")
        for name, (report, parsed, snapshot) in runs.items():
            p = process_of(parsed, pid)
            self.assertIsNotNone(p, brief(report))
            self.assertTrue((p.get("comm") or "").startswith("ev\x1b[31m\x07"), "%s: %r" % (name, p.get("comm")))
            links = [f.get("link") or "" for f in (process_of(snapshot, pid) or {}).get("fds") or []]
            self.assertTrue(any("\x1b]0;owned\x07" in l for l in links), "%s: %r" % (name, links))
        # The text shows the comm, escaped: the thread table has it.
        text = runs["snapshot"][0].raw_stdout.decode()
        self.assertIn("ev\\x1b[31m\\x07", text, text[-3000:])

    def test_the_daemon_keeps_serving_while_watching_them_all(self):
        fake = os.path.join(self.tmp, "python3.13")
        shutil.copy(repro_path("repro_fake_cpython"), fake)
        fake_pid = parse_marker(self.start_argv([fake, TAG]).wait_for_line("READY", timeout=60))["pid"][0]
        directory = os.path.join(self.tmp, "names\x1b[31m")
        os.mkdir(directory)
        pids = [fake_pid, self.start_fds()[0]] + [
            self.start_hostile(*args)["main"][0]
            for args in (("threads", THREADS), ["args"] + ["x" * 65536] * 16, ("names", directory, HOSTILE_ARG))]
        bundles = os.path.join(self.tmp, "bundles")
        daemon = Daemon(bundles, "--match", TAG, "--scan-every", "0.2", "--hang-after", 600,
                        "--profile-seconds", 1)
        self._workloads.append(daemon)
        # In any order: the daemon finds jobs in pid order, and pids wrap.
        def untracked():
            lines = list(daemon.lines)
            return [p for p in pids if not any(l.startswith("hangtrace daemon: tracking job %d " % p) for l in lines)]
        wait_for(lambda: not untracked(), timeout=180,
                 what="the daemon tracking every job (left: %s)\n%s" % (untracked(), daemon.stderr_tail()))
        self.assertIn("hangtrace_tracked", daemon.metrics())
        os.kill(daemon.proc.pid, signal.SIGUSR1)
        written = [daemon.wait_for_bundle(timeout=180) for _ in pids]
        for path in written:
            for name in ("report.json", "snapshot.json", "meta.json", "trace.json"):
                with open(os.path.join(path, name), "rb") as f:
                    json.loads(f.read().decode("utf-8"))
        metrics = daemon.metrics()
        self.assertIn('hangtrace_bundles_written_total{trigger="on-demand"} %d' % len(pids), metrics)
        self.assertIsNone(daemon.proc.poll(), daemon.stderr_tail())
        unsafe = terminal_unsafe("\n".join(daemon.lines).encode())
        self.assertEqual(unsafe, "", daemon.stderr_tail())


def brief(report):
    """report.dump() without the middle of a report of 10,000 threads."""
    text = report.dump()
    return text if len(text) < 12000 else text[:6000] + "\n[...]\n" + text[-6000:]


def _read_bytes(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


if __name__ == "__main__":
    unittest.main()
