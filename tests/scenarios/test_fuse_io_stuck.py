"""DataLoader workers read a file on a FUSE mount whose daemon (pure Python
over /dev/fuse, workloads/fuse_silent_server.py) never answers READ: one
worker waits inside the FUSE request (state S, request_wait_answer), the other
behind it on the page lock (state D, folio_wait_bit_common); the main process
waits for their batch.

hangtrace must say `io-stuck`, critical, with both workers' tids, the mount
point and fstype from the workers' mountinfo, the daemon's pid as the one the
chain leads to (main -> worker -> read of .../shard-3.bin on fuse.datasetfs
served by the daemon), and exit 2. The mount lives under a temporary
directory and is lazily unmounted, and the daemon killed, however the test
ends.
"""
import os
import time
import unittest

from scenario_support import (FuseMountMixin, ScenarioTestCase, parse_marker, proc_state, requires_bpf_and_torch,
                              requires_fuse, wait_for)

STALL_AFTER_S = 2.0


def syscall_nr(pid):
    try:
        with open("/proc/%d/syscall" % pid) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


@requires_fuse
@requires_bpf_and_torch
class FuseIoStuck(FuseMountMixin, ScenarioTestCase):
    def test_workers_stuck_on_a_silent_fuse_mount(self):
        mark = self.start_fuse("fuse_silent_server.py")
        server, daemon = self.server, mark["pid"][0]
        self.assertEqual(daemon, server.pid)
        path = os.path.join(self.mnt, "shard-3.bin")
        job = self.start("dataloader_fuse_read.py", path)
        marker = parse_marker(job.wait_for_line("READY", timeout=120))
        main, workers = marker["main"][0], marker["workers"]
        self.assertEqual(len(workers), 2, marker)
        first = parse_marker(server.wait_for_line("READ", timeout=60))["pid"][0]
        self.assertIn(first, workers)
        other = [w for w in workers if w != first][0]
        # The first worker inside its FUSE request, the other behind it in D.
        wait_for(lambda: syscall_nr(first) in (0, 17) and proc_state(first) in ("S", "D")
                 and proc_state(other) == "D", 60, "both workers stuck reading %s" % path)
        swallowed = time.monotonic()
        # Stuck longer than --stall-after before hangtrace looks.
        wait_for(lambda: time.monotonic() - swallowed > STALL_AFTER_S + 0.5, 10, "the stall threshold")

        report = self.hangtrace(main, "--stall-after", STALL_AFTER_S)
        self.assertEqual(report.returncode, 2, report.dump())
        stuck = report.of_kind("io-stuck")
        self.assertEqual(len(stuck), 1, report.dump())
        f = stuck[0]
        self.assertEqual(f.get("severity"), "critical", report.dump())
        self.assertEqual(sorted(f.get("tids") or []), sorted(workers), report.dump())
        details = f.get("details") or {}
        self.assertEqual(details.get("mount_point"), self.mnt, report.dump())
        self.assertEqual(details.get("fstype"), "fuse.datasetfs", report.dump())
        self.assertEqual(details.get("source"), "datasetfs", report.dump())
        self.assertEqual(details.get("file"), path, report.dump())
        self.assertEqual(details.get("server_pids"), [daemon], report.dump())
        self.assertIsNotNone(details.get("fuse_connection"), report.dump())
        # main -> worker -> the read on the mount, served by the daemon, which reads /dev/fuse.
        chain = f.get("chain") or []
        self.assertTrue(chain, report.dump())
        self.assertIn("main %d" % main, chain[0].get("from", ""), report.dump())
        text = "\n".join("%s %s %s" % (s.get("from"), s.get("edge"), s.get("to")) for s in chain)
        self.assertRegex(text, r"worker (%d|%d)" % tuple(workers), report.dump())
        self.assertIn("read of %s on fuse.datasetfs %s served by" % (path, self.mnt), text, report.dump())
        self.assertIn("%d (python3)" % daemon, text, report.dump())
        self.assertIn("/dev/fuse", text, report.dump())
        self.assertIn("fusermount -u -z %s" % self.mnt, " ".join(f.get("advice") or []), report.dump())
        self.assertEqual(report.findings[0].get("kind"), "io-stuck", report.dump())
        self.assertTrue(job.alive() and server.alive(), job.stderr_tail())


if __name__ == "__main__":
    unittest.main()
