"""Two gloo ranks; rank 0 waits in all_reduce while rank 1 is frozen: first
by SIGSTOP (state T), then held in a ptrace stop by a debugger that never
continues it (gdb attached, busy running a shell command: state t), then by
the cgroup v1 freezer (its threads read D: only the cgroup tells).

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
        wait_for(lambda: proc_state(cls.rank1) in ("S", "R"), 30, "rank 1 to run after gdb")
        cls.by_freezer = cls.run_frozen(cls.rank1, cls.launcher)

    FREEZER = "/sys/fs/cgroup/freezer"

    @classmethod
    def run_frozen(cls, pid, target):
        """hangtrace on `target` while `pid` sits in a frozen v1 freezer cgroup
        of its own; None where this host has no v1 freezer."""
        if not os.path.isdir(cls.FREEZER):
            return None
        cls.frozen_path = "/hangtrace-test-%d" % os.getpid()
        cgroup = cls.FREEZER + cls.frozen_path
        os.mkdir(cgroup)
        try:
            with open(cgroup + "/cgroup.procs", "w") as f:
                f.write(str(pid))
            with open(cgroup + "/freezer.state", "w") as f:
                f.write("FROZEN")
            wait_for(lambda: open(cgroup + "/freezer.state").read().strip() == "FROZEN", 30,
                     "the freezer cgroup to freeze rank 1")
            return run_hangtrace(target)
        finally:
            with open(cgroup + "/freezer.state", "w") as f:
                f.write("THAWED")
            with open(cls.FREEZER + "/cgroup.procs", "w") as f:
                f.write(str(pid))
            os.rmdir(cgroup)

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

    def test_a_rank_frozen_by_the_cgroup_freezer_is_stopped(self):
        if self.by_freezer is None:
            self.skipTest("no cgroup v1 freezer at %s" % self.FREEZER)
        first = self.assertStoppedFirst(self.by_freezer)
        self.assertEqual(first["details"].get("frozen_cgroup"), "freezer:" + self.frozen_path,
                         self.by_freezer.dump())
        self.assertIn("cgroup freezer", first.get("summary", ""), self.by_freezer.dump())
        self.assertIn("THAWED", " ".join(first.get("advice") or []), self.by_freezer.dump())
        # Frozen threads read D; they are not an I/O wait.
        self.assertFalse(self.by_freezer.of_kind("io-stuck"), self.by_freezer.dump())

    def test_the_peer_ranks_waits_are_grouped_under_the_stopped_rank(self):
        for report in (self.by_signal, self.by_tracer):
            findings = report.json["findings"]
            for f in findings[1:]:
                if self.rank1 in (f.get("pids") or []) or f.get("kind") == "network-wait":
                    self.assertEqual(f.get("caused_by"), "F1", report.dump())
            self.assertIsNone(findings[0].get("caused_by"), report.dump())
            # The rank waiting on it is among the threads that wait on the stopped one.
            rank0_threads = {int(t) for t in os.listdir("/proc/%d/task" % self.rank0)}
            self.assertTrue(rank0_threads & set(findings[0]["details"]["waiting_tids"]), report.dump())


if __name__ == "__main__":
    unittest.main()
