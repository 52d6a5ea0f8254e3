"""Shape a of issue 18, data-starved: a DataLoader whose __getitem__ is slow
(workloads/data_starved_loader.py: a 20 ms timed wait per item, 2 workers,
8 ms of main compute a step), so the main thread waits ~80% of the time for
its batches. Run the way a user would, `hangtrace --pid $(pgrep -f TAG)
--duration 8` (main and its workers), the profile must split main's window
as the job measured it: its "dataloader" share within ±10 points of the
time it was blocked in next(), the path through the workers that woke it naming
them and their time in the timed wait ("sleep") as they measured it; a
data-starved warning with that share and the workers' pids; verdict slow,
exit 0.
"""
import os
import unittest

from scenario_support import SlowJobTestCase, cause_share, requires_bpf_and_torch

TAG = "ht-slow-starved-%d" % os.getpid()


@requires_bpf_and_torch
class DataStarved(SlowJobTestCase):
    def test_main_waits_for_a_slow_getitem(self):
        run = self.profile_loader("data_starved_loader.py", TAG, "--seconds", 180, tag=TAG)
        self.assertShare("workers' sleep share", self.measured_step_share("io", run.window, run.step),
                         cause_share(run.step, "sleep"), run.report)
        self.assertDataStarved(run.report, run.window, run.main, run.workers)
        self.assertTrue(run.job.alive(), run.job.stderr_tail())


if __name__ == "__main__":
    unittest.main()
