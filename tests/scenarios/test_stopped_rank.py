"""Two gloo ranks; rank 0 waits in all_reduce while rank 1 is frozen: first
by SIGSTOP (state T), then held in a ptrace stop by a debugger that never
continues it (gdb attached, busy running a shell command: state t).

The root cause is the stopped rank, not rank 0's TCPStore or gloo threads
waiting on it: the verdict must lead with a `stopped` finding naming rank 1
and, under ptrace, its tracer.
"""
import os
import signal
import subprocess
import unittest

from scenario_support import (GlooJobClass, proc_state, requires_bpf_and_torch, run_hangtrace, tracer_pid,
                              wait_for)


@requires_bpf_and_torch
class StoppedRank(GlooJobClass, unittest.TestCase):
    maxDiff = None
    tmp_prefix = "hangtrace-stopped-"

    @classmethod
    def examine(cls, marker):
        cls.launcher = marker["launcher"][0]
        cls.rank0, cls.rank1 = marker["rank0"][0], marker["rank1"][0]
        os.kill(cls.rank1, signal.SIGSTOP)
        wait_for(lambda: proc_state(cls.rank1) == "T", 30, "rank 1 to stop")
        cls.by_signal = run_hangtrace(cls.launcher)
        os.kill(cls.rank1, signal.SIGCONT)
        wait_for(lambda: proc_state(cls.rank1) in ("S", "R"), 30, "rank 1 to resume")
        # gdb attaches (every thread in a ptrace stop) and then runs `cat`,
        # which waits on its stdin: the tracee stays stopped until gdb ends.
        cls.gdb = subprocess.Popen(["gdb", "-nx", "-q", "-batch", "-p", str(cls.rank1), "-ex", "shell cat"],
                                   stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for(lambda: tracer_pid(cls.rank1) == cls.gdb.pid and proc_state(cls.rank1) == "t",
                     60, "gdb to hold rank 1 in a ptrace stop")
            cls.by_tracer = run_hangtrace(cls.launcher)
        finally:
            cls.gdb.kill()
            cls.gdb.wait()

    def assertStoppedFirst(self, report):
        self.assertEqual(report.returncode, 2, report.dump())
        findings = report.json.get("findings") or []
        self.assertTrue(findings, report.dump())
        first = findings[0]
        self.assertEqual(first.get("kind"), "stopped", report.dump())
        self.assertEqual(first.get("severity"), "critical", report.dump())
        self.assertEqual(first.get("pids"), [self.rank1], report.dump())
        self.assertTrue(first.get("details", {}).get("whole_process"), report.dump())
        self.assertIn("rank 1", first.get("summary", ""), report.dump())
        self.assertIn("stopped", report.json["verdict"]["summary"], report.dump())
        # rank 0 still waits in the collective: that finding is still made, below.
        kinds = [f.get("kind") for f in findings]
        self.assertIn("collective-wait", kinds, report.dump())
        return first

    def test_a_rank_stopped_by_sigstop_leads_the_verdict(self):
        first = self.assertStoppedFirst(self.by_signal)
        self.assertIn("by a signal", first.get("summary", ""), self.by_signal.dump())
        self.assertIn("kill -CONT %d" % self.rank1, " ".join(first.get("advice") or []), self.by_signal.dump())
        self.assertIsNone(first["details"].get("tracer_pid"), self.by_signal.dump())

    def test_a_rank_held_by_a_debugger_names_the_tracer(self):
        first = self.assertStoppedFirst(self.by_tracer)
        self.assertEqual(first["details"].get("tracer_pid"), self.gdb.pid, self.by_tracer.dump())
        self.assertEqual(first["details"].get("tracer_comm"), "gdb", self.by_tracer.dump())
        self.assertIn("ptrace stop", first.get("summary", ""), self.by_tracer.dump())


if __name__ == "__main__":
    unittest.main()
