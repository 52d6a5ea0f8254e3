"""The fix is built from the chain, not from the finding's kind: a parent that
Popen.wait()s on a child blocked writing the pipe only the parent reads is
told communicate(); Process.join() before Queue.get() is told get() before
join(); a Queue.get() whose producer died is told a timeout and why the
producer died -- not "close the unused end after fork", which an mp.Queue
user cannot do. Each child is named for what it is (a subprocess, a
multiprocessing child), not "worker"."""
import unittest

from scenario_support import (ScenarioTestCase, chain_text, _syscall_numbers, parse_marker, requires_bpf_and_torch,
                              wait_until_blocked)

SYS = _syscall_numbers()


def text_of(finding):
    return finding.get("summary", "") + "\n" + chain_text(finding)


@requires_bpf_and_torch
class WaitFixes(ScenarioTestCase):
    def start_pair(self, mode, main_syscall):
        job = self.start("releasers.py", mode)
        marker = parse_marker(job.wait_for_line("READY"))
        main, child = marker["main"][0], marker["child"][0]
        wait_until_blocked(main, main_syscalls=[SYS[main_syscall]], settle=1.2)
        return job, main, child

    def assertCritical(self, report, kind, main, child):
        self.assertEqual(report.returncode, 2, report.dump())
        found = [f for f in report.findings if f.get("kind") == kind]
        self.assertTrue(found, report.dump())
        f = found[0]
        self.assertEqual(f.get("severity"), "critical", report.dump())
        self.assertIn(main, f.get("pids", []), report.dump())
        return f

    def test_popen_wait_on_a_child_that_fills_its_stdout_pipe(self):
        job, main, child = self.start_pair("popen-wait", "wait4")
        wait_until_blocked(child, main_syscalls=[SYS["write"]], settle=0.5)
        report = self.hangtrace(main)
        f = self.assertCritical(report, "deadlock-cycle", main, child)
        self.assertIn(child, f.get("pids", []), report.dump())
        text = text_of(f)
        self.assertIn("subprocess %d" % child, text, report.dump())
        self.assertIn("pipe:[", text, report.dump())
        self.assertIn("communicate()", f.get("advice", [""])[0], report.dump())
        self.assertNotIn("never hold a lock", " ".join(f.get("advice", [])), report.dump())
        job.kill()

    def test_join_before_get(self):
        job, main, child = self.start_pair("join-before-get", "wait4")
        report = self.hangtrace(main)
        f = self.assertCritical(report, "deadlock-cycle", main, child)
        self.assertIn(child, f.get("pids", []), report.dump())
        text = text_of(f)
        self.assertIn("multiprocessing child %d" % child, text, report.dump())
        self.assertIn("pipe:[", text, report.dump())
        self.assertIn("get() every item before join()", f.get("advice", [""])[0], report.dump())
        job.kill()

    def test_queue_get_whose_producer_died(self):
        job, main, child = self.start_pair("dead-producer", "read")
        report = self.hangtrace(main)
        f = self.assertCritical(report, "dead-peer", main, child)
        advice = " ".join(f.get("advice", []))
        self.assertIn("get(timeout=...)", advice, report.dump())
        self.assertIn("why the producer died", advice, report.dump())
        self.assertNotIn("Close the unused end", advice, report.dump())
        self.assertIn("child %d" % child, "\n".join(f.get("evidence", [])), report.dump())
        job.kill()


if __name__ == "__main__":
    unittest.main()
