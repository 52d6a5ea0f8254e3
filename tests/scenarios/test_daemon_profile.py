"""Issue 18, fleet: a stall profile on demand. `hangtrace daemon` in its
sampled steady state (no hook on any hot path) tracks a data-starved
DataLoader job (workloads/data_starved_loader.py: a 20 ms timed wait per item,
2 workers, main waits ~80% for batches). `kill -USR1` makes it attach the
exact hooks, count every wait of the job for --profile-seconds, and write a
bundle (trigger "on-demand") whose report carries the stall profile, judged
against the job's own ground truth as the `--duration` scenarios are: main's
"dataloader" share within ±10 points of the time it was blocked in next(),
the path's step via "dataloader" naming both workers, main's Python frames
sampled on CPU (its step compute), the data-starved
finding with that share and the workers, and the wall-time flame graph
files. The exact hooks are detached again after the window, the counter of
on-demand bundles is 1, and the flight recorder holds none of the window's
short-wait sums.
"""
import json
import os
import shutil
import signal
import tempfile
import types
import unittest

from scenario_support import (OPTIONAL_BUNDLE_FILES, PROFILE_SECONDS, Daemon, Report, SlowJobTestCase,
                              read_bundle_meta, requires_bpf_and_torch)

TAG = "ht-daemon-profile-%d" % os.getpid()


@requires_bpf_and_torch
class DaemonOnDemandProfile(SlowJobTestCase):
    def setUp(self):
        super().setUp()
        self.bundles = tempfile.mkdtemp(prefix="hangtrace-bundles-")
        self.addCleanup(shutil.rmtree, self.bundles, True)

    def test_sigusr1_bundles_the_stall_profile_of_a_data_starved_job(self):
        daemon = Daemon(self.bundles, "--match", TAG, "--hang-after", 600, "--profile-seconds", PROFILE_SECONDS)
        self._workloads.append(daemon)
        job, marker = self.start_job("data_starved_loader.py", TAG, "--seconds", 180)
        main, workers = marker["main"][0], marker["workers"]
        self.assertEqual(len(workers), 2, marker)
        daemon.wait_for_job(main)

        os.kill(daemon.proc.pid, signal.SIGUSR1)
        daemon.wait_for_line("hangtrace daemon: profiling 1 job(s) (3 processes)", timeout=30)
        path = daemon.wait_for_bundle(timeout=PROFILE_SECONDS + 120)
        meta = read_bundle_meta(path)
        self.assertEqual(meta.get("trigger"), "on-demand", meta)
        self.assertEqual(meta.get("job_pid"), main, meta)
        for name in OPTIONAL_BUNDLE_FILES:  # a profile: wall time by cause
            self.assertGreater(os.path.getsize(os.path.join(path, name)), 0, name)

        with open(os.path.join(path, "report.json")) as f:
            text = f.read()
        report = Report(["hangtrace", "daemon", "(on-demand bundle %s)" % path],
                        types.SimpleNamespace(returncode=0, stdout=text, stderr=daemon.stderr_tail()))
        report, profile, window = self.profile_of(report)
        self.assertMainWaitShare(report, profile, window, main)
        self.assertLoaderStep(report, profile, main, workers)
        # Python frames sampled on CPU in the window (--profile-sample-hz 49):
        # main's step compute, groundtruth.busy().
        self.assertGreater(sum(t.get("cpu_samples") or 0 for t in profile.get("threads") or []), 0,
                           self.slow_dump(report))
        stacks = [f.get("stack") or "" for f in self.main_path(report, profile, main).get("on_cpu_frames") or []]
        self.assertTrue(any("busy" in s for s in stacks), "no sampled stack of main in busy()\n" +
                        self.slow_dump(report))
        self.assertDataStarved(report, window, main, workers)

        # Detached before the bundle was written (the window is over).
        self.assertTrue(any("hangtrace daemon: exact hooks detached" in l for l in daemon.lines),
                        daemon.stderr_tail())
        self.assertIn('hangtrace_bundles_written_total{trigger="on-demand"} 1', daemon.metrics())
        with open(os.path.join(path, "recorder.json")) as f:
            recorder = json.load(f)
        events = recorder.get("events")
        self.assertIsInstance(events, list, recorder.keys())
        types_seen = sorted({e.get("type") for e in events})
        self.assertNotIn("short-waits", types_seen, "the flight recorder kept the window's short-wait sums")
        self.assertTrue(job.alive(), job.stderr_tail())


if __name__ == "__main__":
    unittest.main()
