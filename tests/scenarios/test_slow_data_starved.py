"""Shape a of issue 18, data-starved: a DataLoader whose __getitem__ is slow
(workloads/data_starved_loader.py: a 20 ms timed wait per item, 2 workers,
8 ms of main compute a step), so the main thread waits ~80% of the time for
its batches. Run the way a user would, `hangtrace --pid $(pgrep -f TAG)
--duration 8` (main and its workers), the profile must split main's window
as the job measured it: its "dataloader" share within ±10 points of the
time it spent in next(), the path through the workers that woke it naming
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
        job, marker = self.start_job("data_starved_loader.py", TAG, "--seconds", 180, shell=True)
        main, workers = marker["main"][0], marker["workers"]
        self.assertEqual(len(workers), 2, marker)
        report, profile, window = self.pgrep_profile(TAG, [main] + workers)

        self.assertMainWaitShare(report, profile, window, main)
        step = self.assertLoaderStep(report, profile, main, workers)
        self.assertShare("workers' sleep share", self.measured_step_share("io", window, step),
                         cause_share(step, "sleep"), report)
        self.assertDataStarved(report, window, main, workers)
        self.assertTrue(job.alive(), job.stderr_tail())


if __name__ == "__main__":
    unittest.main()
