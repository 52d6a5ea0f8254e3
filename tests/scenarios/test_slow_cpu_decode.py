"""Shape d of issue 18, CPU-bound decode in the workers: 2 DataLoader workers
burn ~15 ms of CPU per item in decode(), pure Python, on this 2-core machine
(workloads/cpu_decode_loader.py), and the main thread waits a large share
for batches. Run as `hangtrace --pid $(pgrep -f TAG) --duration 8`, the
profile must show, within ±10 points of what the job measured: main's
"dataloader" share; on the critical path, the step via "dataloader" naming
the workers and their "on-cpu" share (their own CPU time in decode, from
time.thread_time, without the run-queue wait); with CPU samples taken, a
sampled stack of that step in decode(); a data-starved warning; verdict
slow, exit 0.
"""
import os
import re
import unittest

from scenario_support import SlowJobTestCase, cause_share, requires_bpf_and_torch

TAG = "ht-slow-decode-%d" % os.getpid()


@requires_bpf_and_torch
class CpuDecode(SlowJobTestCase):
    def test_workers_burn_cpu_in_decode(self):
        job, marker = self.start_job("cpu_decode_loader.py", TAG, "--seconds", 180, shell=True)
        main, workers = marker["main"][0], marker["workers"]
        self.assertEqual(len(workers), 2, marker)
        report, profile, window = self.pgrep_profile(TAG, [main] + workers)

        self.assertMainWaitShare(report, profile, window, main)
        step = self.assertLoaderStep(report, profile, main, workers)
        measured_wall = self.measured_step_share("cpu", window, step)
        measured_cpu = self.measured_step_share("cpu", window, step, cpu=True)
        self.assertShare("workers' on-cpu share (decode's wall share %.3f)" % measured_wall, measured_cpu,
                         cause_share(step, "on-cpu"), report)
        sampled = sum(t.get("cpu_samples") or 0 for t in profile.get("threads") or [])
        if sampled:
            stacks = [f.get("stack") or "" for f in step.get("on_cpu_frames") or []]
            self.assertTrue(any(re.search(r"\bdecode\b", s) for s in stacks),
                            "no sampled stack of the workers in decode()\n" + self.slow_dump(report))
        self.assertDataStarved(report, window, main, workers)
        self.assertTrue(job.alive(), job.stderr_tail())


if __name__ == "__main__":
    unittest.main()
