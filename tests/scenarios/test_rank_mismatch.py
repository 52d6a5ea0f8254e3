"""Issue 36: ranks in different collectives (workloads/ranks.py mismatch:
after one all_reduce, `if rank == 0: barrier() else: all_reduce()`), under
torchrun, torch.multiprocessing.spawn and a per-rank launcher with Slurm's
variables. Each run: exit 2, a collective-mismatch verdict that names each
rank's op and the line of ranks.py that called it, and each rank by number
(under spawn, from the index spawn passed its child).
"""
import os
import re
import unittest

from scenario_support import ScenarioTestCase, requires_bpf_and_torch, run_hangtrace, start_rank_job, workload

TAG = "ht-rank-mismatch-%d" % os.getpid()
STALLED = ["--stall-after", "1"]


def call_lines():
    """{op: line} of the collectives ranks.py's mismatch shape stops in."""
    lines = {}
    with open(workload("ranks.py")) as f:
        for n, text in enumerate(f, 1):
            if re.search(r"dist\.barrier\(\)\s+# the others", text):
                lines["barrier"] = n
            if re.search(r"^\s+dist\.all_reduce\(grad\)$", text):
                lines["all_reduce"] = n   # the last one: the else branch
    return lines


@requires_bpf_and_torch
class RankMismatch(ScenarioTestCase):
    def assertMismatch(self, launcher):
        job, markers = start_rank_job(self, "mismatch", launcher, tag=TAG)
        rank0, rank1 = markers[0]["pid"][0], markers[1]["pid"][0]
        report = run_hangtrace(job.pid, *STALLED)
        self.assertEqual(report.returncode, 2, report.dump())
        top = report.findings[0]
        self.assertEqual(top["kind"], "collective-mismatch", report.dump())
        self.assertEqual(sorted(top["details"]["collectives"]), ["all_reduce", "barrier"], report.dump())
        lines = call_lines()
        by_pid = {r["pid"]: r for r in top["details"]["ranks"]}
        self.assertEqual(set(by_pid), {rank0, rank1}, report.dump())
        self.assertEqual(by_pid[rank0]["collective"], "barrier", report.dump())
        self.assertEqual(by_pid[rank1]["collective"], "all_reduce", report.dump())
        self.assertEqual(by_pid[rank0]["caller"], "ranks.py:%d" % lines["barrier"], report.dump())
        self.assertEqual(by_pid[rank1]["caller"], "ranks.py:%d" % lines["all_reduce"], report.dump())
        summary = report.json["verdict"]["summary"]
        self.assertEqual((by_pid[rank0]["rank"], by_pid[rank1]["rank"]), (0, 1), report.dump())
        self.assertEqual(top["confidence"], "certain", report.dump())
        self.assertIn("rank 0 (pid %d) in barrier at ranks.py:%d" % (rank0, lines["barrier"]), summary)
        self.assertIn("rank 1 (pid %d) in all_reduce at ranks.py:%d" % (rank1, lines["all_reduce"]), summary)
        self.assertTrue(job.alive(), job.stderr_tail())
        return report

    def test_under_torchrun(self):
        self.assertMismatch("torchrun")

    def test_under_a_per_rank_launcher_with_slurm_variables(self):
        report = self.assertMismatch("plain")
        self.assertEqual({r["source"] for r in report.json["job"]["ranks"]}, {"SLURM_PROCID"}, report.dump())

    def test_under_torch_multiprocessing_spawn(self):
        # No rank variable: each child's rank is its spawn index, read from
        # the _wrap(fn, i, ...) frame in its stack.
        report = self.assertMismatch("spawn")
        ranks = report.json["job"]["ranks"]
        self.assertEqual([(r["rank"], r["source"]) for r in ranks],
                         [(0, "torch.multiprocessing.spawn index"), (1, "torch.multiprocessing.spawn index")],
                         report.dump())


if __name__ == "__main__":
    unittest.main()
