"""Shape d of issue 18, CPU-bound decode in the workers: 2 DataLoader workers
burn ~15 ms of CPU per item in decode(), pure Python, on this 2-core machine
(workloads/cpu_decode_loader.py), and the main thread waits a large share
for batches. Run as `hangtrace --pid $(pgrep -f TAG) --duration 8`, the
profile must show, within ±10 points of what the job measured: main's
"dataloader" share; on the critical path, the step via "dataloader" naming
the workers and their "on-cpu" share (their own CPU time in decode, from
their schedstat, without the run-queue wait); with CPU samples taken, a
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
        run = self.profile_loader("cpu_decode_loader.py", TAG, "--seconds", 180, tag=TAG)
        measured_wall = self.measured_step_share("cpu", run.window, run.step, "wall")
        measured_cpu = self.measured_step_share("cpu", run.window, run.step, "cpu")
        self.assertShare("workers' on-cpu share (decode's wall share %.3f)" % measured_wall, measured_cpu,
                         cause_share(run.step, "on-cpu"), run.report)
        sampled = sum(t.get("cpu_samples") or 0 for t in run.profile.get("threads") or [])
        if sampled:
            stacks = [f.get("stack") or "" for f in run.step.get("on_cpu_frames") or []]
            self.assertTrue(any(re.search(r"\bdecode\b", s) for s in stacks),
                            "no sampled stack of the workers in decode()\n" + self.slow_dump(run.report))
        self.assertDataStarved(run.report, run.window, run.main, run.workers)
        self.assertTrue(run.job.alive(), run.job.stderr_tail())


if __name__ == "__main__":
    unittest.main()
