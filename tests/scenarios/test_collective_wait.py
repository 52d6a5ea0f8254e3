"""Two gloo ranks: rank 0 waits in all_reduce for rank 1, which left the loop.

The launcher starts both ranks as its children (as torchrun does), so
`hangtrace --pid <launcher>` sees both. One hangtrace run serves every test:
the snapshot must know each process's rank, and the report must name the
waiting rank and the absent one in a collective-wait finding.
"""
import json
import os
import unittest

from scenario_support import GlooJobClass, requires_bpf_and_torch, run_hangtrace


@requires_bpf_and_torch
class CollectiveWait(GlooJobClass, unittest.TestCase):
    maxDiff = None
    tmp_prefix = "hangtrace-coll-"

    @classmethod
    def examine(cls, marker):
        cls.launcher = marker["launcher"][0]
        cls.rank0, cls.rank1 = marker["rank0"][0], marker["rank1"][0]
        cls.snapshot_path = os.path.join(cls.tmp, "snapshot.json")
        cls.report = run_hangtrace(cls.launcher, "--save-snapshot", cls.snapshot_path)

    def setUp(self):
        self.assertIsNotNone(self.report.json, self.report.dump())
        self.assertEqual(self.report.json.get("target_pid"), self.launcher, self.report.dump())
        self.assertTrue(self.job.alive(), self.job.stderr_tail())

    def test_snapshot_records_each_ranks_identity(self):
        with open(self.snapshot_path) as f:
            snapshot = json.load(f)
        by_pid = {p["pid"]: p for p in snapshot["processes"]}
        for pid, rank in ((self.rank0, 0), (self.rank1, 1)):
            self.assertIn(pid, by_pid, "rank %d (pid %d) not in the snapshot" % (rank, pid))
            self.assertEqual(by_pid[pid].get("rank"), rank, by_pid[pid])
            self.assertEqual(by_pid[pid].get("world_size"), 2, by_pid[pid])
            self.assertEqual(by_pid[pid].get("local_rank"), rank, by_pid[pid])
        # The launcher is no rank: the keys are absent, not null.
        launcher = by_pid[self.launcher]
        for key in ("rank", "world_size", "local_rank"):
            self.assertNotIn(key, launcher)

    def test_collective_wait_names_the_waiting_and_the_absent_rank(self):
        report = self.report
        found = report.of_kind("collective-wait")
        self.assertEqual(len(found), 1, "expected one collective-wait finding\n" + report.dump())
        finding = found[0]
        missing = {self.rank0, self.rank1} - set(finding.get("pids") or [])
        self.assertFalse(missing, "finding lacks pids %s\n%s" % (sorted(missing), report.dump()))
        details = finding.get("details") or {}
        self.assertEqual(details.get("collective"), "all_reduce", report.dump())
        self.assertEqual(details.get("backend"), "gloo", report.dump())

        waiting = details.get("waiting") or []
        self.assertEqual([(w.get("pid"), w.get("rank")) for w in waiting], [(self.rank0, 0)], report.dump())
        absent = details.get("absent") or []
        self.assertEqual([(a.get("pid"), a.get("rank")) for a in absent], [(self.rank1, 1)], report.dump())
        doing = absent[0].get("doing")
        self.assertIsInstance(doing, str, report.dump())
        self.assertTrue(doing.strip(), report.dump())

        summary = finding.get("summary") or ""
        self.assertIn("rank 0", summary, report.dump())
        self.assertIn("rank 1", summary, report.dump())
        self.assertNotEqual(report.returncode, 1, report.dump())


if __name__ == "__main__":
    unittest.main()
