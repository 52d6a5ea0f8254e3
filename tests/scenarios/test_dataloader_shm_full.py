"""A DataLoader job under a 64 MiB /dev/shm that it has filled."""
import shutil
import unittest

from scenario_support import (ScenarioTestCase, parse_marker, requires_bpf_and_torch,
                              wait_until_blocked)

SHM_SIZE = 64 * 1024 * 1024
# A private mount namespace with a Docker-default-sized tmpfs on /dev/shm.
SMALL_SHM = ["unshare", "-m", "--propagation", "private", "sh", "-c",
             'mount -t tmpfs -o size=64m tmpfs /dev/shm && exec "$@"', "small-shm"]


@requires_bpf_and_torch
@unittest.skipUnless(shutil.which("unshare"), "needs unshare(1)")
class DataLoaderShmFull(ScenarioTestCase):
    def test_full_dev_shm_is_named(self):
        job = self.start("dataloader_shm_full.py", wrapper=SMALL_SHM)
        marker = parse_marker(job.wait_for_line("READY", timeout=180))
        main = marker["main"][0]
        self.assertEqual(main, job.pid)    # sh exec'd python
        used, size = marker["shm_used"][0], marker["shm_size"][0]
        self.assertEqual(size, SHM_SIZE, marker)
        self.assertGreaterEqual(used * 100, 90 * size, "precondition: /dev/shm not full\n%s" % marker)
        # The job now sits in its error handler holding every batch (main
        # thread in futex: Event.wait), or -- when a worker died mid-handover
        # -- somewhere in the loader; either way asleep in a syscall.
        wait_until_blocked(main, all_threads=False)

        report = self.hangtrace(main)
        self.assertNotEqual(report.returncode, 1, report.dump())
        found = report.of_kind("shm-exhausted")
        self.assertEqual(len(found), 1, "no shm-exhausted finding\n" + report.dump())
        f = found[0]
        details = f.get("details") or {}
        self.assertEqual(details.get("size_bytes"), SHM_SIZE, report.dump())
        self.assertGreaterEqual(details.get("used_bytes", 0) * 100, 90 * SHM_SIZE, report.dump())
        segments = details.get("segments") or []
        self.assertTrue(segments, report.dump())
        self.assertTrue(any("torch_" in str(s.get("name", "")) for s in segments),
                        "no torch_* segment named\n" + report.dump())
        holders = set(f.get("pids") or [])
        for s in segments:
            holders.update(s.get("pids") or [])
        self.assertIn(main, holders, report.dump())


if __name__ == "__main__":
    unittest.main()
