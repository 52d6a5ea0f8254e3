"""Issue 36: a rank killed before hangtrace attached. Two gloo ranks
(workloads/ranks.py oom, a Slurm-style per-rank launcher) run in a fresh
cgroup v1 memory group; after one all_reduce rank 1 forks a helper (which
keeps rank 1's gloo sockets) and allocates until the cgroup's OOM killer
takes it. Rank 0 waits in the next all_reduce forever. Only then does
hangtrace look: the kernel log names the kill (victim, cgroup, limit), and
rank 0's wait is no wait "for the ranks on other hosts": the other end of
its connection is held by the helper, here.
"""
import os
import unittest

from scenario_support import (MemoryCgroup, ScenarioTestCase, parse_marker, requires_bpf_and_torch, requires_memcg_v1,
                              run_hangtrace, start_rank_job, wait_until_blocked)

TAG = "ht-rank-killed-%d" % os.getpid()
LIMIT = 1024 * 1024 * 1024
SIGKILL = 9


@requires_bpf_and_torch
@requires_memcg_v1
class RankKilledBeforeAttach(ScenarioTestCase):
    def test_an_oom_killed_rank_is_named_from_the_kernel_log(self):
        memcg = MemoryCgroup(self, "hangtrace-rank-%d" % os.getpid(), LIMIT)
        job, markers = start_rank_job(self, "oom", "plain", tag=TAG, prefix=memcg.enter)
        rank0, rank1 = markers[0]["pid"][0], markers[1]["pid"][0]
        helper = markers[1]["helper"][0]
        exited = parse_marker(job.wait_for_line("EXITED", timeout=180))
        self.assertEqual((exited["pid"][0], exited["status"][0] & 0x7f), (rank1, SIGKILL), exited)
        self.assertEqual(memcg.oom_kills(), 1, "precondition: one OOM kill in the cgroup")
        wait_until_blocked([rank0], all_threads=False, settle=1.2)

        report = run_hangtrace(job.pid, "--stall-after", "1")
        self.assertEqual(report.returncode, 2, report.dump())
        killed = [f for f in report.of_kind("process-killed") if f["details"].get("source") == "kernel log"]
        self.assertEqual(len(killed), 1, report.dump())
        d = killed[0]["details"]
        cgroup = "/" + os.path.basename(memcg.path)
        self.assertEqual((d["pid"], d["event"], d["cgroup"], d["limit_bytes"]), (rank1, "oom-kill", cgroup, LIMIT),
                         report.dump())
        self.assertEqual(report.findings[0]["id"], killed[0]["id"], "the death leads\n" + report.dump())
        # Rank 0 waits for rank 1, which is not on another host: its helper
        # holds the other end of rank 0's connection.
        waits = report.of_kind("collective-wait")
        self.assertEqual(len(waits), 1, report.dump())
        self.assertFalse(waits[0]["details"]["on_other_hosts"], report.dump())
        self.assertIn(helper, [h["pid"] for h in waits[0]["details"]["local_peer_holders"]], report.dump())
        self.assertNotIn("other hosts", waits[0]["summary"], report.dump())
        self.assertTrue(job.alive(), job.stderr_tail())


if __name__ == "__main__":
    unittest.main()
