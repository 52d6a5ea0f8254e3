"""A thread blocks in libc read() on a pipe through ctypes.PyDLL, which keeps
the GIL: the main thread and another Python thread wait for the GIL forever
(workloads/gil_held_read.py). hangtrace must name the GIL holder: a critical
`gil-held` finding with the holder and the waiters, the chain main thread ->
GIL -> holder -> the pipe -> its writer, and exit status 2.

Run on the system Python with torch (a PyTorch job), and on every pyenv
CPython 3.8-3.13 found (no torch there); the collector reads the GIL of each.
The same workload with --healthy (three threads handing the GIL around while
they compute) must get no critical gil-held finding.
"""
import glob
import os
import time
import unittest

from scenario_support import (PYTHON, _read, SYS_FUTEX, SYS_READ, ScenarioTestCase, parse_marker,
                              requires_bpf_and_torch, run_hangtrace, thread_states, wait_for, workload)

STALL_AFTER_S = 1.0


def pyenv_pythons():
    """{minor: path} of pyenv's CPython 3.8-3.13, as the collector's tests find them."""
    out = {}
    for minor in range(8, 14):
        found = sorted(glob.glob("/root/.pyenv/versions/3.%d.*/bin/python3.%d" % (minor, minor)))
        if found and os.access(found[0], os.X_OK):
            out[minor] = found[0]
    return out


def _switches(pid, tid):
    for line in (_read("/proc/%d/task/%d/status" % (pid, tid)) or "").splitlines():
        if line.startswith("voluntary_ctxt_switches"):
            return int(line.split()[1])
    return -1


@requires_bpf_and_torch
class GilHeld(ScenarioTestCase):
    maxDiff = None

    def start_job(self, python, *args):
        job = self.start_argv([python, "-u", workload("gil_held_read.py")] + list(args))
        return job, parse_marker(job.wait_for_line("READY"))

    def wait_until_frozen(self, marker):
        """Until the holder sleeps in read() and the other two threads in futex
        (take_gil), the holder not woken for STALL_AFTER_S + 0.5 s: it has been
        blocked past the stall threshold."""
        pid, holder, waiter = marker["main"][0], marker["holder"][0], marker["waiter"][0]

        def frozen():
            states = {tid: (state, nr) for tid, state, nr, _, _ in thread_states(pid)}
            return (states.get(holder) == ("S", SYS_READ) and states.get(pid, ("", 0))[1] == SYS_FUTEX and
                    states.get(waiter, ("", 0))[1] == SYS_FUTEX)

        wait_for(frozen, 60, "the holder in read() and the others in futex waits", interval=0.02)
        seen = {"switches": _switches(pid, holder), "since": None}

        def blocked_long_enough():
            now = time.monotonic()
            if not frozen() or _switches(pid, holder) != seen["switches"]:
                seen.update(switches=_switches(pid, holder), since=None)
                return False
            if seen["since"] is None:
                seen["since"] = now
            return now - seen["since"] >= STALL_AFTER_S + 0.5

        wait_for(blocked_long_enough, 60, "the holder to stay blocked in read()", interval=0.05)

    def assertGilHeld(self, marker, report):
        pid, holder, waiter = marker["main"][0], marker["holder"][0], marker["waiter"][0]
        writer, inode = marker["writer"][0], marker["pipe"][0]
        self.assertEqual(report.returncode, 2, report.dump())
        found = report.of_kind("gil-held")
        self.assertEqual(len(found), 1, report.dump())
        f = found[0]
        self.assertEqual(f["severity"], "critical", report.dump())
        self.assertEqual(f["pids"], [pid], report.dump())
        self.assertEqual(f["tids"][0], holder, report.dump())
        self.assertEqual(sorted(f["tids"][1:]), sorted([pid, waiter]), report.dump())
        self.assertEqual(f["details"]["holder_tid"], holder, report.dump())
        self.assertEqual(sorted(f["details"]["waiter_tids"]), sorted([pid, waiter]), report.dump())
        # The verdict leads with it and names the holder.
        self.assertEqual(report.findings[0]["kind"], "gil-held", report.dump())
        verdict = report.json["verdict"]["summary"]
        self.assertIn("gil-held", verdict, report.dump())
        self.assertIn("thread %d" % holder, verdict, report.dump())
        # main -> GIL of pid -> holder -> pipe:[inode] -> the writer.
        steps = [(s["from"], s["edge"], s["to"]) for s in f["chain"]]
        text = "\n".join(" | ".join(s) for s in steps)
        self.assertTrue(steps, report.dump())
        self.assertEqual(steps[0][0], "main %d (%s)" % (pid, report.process(pid)["comm"]), text)
        self.assertEqual(steps[0][1:], ("waits on", "GIL of %d (%s)" % (pid, report.process(pid)["comm"])), text)
        self.assertIn("thread %d" % holder, steps[1][2], text)
        pipe = [s for s in steps if s[1] == "waits on" and "pipe:[%d]" % inode in s[2]]
        self.assertTrue(pipe and "thread %d" % holder in pipe[0][0], text)
        self.assertTrue(any(s[1] == "can be released by" and "pipe:[%d]" % inode in s[0] and
                            "%d (sleep)" % writer in s[2] for s in steps), text)
        evidence = "\n".join(f["evidence"])
        # co_name before 3.11, co_qualname from 3.11.
        self.assertRegex(evidence, r"Python stack of the holder: (main\.<locals>\.)?holder \(gil_held_read\.py:\d+\)",
                         report.dump())
        self.assertTrue(any("ctypes.CDLL" in a for a in f["advice"]), report.dump())
        return f

    def test_system_python_torch_job(self):
        job, marker = self.start_job(PYTHON, "--torch")
        self.wait_until_frozen(marker)
        report = run_hangtrace(marker["main"][0], "--stall-after", STALL_AFTER_S)
        f = self.assertGilHeld(marker, report)
        # Debian's python3 has no symbol for take_gil; the GIL address decides.
        self.assertIn("native stack of the holder:", "\n".join(f["evidence"]), report.dump())

    def test_pyenv_pythons(self):
        pythons = pyenv_pythons()
        if not pythons:
            self.skipTest("no pyenv CPython 3.8-3.13 under /root/.pyenv/versions")
        for minor, python in sorted(pythons.items()):
            with self.subTest(python=python):
                job, marker = self.start_job(python)
                self.assertEqual(marker["py_minor"][0], minor)
                self.wait_until_frozen(marker)
                self.assertGilHeld(marker, run_hangtrace(marker["main"][0], "--stall-after", STALL_AFTER_S))
                job.kill()

    def test_healthy_threads_handing_the_gil_around(self):
        job, marker = self.start_job(PYTHON, "--torch", "--healthy")
        pid = marker["main"][0]
        wait_for(lambda: len(thread_states(pid)) >= 3, 60, "three threads")
        for _ in range(3):
            report = run_hangtrace(pid, "--stall-after", STALL_AFTER_S)
            critical = [f for f in report.of_kind("gil-held") if f.get("severity") == "critical"]
            self.assertEqual(critical, [], report.dump())
            self.assertEqual(report.returncode, 0, report.dump())


if __name__ == "__main__":
    unittest.main()
