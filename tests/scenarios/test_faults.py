"""Issue 19 (hardened), item 5: faults around hangtrace, many times over.

- The target exits at a random point of a snapshot: 200 snapshots of a
  small job (3 threads, 2 children, a pipe; every fourth one a Python
  interpreter) that is SIGKILLed at a random time between its marker and
  1.3 times as long as a snapshot of it takes (from outside: a target
  asleep for less than half a second would be watched as a possible poll
  until it woke, collector_polls.cpp, so an exit at the end of its own
  sleep would always come before the snapshot ends). Never a crash or a
  sanitizer report; always exit 0, 1 or 2, a JSON report that parses, and on
  failure one clear line.
- hangtrace's live window and the daemon SIGKILLed at random points of
  their start and their tracing, 30 times each: afterwards no BPF program or
  link of theirs is left (bpftool), no uprobe or kprobe event, nothing
  pinned, and a fresh live window still works.
- ENOSPC: the daemon's bundle directory is a 64 KiB tmpfs with one page
  free. An on-demand
  bundle fails with one line naming the error; nothing of it is left, not
  even a hidden temporary directory; the error is counted and /metrics
  served; a second try fails the same way. `--bundle` and `--json FILE` of
  the CLI on the full tmpfs fail with one line and leave nothing either.
- The ring buffer overflows: a hung job (orphaned-lock) whose other
  threads ping-pong a futex, `--min-block-ms 0 --ringbuf-mb 1` (a record per
  wait), hangtrace stopped (SIGSTOP) for a second in its live window. The
  drops are counted in the JSON and shown in the text, and the orphaned
  lock is still found.

Random choices come from one seed, printed (HANGTRACE_FAULT_SEED repeats a run).
"""
import collections
import errno
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from scenario_support import (PYTHON, SYS_FUTEX, Daemon, ScenarioTestCase, Workload, bpftool_ids, hangtrace_bin, mounted,
                              parse_marker, repro_path, requires_bpf_and_torch, run_hangtrace_measured,
                              umount_lazy, wait_for, wait_until_blocked)

SNAPSHOTS = 200
KILLS = 30
TAG = "ht-faults-%d" % os.getpid()
SEED = int(os.environ.get("HANGTRACE_FAULT_SEED") or time.time_ns() % 1_000_000)
CRASH_SIGNS = ("terminate called", "Segmentation fault", "Aborted", "core dumped", "Sanitizer",
               "runtime error:", "Traceback")

# The Python variant of repro_short_lived: the same shape, an interpreter
# whose stacks are read while it goes away.
SHORT_LIVED_PY = r"""
import os, sys, threading, time
r, w = os.pipe()
children = []
for _ in range(2):
    child = os.fork()
    if child == 0:
        os.close(w)
        os.read(r, 1)  # EOF when the parent is gone
        os._exit(0)
    children.append(child)
for wait in (lambda: os.read(r, 1), threading.Event().wait, lambda: time.sleep(1000)):
    threading.Thread(target=wait, daemon=True).start()
print("READY pid=%d children=%s" % (os.getpid(), ",".join(map(str, children))), flush=True)
time.sleep(int(sys.argv[1]) / 1e6)
os._exit(0)
"""


def _lines(path):
    try:
        with open(path) as f:
            return set(f.read().splitlines())
    except OSError:
        return set()


def attached_state():
    """What a traced session leaves in the kernel while it runs: BPF
    programs and links, uprobe/kprobe events (tracefs), pinned objects."""
    tracefs = "/sys/kernel/tracing" if os.path.isdir("/sys/kernel/tracing/events") else "/sys/kernel/debug/tracing"
    pinned = set()
    for root, dirs, files in os.walk("/sys/fs/bpf"):
        pinned.update(os.path.join(root, n) for n in dirs + files)
    return {"progs": bpftool_ids("prog"), "links": bpftool_ids("link"),
            "uprobe_events": _lines(os.path.join(tracefs, "uprobe_events")),
            "kprobe_events": _lines(os.path.join(tracefs, "kprobe_events")), "pinned": pinned}


def held_by_processes():
    """{"progs": ids, "links": ids} that a live process holds an fd on (a
    program's, or a link's, which names its program too)."""
    held = {"progs": set(), "links": set()}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        fdinfo = "/proc/%s/fdinfo" % pid
        try:
            names = os.listdir(fdinfo)
        except OSError:
            continue
        for name in names:
            try:
                with open(os.path.join(fdinfo, name)) as f:
                    for line in f:
                        key, _, value = line.partition(":")
                        if key in ("prog_id", "link_id"):
                            held["progs" if key == "prog_id" else "links"].add(int(value))
            except (OSError, ValueError):
                continue
    return held


def left_attached(before):
    """What attached_state() has now that it did not have `before` and no
    live process holds: what a dead one left. Tests running beside this one
    (ctest -j) load and hold programs of their own meanwhile."""
    now = attached_state()
    held = held_by_processes()
    left = {k: now[k] - before[k] - held.get(k, set()) for k in now}
    return {k: sorted(v) for k, v in left.items() if v}


def crash_sign(text):
    return next((s for s in CRASH_SIGNS if s in text), None)


@requires_bpf_and_torch
class Faults(ScenarioTestCase):
    @classmethod
    def setUpClass(cls):
        sys.stderr.write("faults: seed %d (HANGTRACE_FAULT_SEED=%d repeats it)\n" % (SEED, SEED))

    def setUp(self):
        super().setUp()
        self.rng = random.Random("%d-%s" % (SEED, self.id()))
        self.tmp = tempfile.mkdtemp(prefix="hangtrace-faults-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def stop(self, w):
        """Kills workload `w` now (not at tearDown: the loops start hundreds)."""
        w.kill()
        self._workloads.remove(w)

    # ---- (a) the target exits during the snapshot --------------------------------------

    def test_the_target_exits_at_random_points_of_a_snapshot(self):
        outcomes = collections.Counter()
        failures = collections.Counter()
        # How long a snapshot of this job takes here: the exits are spread
        # over it and a little beyond, so that some snapshots finish.
        target = self.start_argv([repro_path("repro_short_lived"), str(600_000_000), TAG])
        pid = parse_marker(target.wait_for_line("READY", timeout=30))["pid"][0]
        calibration = run_hangtrace_measured(["--pid", pid, "--json", "-"], timeout=120)
        self.stop(target)
        self.assertIn(calibration.returncode, (0, 2), calibration.dump())
        span_us = int(calibration.wall_s * 1.3e6)
        for i in range(SNAPSHOTS):
            delay_us = self.rng.randrange(0, span_us)
            asleep_us = str(600_000_000)  # it sleeps long; the kill ends it
            if i % 4 == 3:
                argv = [PYTHON, "-S", "-c", SHORT_LIVED_PY, asleep_us, TAG]
            else:
                argv = [repro_path("repro_short_lived"), asleep_us, TAG]
            target = self.start_argv(argv)
            pid = parse_marker(target.wait_for_line("READY", timeout=30))["pid"][0]
            killer = threading.Timer(delay_us / 1e6, os.kill, (pid, signal.SIGKILL))
            killer.start()
            report = run_hangtrace_measured(["--pid", pid, "--json", "-"], timeout=120)
            killer.join()
            self.stop(target)
            what = "snapshot %d (%s, exit after %d us)\n%s" % (i, os.path.basename(argv[0]), delay_us, report.dump())
            self.assertFalse(report.timed_out, what)
            self.assertNoCrash(report)
            self.assertIsNone(crash_sign(report.stderr), what)
            self.assertIn(report.returncode, (0, 1, 2), what)
            if report.returncode == 1:
                lines = [l for l in report.stderr.splitlines() if l.strip()]
                self.assertEqual(len(lines), 1, "want one clear line\n" + what)
                self.assertTrue(lines[0].startswith("hangtrace: "), what)
                self.assertEqual(report.stdout.strip(), "", what)
                failures[re.sub(r"\d+", "N", lines[0])] += 1
            else:
                self.assertIsInstance(report.json, dict, what)
                self.assertEqual(report.json.get("target_pid"), pid, what)
            outcomes[report.returncode] += 1
        sys.stderr.write("faults: %d snapshots of targets killed 0-%d ms after their marker (a snapshot takes "
                         "%.0f ms): exits %s; failures: %s\n" % (SNAPSHOTS, span_us // 1000, calibration.wall_s * 1e3,
                                                                  dict(outcomes), dict(failures)))
        self.assertEqual(sum(outcomes.values()), SNAPSHOTS)
        # Both ends were reached: snapshots the exit cut short, and whole ones.
        self.assertGreater(outcomes[1], 0)
        self.assertGreater(outcomes[0] + outcomes[2], 0)

    # ---- (b) SIGKILL at random points -----------------------------------------------------

    def flood(self):
        """repro_ring_flood (records flow all the time); returns its marker."""
        w = self.start_argv([repro_path("repro_ring_flood"), TAG])
        return parse_marker(w.wait_for_line("READY", timeout=30))

    def kill_at_random(self, argv, marker, kills, attached):
        """Starts `argv` (stderr merged into stdout) `kills` times and
        SIGKILLs it: half the time at a random point of its start (before
        the line `marker`), half a random time after it. Returns how many
        died at each stage. `attached`: the state before, checked after."""
        # How long the start takes here, to spread the early kills over it.
        w = Workload(["sh", "-c", 'exec "$@" 2>&1', "sh"] + argv)
        self._workloads.append(w)
        t0 = time.monotonic()
        w.wait_for_line(marker, timeout=120)
        start_s = time.monotonic() - t0
        self.stop(w)
        stages = collections.Counter()
        for i in range(kills):
            w = Workload(["sh", "-c", 'exec "$@" 2>&1', "sh"] + argv)
            self._workloads.append(w)
            if i % 2 == 0:
                time.sleep(self.rng.uniform(0, start_s))  # a random point of the start, on purpose
                stages["start" if not any(l.startswith(marker) for l in w.lines) else "running"] += 1
            else:
                w.wait_for_line(marker, timeout=120)
                time.sleep(self.rng.uniform(0, 1.0))
                stages["running"] += 1
            os.kill(w.pid, signal.SIGKILL)
            w.proc.wait(timeout=30)
            self.assertEqual(w.proc.returncode, -signal.SIGKILL, w.stderr_tail())
            self.stop(w)
        # The kernel frees what the dead held (its fds) asynchronously.
        wait_for(lambda: not left_attached(attached), 60, "the killed runs' BPF objects to go",
                 interval=0.2)
        return start_s, stages

    def test_sigkill_of_live_tracing_and_of_the_daemon_leaves_nothing_attached(self):
        before = attached_state()
        marker = self.flood()
        pid = marker["pid"][0]
        live = [hangtrace_bin(), "--pid", pid, "--duration", 30, "--json", os.path.join(self.tmp, "r.json")]
        start_s, stages = self.kill_at_random([str(a) for a in live], "hangtrace: tracing", KILLS, before)
        sys.stderr.write("faults: %d SIGKILLs of `hangtrace --pid --duration` (start %.2f s): %s; nothing left\n"
                         % (KILLS, start_s, dict(stages)))
        for exact in (False, True):
            daemon = [hangtrace_bin(), "daemon", "--match", TAG, "--scan-every", "0.2", "--hang-after", "600",
                      "--bundle-dir", os.path.join(self.tmp, "bundles"), "--metrics", "127.0.0.1:0"]
            if exact:
                daemon += ["--steady-state", "exact"]
            start_s, stages = self.kill_at_random(daemon, "hangtrace daemon: ready", KILLS // 2, before)
            sys.stderr.write("faults: %d SIGKILLs of the daemon%s (start %.2f s): %s; nothing left\n"
                             % (KILLS // 2, " (exact steady state)" if exact else "", start_s, dict(stages)))
        # And the next run is none the worse.
        report = run_hangtrace_measured(["--pid", pid, "--duration", 1, "--json", "-"], timeout=120)
        self.assertNoCrash(report)
        self.assertEqual(report.returncode, 2, report.dump())
        self.assertGreater(report.json["live"]["events"], 0, report.dump())
        wait_for(lambda: not left_attached(before), 60, "the last run's BPF objects to go", interval=0.2)

    # ---- (c) ENOSPC while writing a bundle ------------------------------------------------

    def full_tmpfs(self):
        """A 64 KiB tmpfs, unmounted when the test ends, filled but for one
        page: a write begins, then runs out of space (a report or a bundle
        that merely fits in 64 KiB would say nothing)."""
        path = os.path.join(self.tmp, "tiny")
        os.mkdir(path)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", path], check=True)
        self.addCleanup(lambda: mounted(path) and umount_lazy(path))
        filler = os.path.join(path, "filler")
        with open(filler, "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * 4096)
            except OSError as e:
                self.assertEqual(e.errno, errno.ENOSPC)
        os.truncate(filler, os.path.getsize(filler) - 4096)
        st = os.statvfs(path)
        self.assertEqual(st.f_bavail * st.f_frsize, 4096)
        return path

    def assertEmptyDir(self, path, why):
        self.assertEqual(os.listdir(path), [], "left behind in %s\n%s" % (path, why))

    def test_enospc_while_writing_a_bundle(self):
        tiny = self.full_tmpfs()
        bundles = os.path.join(tiny, "bundles")
        job = self.start_argv([repro_path("repro_fork_locked_mutex"), TAG])
        pids = [int(p) for p in job.wait_for_line("READY", timeout=30).split()[1:]]
        wait_until_blocked(pids[1], main_syscalls=[SYS_FUTEX])
        daemon = Daemon(bundles, "--match", TAG, "--scan-every", "0.2", "--hang-after", 600, "--profile-seconds", 1)
        self._workloads.append(daemon)
        daemon.wait_for_job(pids[0])
        for attempt in (1, 2):
            os.kill(daemon.proc.pid, signal.SIGUSR1)
            line = daemon.wait_for_line("hangtrace daemon: failed to", timeout=60)
            self.assertIn("No space left on device", line, daemon.stderr_tail())
            self.assertEmptyDir(bundles, daemon.stderr_tail())
            metrics = daemon.metrics()
            self.assertIn("hangtrace_bundle_errors_total %d" % attempt, metrics)
            self.assertIsNone(daemon.proc.poll(), daemon.stderr_tail())
        self.assertFalse(any("bundle written" in l for l in daemon.lines), daemon.stderr_tail())
        self.stop(daemon)

        # The CLI on the same full file system: one line each, nothing left.
        out = os.path.join(tiny, "cli")
        os.mkdir(out)
        for args in (["--bundle", out], ["--json", os.path.join(out, "report.json"),
                                        "--save-snapshot", os.path.join(out, "snap.json")]):
            report = run_hangtrace_measured(["--pid", pids[0]] + args, timeout=120)
            self.assertNoCrash(report)
            self.assertEqual(report.returncode, 1, report.dump())
            lines = [l for l in report.stderr.splitlines() if l.strip()]
            self.assertEqual(len(lines), 1, "want one clear line\n" + report.dump())
            self.assertIn("No space left on device", lines[0], report.dump())
            self.assertEmptyDir(out, report.dump())

    # ---- (d) the ring buffer overflows -----------------------------------------------------

    def test_a_ring_buffer_overflow_is_counted_and_the_hang_still_found(self):
        marker = self.flood()
        pid, child = marker["pid"][0], marker["child"][0]
        wait_until_blocked(child, main_syscalls=[SYS_FUTEX])
        json_path = os.path.join(self.tmp, "report.json")
        tracer = Workload(["sh", "-c", 'exec "$@" 2>&1', "sh", hangtrace_bin(), "--pid", str(pid), "--duration", "4",
                           "--min-block-ms", "0", "--ringbuf-mb", "1", "--json", json_path])
        self._workloads.append(tracer)
        tracer.wait_for_line("hangtrace: tracing", timeout=120)
        # Its consumer stopped for a second: the flood fills 1 MiB many times over.
        os.kill(tracer.pid, signal.SIGSTOP)
        time.sleep(1.0)
        os.kill(tracer.pid, signal.SIGCONT)
        rc = tracer.proc.wait(timeout=120)
        tracer._reader.join(timeout=10)
        text = "\n".join(tracer.lines)
        self.assertEqual(rc, 2, text[-4000:])
        with open(json_path) as f:
            report = json.load(f)
        live = report.get("live") or {}
        sys.stderr.write("faults: ring buffer of 1 MiB: %d events, %d dropped\n"
                         % (live.get("events", 0), live.get("dropped", 0)))
        self.assertGreater(live.get("dropped", 0), 0, json.dumps(live)[:2000])
        self.assertRegex(text, r"LIVE: .* %d dropped, .*\(ring buffer overflowed: raise --ringbuf-mb\)"
                         % live["dropped"], text[-4000:])
        orphaned = [f for f in report.get("findings") or [] if f.get("kind") == "orphaned-lock"]
        self.assertTrue(orphaned and child in (orphaned[0].get("pids") or []), json.dumps(report.get("findings"))[:4000])
        self.assertEqual(report["verdict"]["status"], "hang")


if __name__ == "__main__":
    unittest.main()
