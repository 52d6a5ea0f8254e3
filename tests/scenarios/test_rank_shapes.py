"""Issue 36: multi-rank gloo jobs that stop before or outside a collective
(workloads/ranks.py, world size 2, ranks started by a per-rank launcher that
sets Slurm's variables, as srun does: no RANK in any environment).

- A rank that never starts: rank 0 waits in init_process_group for it (the
  TCPStore's wait for every rank to connect). A rendezvous-wait, critical,
  names rank 0 first, the stage, and the store's one accepted connection
  of world size 2.
- A node that never comes up under torchrun (--nnodes 2, only node 0
  started): its agent waits in its static rendezvous before it starts any
  rank. A rendezvous-wait names the agent, the rendezvous (backend,
  endpoint, --nnodes) and the store's one accepted connection of 2 nodes.
- A breakpoint left in rank 0: it reads stdin (a pipe nobody writes) in
  pdb while rank 1 waits in all_reduce. The verdict is waits-for-input on
  rank 0 (the debugger, where its stdin comes from), and the collective
  wait of rank 1 is caused by it. The same under torchrun started from a
  terminal (a pty nobody types into): the ranks inherit it as stdin.
- Healthy: both ranks step all_reduce every 20 ms; both sit in all_reduces
  of 1 GiB that take longer than --stall-after each, moving data all
  along: no critical finding either way.
"""
import os
import pty
import unittest

from scenario_support import (PYTHON, ScenarioTestCase, connections_accepted_on, free_port, process_age_s,
                              requires_bpf_and_torch, run_hangtrace, start_rank_job, wait_for, workload)

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

    def test_a_node_that_never_comes_up_leaves_torchrun_in_its_rendezvous(self):
        port = free_port()
        # torch 1.13 on Python 3.11 needs --redirects/--tee (test_torchrun_job.py).
        job = self.start_argv([PYTHON, "-u", "-m", "torch.distributed.run", "--nnodes", "2", "--node_rank", "0",
                               "--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port", str(port),
                               "--redirects", "2", "--tee", "2", workload("ranks.py"), "healthy",
                               "--launcher", "torchrun", "--port", "0", TAG])
        # The agent's store accepts its own client, then waits for node 1's.
        wait_for(lambda: connections_accepted_on(port) >= 1, 120, "torchrun's store to accept its own client")
        wait_for(lambda: (process_age_s(job.pid) or 0) >= 2.0, 30, "torchrun to be 2 s old")
        report = run_hangtrace(job.pid, *STALLED)
        self.assertEqual(report.returncode, 2, report.dump())
        top = report.findings[0]
        self.assertEqual(top["kind"], "rendezvous-wait", report.dump())
        self.assertEqual(top["pids"], [job.pid], report.dump())
        self.assertEqual(top["severity"], "critical", report.dump())
        details = top["details"]
        self.assertEqual(details["launcher"], {"nnodes": "2", "backend": "static",
                                               "endpoint": "127.0.0.1:%d" % port}, report.dump())
        self.assertEqual(details["store"], {"port": port, "accepted": 1}, report.dump())
        self.assertIn("accepted 1 connection of 2 nodes", top["summary"], report.dump())
        self.assertEqual((report.json.get("job") or {}).get("ranks") or [], [], "no rank started\n" + report.dump())
        self.assertTrue(job.alive(), job.stderr_tail())

    def assertBreakpointIsTheRoot(self, job, markers, source):
        """Rank 0 stopped in pdb reading stdin (`source`, a regex of where
        it comes from) leads the verdict; rank 1's collective wait is its."""
        rank0, rank1 = markers[0]["pid"][0], markers[1]["pid"][0]
        report = run_hangtrace(job.pid, *STALLED)
        self.assertEqual(report.returncode, 2, report.dump())
        top = report.findings[0]
        self.assertEqual(top["kind"], "waits-for-input", report.dump())
        self.assertEqual(top["pids"], [rank0], report.dump())
        self.assertEqual(top["details"]["debugger"], "pdb", report.dump())
        self.assertEqual(top["details"]["fd"], 0, report.dump())
        self.assertRegex(top["details"]["source"], source, report.dump())
        self.assertIn("rank 0", top["summary"], report.dump())
        self.assertTrue(report.json["verdict"]["summary"].startswith("HANG (waits-for-input"), report.dump())
        # Rank 1's wait in all_reduce is explained by it.
        waits = report.of_kind("collective-wait")
        self.assertEqual(len(waits), 1, report.dump())
        self.assertEqual(waits[0]["caused_by"], top["id"], report.dump())
        self.assertEqual([w["pid"] for w in waits[0]["details"]["waiting"]], [rank1], report.dump())
        self.assertTrue(job.alive(), job.stderr_tail())

    def test_a_breakpoint_left_in_rank_0_is_the_root(self):
        job, markers = start_rank_job(self, "pdb", "plain", tag=TAG)
        self.assertBreakpointIsTheRoot(job, markers, r"a pipe")

    def test_a_breakpoint_under_torchrun_waits_for_its_terminal(self):
        master, terminal = pty.openpty()
        self.addCleanup(os.close, master)   # open, and nobody types
        try:
            job, markers = start_rank_job(self, "pdb", "torchrun", tag=TAG, stdin=terminal)
        finally:
            os.close(terminal)              # the job holds it
        self.assertBreakpointIsTheRoot(job, markers, r"^a terminal \(/dev/pts/\d+\)")

    def test_healthy_ranks_stepping_have_no_critical_finding(self):
        job, markers = start_rank_job(self, "healthy", "plain", tag=TAG)
        report = run_hangtrace(job.pid, *STALLED)
        self.assertEqual(report.returncode, 0, report.dump())
        critical = [f for f in report.findings if f["severity"] == "critical"]
        self.assertEqual(critical, [], report.dump())
        self.assertEqual(sorted(r["rank"] for r in report.json["job"]["ranks"]), [0, 1], report.dump())
        self.assertTrue(job.alive(), job.stderr_tail())

    def test_ranks_in_long_but_moving_collectives_have_no_critical_finding(self):
        # 1 GiB per all_reduce: ~1.1 s on an idle machine (1.25 GiB per rank).
        job, markers = start_rank_job(self, "long-collective", "plain", tag=TAG, options=["--mib", "1024"])
        took = max(float(m["collective_s"][0]) for m in markers.values())
        # Longer than --stall-after: a wait in it that long is no stall.
        stall_after = 0.5
        self.assertGreater(took, stall_after, "precondition: each all_reduce takes longer than --stall-after")
        report = run_hangtrace(job.pid, "--stall-after", str(stall_after))
        self.assertIn(report.returncode, (0, 1), report.dump())
        critical = [f for f in report.findings if f["severity"] == "critical"]
        self.assertEqual(critical, [], report.dump())
        # Seen inside the collective, not between two.
        for m in markers.values():
            stacks = [f["function"] for t in report.process(m["pid"][0])["threads"]
                      for f in t.get("python_stack") or []]
            self.assertIn("all_reduce", stacks, report.dump())
        self.assertTrue(job.alive(), job.stderr_tail())


if __name__ == "__main__":
    unittest.main()
