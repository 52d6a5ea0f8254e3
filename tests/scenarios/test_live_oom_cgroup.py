"""Live: a DataLoader worker is OOM-killed under a memory cgroup limit.

The whole job runs in a fresh cgroup v1 memory group limited to 512 MiB (the
launcher moves itself in, then execs the job), under `hangtrace -- COMMAND`.
A worker's never-evicted sample cache grows until the cgroup's OOM killer
picks it. PyTorch only says "DataLoader worker (pid(s) N) exited
unexpectedly"; the report must name the victim, the OOM killer, the cgroup and
its limit.
"""
import os
import re
import unittest

from scenario_support import (PYTHON, MemoryCgroup, ScenarioTestCase, killed_findings, parse_marker,
                              requires_bpf_and_torch, requires_memcg_v1, workload)

LIMIT = 512 * 1024 * 1024
SIGKILL = 9


@requires_bpf_and_torch
@requires_memcg_v1
class LiveOomCgroup(ScenarioTestCase):
    def test_oom_killed_worker_names_cgroup_and_limit(self):
        memcg = MemoryCgroup(self, "hangtrace-scn-%d" % os.getpid(), LIMIT)
        job = self.launch(memcg.enter + [PYTHON, "-u", workload("dataloader_worker_oom.py")])
        marker = parse_marker(job.wait_for_line("START", timeout=120))
        main, workers = marker["main"][0], marker["workers"]
        job.workload.also_kill += [main] + workers
        victim = workers[0]
        error = job.wait_for_line("LOADER-ERROR", timeout=120)
        # PyTorch: "exited unexpectedly" or "is killed by signal: Killed" -- a
        # worker pid, no word of memory.
        self.assertTrue(re.search(r"\b%d\b" % victim, error), "precondition: %s" % error)
        self.assertEqual(memcg.oom_kills(), 1, "precondition: one OOM kill in the cgroup")

        report = self.launched_report(job)     # the job exits (3); hangtrace reports then
        self.assertEqual(report.returncode, 2, "a killed worker is critical\n" + report.dump())
        d = self.assertWorkerKilled(report, victim)
        self.assertEqual(d.get("cause"), "oom-killer", report.dump())
        self.assertEqual(d.get("signal"), SIGKILL, report.dump())
        self.assertIn("hangtrace-scn-%d" % os.getpid(), d.get("cgroup") or "", report.dump())
        self.assertEqual(d.get("limit_bytes"), LIMIT, report.dump())
        # The OOM killer took the worker, not the main process (which then
        # exited with status 3 on its own).
        self.assertFalse([g for g in killed_findings(report, main)
                          if (g.get("details") or {}).get("cause") == "oom-killer"], report.dump())


if __name__ == "__main__":
    unittest.main()
