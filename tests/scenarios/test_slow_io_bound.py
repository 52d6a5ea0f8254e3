"""Shape b of issue 18, io-bound: DataLoader workers read many small files
through a throttled FUSE mount (workloads/fuse_slow_server.py: each read(2)
answered 15 ms later, under a temporary directory; io_bound_loader.py: 2
workers, 5 ms of main compute a step). `hangtrace --pid MAIN --duration 8`
must find, within ±10 points of what the job measured: main's "dataloader"
share (its time in next()); on the critical path, the step via "dataloader"
naming the two workers and their "storage-io" share (their time in open,
read, close), its objects naming the mount; a data-starved warning and an
io-bound warning naming the mount point, a fuse fstype, the source, files
under the mount and a median per call near the measured one; verdict slow,
exit 0. The mount is lazily unmounted and the daemon killed however the
test ends.
"""
import os
import re
import statistics
import unittest

from scenario_support import (SlowJobTestCase, cause_entry, cause_share, mounted, parse_marker,
                              requires_bpf_and_torch, umount_lazy)

DELAY_MS = 15


@unittest.skipUnless(os.path.exists("/dev/fuse") and os.geteuid() == 0, "needs /dev/fuse and root")
@requires_bpf_and_torch
class IoBound(SlowJobTestCase):
    def setUp(self):
        super().setUp()
        self.server = None
        self.mnt = os.path.join(self.tmp, "mnt")
        os.mkdir(self.mnt)
        self.addCleanup(umount_lazy, self.mnt)   # runs before the directory is removed

    def tearDown(self):
        # Detach the mount and kill the daemon first (a read it holds would
        # keep a worker until the connection aborts), then the loader.
        if mounted(self.mnt):
            umount_lazy(self.mnt)
        if self.server is not None:
            self.server.kill()
        super().tearDown()

    def test_workers_read_through_a_slow_mount(self):
        self.server = self.start("fuse_slow_server.py", self.mnt, "--delay-ms", DELAY_MS)
        parse_marker(self.server.wait_for_line("MOUNTED", timeout=60))
        job, marker = self.start_job("io_bound_loader.py", self.mnt, "--seconds", 180)
        main, workers = marker["main"][0], marker["workers"]
        self.assertEqual(len(workers), 2, marker)
        report, profile, window = self.profile_of(main)

        self.assertMainWaitShare(report, profile, window, main)
        step = self.assertLoaderStep(report, profile, main, workers)
        self.assertShare("workers' storage-io share", self.measured_step_share("io", window, step),
                         cause_share(step, "storage-io"), report)
        io = cause_entry(step, "storage-io") or {}
        self.assertIn(self.mnt, [o.get("mount_point") for o in io.get("objects") or []], self.slow_dump(report))

        self.assertDataStarved(report, window, main, workers)
        details = self.assertSlowFinding(report, "io-bound")
        self.assertEqual(details.get("mount_point"), self.mnt, self.slow_dump(report))
        self.assertTrue((details.get("fstype") or "").startswith("fuse"), self.slow_dump(report))
        self.assertEqual(details.get("source"), "slowfs", self.slow_dump(report))
        files = details.get("files") or []
        self.assertTrue(files, self.slow_dump(report))
        for f in files:
            self.assertRegex(f, r"^%s/sample-\d{4}\.bin$" % re.escape(self.mnt), self.slow_dump(report))
        self.assertGreater(details.get("calls", 0), 0, self.slow_dump(report))
        # The median per call, from log2 buckets (a bucket's upper bound), vs the measured read(2)s.
        measured = statistics.median(self.truth.calls_ms("io", window, "read_ns"))
        median = details.get("median_ms", 0)
        self.assertTrue(0.5 * measured <= median <= 2.5 * measured,
                        "io-bound median: measured %.1f ms a read, reported %.1f ms\n%s"
                        % (measured, median, self.slow_dump(report)))
        self.assertTrue(job.alive() and self.server.alive(), job.stderr_tail())


if __name__ == "__main__":
    unittest.main()
