"""The healthy neighbours of test_wait_releasers.py: a job that sleeps on
purpose, one whose stdout reader is slow but reads, and one taking a lock
another process lets go every second (waited for, and polled for). None
gets a critical finding; the one that sleeps past --stall-after is not
called healthy either (a warning)."""
import os
import shutil
import tempfile
import unittest

from scenario_support import (PYTHON, ScenarioTestCase, _syscall_numbers, parse_marker, requires_bpf_and_torch,
                              wait_until_blocked, workload)

SYS = _syscall_numbers()


@requires_bpf_and_torch
class WaitReleasersHealthy(ScenarioTestCase):
    def assertNoCritical(self, report):
        self.assertEqual(report.returncode, 0, report.dump())
        self.assertFalse([f for f in report.findings if f.get("severity") == "critical"], report.dump())

    def test_a_job_that_sleeps_on_purpose_is_a_warning(self):
        job = self.start("releasers.py", "sleep")
        main = parse_marker(job.wait_for_line("READY"))["main"][0]
        wait_until_blocked(main, main_syscalls=[SYS["clock_nanosleep"]], settle=1.2)
        report = self.hangtrace(main, "--stall-after", "1")
        self.assertNoCritical(report)
        self.assertEqual(report.json["verdict"]["status"], "suspect", report.dump())
        self.assertEqual(report.findings[0].get("kind"), "no-progress", report.dump())

    def test_a_slow_reader_that_reads(self):
        pipeline = "%s -u %s write-stdout | %s -u %s read-stdin slow" % (
            PYTHON, workload("releasers.py"), PYTHON, workload("releasers.py"))
        w = self.start_argv(["bash", "-c", pipeline])
        main = parse_marker(w.wait_for_line("READY"))["main"][0]
        report = self.hangtrace(main, "--stall-after", "1")
        self.assertNoCritical(report)

    def test_a_lock_released_every_second(self):
        # Waited for (flock that blocks) and polled for (LOCK_NB, sleep, retry).
        for how, extra in (("lock-take", ["loop"]), ("lock-poll", [])):
            with self.subTest(how=how):
                d = tempfile.mkdtemp(prefix="hangtrace-releasers-")
                self.addCleanup(shutil.rmtree, d, True)
                path = os.path.join(d, "cache.lock")
                holder = self.start("releasers.py", "lock-hold", "flock", path, "cycle")
                holder.wait_for_line("READY")
                job = self.start("releasers.py", how, "flock", path, *extra)
                main = parse_marker(job.wait_for_line("READY"))["main"][0]
                job.wait_for_line("TOOK 2")
                report = self.hangtrace(main, "--stall-after", "2")
                self.assertNoCritical(report)
                holder.kill()
                job.kill()

if __name__ == "__main__":
    unittest.main()
