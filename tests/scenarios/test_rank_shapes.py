"""Issue 36: multi-rank gloo jobs that stop before or outside a collective
(workloads/ranks.py, world size 2, ranks started by a per-rank launcher that
sets Slurm's variables, as srun does: no RANK in any environment).

- A rank that never starts: rank 0 waits in init_process_group for it (the
  TCPStore's wait for every rank to connect). A rendezvous-wait, critical,
  names rank 0 first, the stage, and the store's one accepted connection
  of world size 2.
- A breakpoint left in rank 0: it reads stdin (a pipe nobody writes) in
  pdb while rank 1 waits in all_reduce. The verdict is waits-for-input on
  rank 0 (the debugger, where its stdin comes from), and the collective
  wait of rank 1 is caused by it.
- Healthy: both ranks step all_reduce every 20 ms: no critical finding.
"""
import os
import unittest

from scenario_support import ScenarioTestCase, requires_bpf_and_torch, run_hangtrace, start_rank_job

TAG = "ht-rank-shapes-%d" % os.getpid()
STALLED = ["--stall-after", "1"]


@requires_bpf_and_torch
class RankShapes(ScenarioTestCase):
    def test_a_rank_that_never_starts_leaves_rank_0_joining(self):
        job, markers = start_rank_job(self, "never-joins", "plain", ranks=(0,), tag=TAG)
        rank0 = markers[0]["pid"][0]
        report = run_hangtrace(job.pid, *STALLED)
        self.assertEqual(report.returncode, 2, report.dump())
        top = report.findings[0]
        self.assertEqual(top["kind"], "rendezvous-wait", report.dump())
        self.assertEqual(top["pids"][0], rank0, report.dump())
        self.assertEqual(top["severity"], "critical", report.dump())
        details = top["details"]
        self.assertEqual((details["rank"], details["world_size"]), (0, 2), report.dump())
        self.assertIn("TCPStore", details["stage"] + details["evidence"], report.dump())
        self.assertEqual(details["store"]["accepted"], 1, report.dump())
        self.assertIn("rank 0 (pid %d)" % rank0, report.json["verdict"]["summary"], report.dump())
        # The rank is named by Slurm's variable, as the job section says.
        ranks = report.json["job"]["ranks"]
        self.assertEqual([(r["rank"], r["pid"], r["source"]) for r in ranks], [(0, rank0, "SLURM_PROCID")],
                         report.dump())
        self.assertTrue(job.alive(), job.stderr_tail())

    def test_a_breakpoint_left_in_rank_0_is_the_root(self):
        job, markers = start_rank_job(self, "pdb", "plain", tag=TAG)
        rank0, rank1 = markers[0]["pid"][0], markers[1]["pid"][0]
        report = run_hangtrace(job.pid, *STALLED)
        self.assertEqual(report.returncode, 2, report.dump())
        top = report.findings[0]
        self.assertEqual(top["kind"], "waits-for-input", report.dump())
        self.assertEqual(top["pids"], [rank0], report.dump())
        self.assertEqual(top["details"]["debugger"], "pdb", report.dump())
        self.assertEqual(top["details"]["fd"], 0, report.dump())
        self.assertIn("a pipe", top["details"]["source"], report.dump())
        self.assertIn("rank 0", top["summary"], report.dump())
        self.assertTrue(report.json["verdict"]["summary"].startswith("HANG (waits-for-input"), report.dump())
        # Rank 1's wait in all_reduce is explained by it.
        waits = report.of_kind("collective-wait")
        self.assertEqual(len(waits), 1, report.dump())
        self.assertEqual(waits[0]["caused_by"], top["id"], report.dump())
        self.assertEqual([w["pid"] for w in waits[0]["details"]["waiting"]], [rank1], report.dump())
        self.assertTrue(job.alive(), job.stderr_tail())

    def test_healthy_ranks_stepping_have_no_critical_finding(self):
        job, markers = start_rank_job(self, "healthy", "plain", tag=TAG)
        report = run_hangtrace(job.pid, *STALLED)
        self.assertEqual(report.returncode, 0, report.dump())
        critical = [f for f in report.findings if f["severity"] == "critical"]
        self.assertEqual(critical, [], report.dump())
        self.assertEqual(sorted(r["rank"] for r in report.json["job"]["ranks"]), [0, 1], report.dump())
        self.assertTrue(job.alive(), job.stderr_tail())


if __name__ == "__main__":
    unittest.main()
