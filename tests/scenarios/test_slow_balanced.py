"""Shape e of issue 18, the control: a balanced healthy job whose loader
keeps ahead (workloads/balanced_loader.py: 2 workers, a fast __getitem__,
20 ms of main compute a step). `hangtrace --pid MAIN --duration 8` must say
"ok" and exit 0 with no slow-job finding, and its profile must still agree
with the job: main's "dataloader" share within ±10 points of its time
blocked in next(), and its time on a CPU or waiting for one with its step
compute and the rest of next().
"""
import unittest

from scenario_support import SLOW_KINDS, SlowJobTestCase, cause_share, requires_bpf_and_torch


@requires_bpf_and_torch
class Balanced(SlowJobTestCase):
    def test_a_loader_that_keeps_ahead_is_not_slow(self):
        job, marker = self.start_job("balanced_loader.py", "--seconds", 180)
        main = marker["main"][0]
        report, profile, window = self.profile_of(main)

        self.assertEqual(report.returncode, 0, self.slow_dump(report))
        self.assertEqual(report.json["verdict"]["status"], "ok", self.slow_dump(report))
        slow = [f for f in report.findings if f.get("kind") in SLOW_KINDS]
        self.assertFalse(slow, self.slow_dump(report))
        thread = self.assertMainWaitShare(report, profile, window, main)
        # Its compute, and the part of next() it spent on a CPU or waiting for one.
        measured = sum(self.truth.share(kind, window, [main], part)
                       for kind, part in (("compute", "wall"), ("wait", "cpu"), ("wait", "delay")))
        self.assertShare("main %d's on-cpu + runnable share" % main, measured,
                         cause_share(thread, "on-cpu") + cause_share(thread, "runnable"), report)
        self.assertTrue(job.alive(), job.stderr_tail())


if __name__ == "__main__":
    unittest.main()
