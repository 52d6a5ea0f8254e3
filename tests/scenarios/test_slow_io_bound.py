"""Shape b of issue 18, io-bound: DataLoader workers read many small files
through a throttled FUSE mount (workloads/fuse_slow_server.py: each read(2)
answered 15 ms later, under a temporary directory; io_bound_loader.py: 2
workers, 5 ms of main compute a step). `hangtrace --pid MAIN --duration 8`
must find, within ±10 points of what the job measured: main's "dataloader"
share (its time blocked in next()); on the critical path, the step via "dataloader"
naming the two workers and their "storage-io" share (their time blocked in
open, read, close), its objects naming the mount; a data-starved warning and an
io-bound warning naming the mount point, a fuse fstype, the source, files
under the mount and a median per call near the measured one; verdict slow,
exit 0. The mount is lazily unmounted and the daemon killed however the
test ends.
"""
import re
import statistics
import unittest

from scenario_support import (FuseMountMixin, SlowJobTestCase, cause_entry, cause_share, requires_bpf_and_torch,
                              requires_fuse)

DELAY_MS = 15


@requires_fuse
@requires_bpf_and_torch
class IoBound(FuseMountMixin, SlowJobTestCase):
    def test_workers_read_through_a_slow_mount(self):
        self.start_fuse("fuse_slow_server.py", "--delay-ms", DELAY_MS)
        run = self.profile_loader("io_bound_loader.py", self.mnt, "--seconds", 180)
        report, window = run.report, run.window
        self.assertShare("workers' storage-io share", self.measured_step_share("io", window, run.step),
                         cause_share(run.step, "storage-io"), report)
        io = cause_entry(run.step, "storage-io") or {}
        self.assertIn(self.mnt, [o.get("mount_point") for o in io.get("objects") or []], self.slow_dump(report))

        self.assertDataStarved(report, window, run.main, run.workers)
        details = self.assertSlowFinding(report, "io-bound")
        # The root cause leads: io-bound explains data-starved.
        io_id = report.of_kind("io-bound")[0]["id"]
        self.assertEqual(report.of_kind("data-starved")[0].get("caused_by"), io_id, self.slow_dump(report))
        self.assertTrue(report.json["verdict"]["summary"].startswith("slow: io-bound"), self.slow_dump(report))
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
        self.assertTrue(run.job.alive() and self.server.alive(), run.job.stderr_tail())


if __name__ == "__main__":
    unittest.main()
