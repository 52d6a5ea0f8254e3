"""A real torchrun job: `python3 -m torch.distributed.run --nproc_per_node 2`.

torchrun_rank_hang.py: two gloo ranks, each with a DataLoader of two forked
workers; rank 1 joins a checkpoint-upload thread that never ends while rank 0
waits for it in all_reduce. The launcher, the ranks and their workers are one
job whichever of their pids hangtrace is given -- or none at all: one report,
rooted at the launcher, the ranks grouped with their workers, and the
collective-wait finding test_collective_wait.py expects: rank 0 waits, rank 1
is absent.

torch 1.13 on Python 3.11: torchrun's default --redirects/--tee "0" parse to
None (a zero IntFlag is no longer iterated) and the agent dies before any rank
starts; 2 (stderr to a log file, teed to the console) is a value that parses,
and leaves stdout -- where the ranks print their markers -- untouched.
"""
import os
import re
import shutil
import tempfile
import unittest

from scenario_support import (PYTHON, SYS_FUTEX, ScenarioTestCase, Workload, parse_marker, free_port,
                              requires_bpf_and_torch, run_hangtrace_args, under_shell, wait_until_blocked,
                              workload)

TAG = "ht-torchrun-%d" % os.getpid()
# The collective wait counts as stalled (critical: exit 2) after 1 s; the
# ranks are seen blocked for longer than that before any run.
STALLED = ["--stall-after", "1"]


@requires_bpf_and_torch
class TorchrunJob(ScenarioTestCase):
    @classmethod
    def setUpClass(cls):
        cls.log_dir = tempfile.mkdtemp(prefix="hangtrace-torchrun-")
        argv = [PYTHON, "-u", "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
                "--master_addr", "127.0.0.1", "--master_port", free_port(),
                "--redirects", "2", "--tee", "2", "--log_dir", cls.log_dir,
                workload("torchrun_rank_hang.py"), TAG]
        cls.job = Workload(*under_shell(argv))
        try:
            ranks = [parse_marker(cls.job.wait_for_line("RANK", timeout=180)) for _ in range(2)]
            cls.ranks = {m["rank"][0]: m for m in ranks}
            cls.launcher = cls.ranks[0]["ppid"][0]
            cls.rank0, cls.rank1 = cls.ranks[0]["pid"][0], cls.ranks[1]["pid"][0]
            # rank 0 in all_reduce (a futex wait for gloo's thread), rank 1
            # in Thread.join (futex): parked, each for over a second.
            wait_until_blocked([cls.rank0, cls.rank1], main_syscalls=[SYS_FUTEX], all_threads=False,
                               settle=1.5)
        except BaseException as e:
            why = cls.why_not_started()
            cls.tearDownClass()
            raise AssertionError("%s\n%s" % (e, why)) from e

    @classmethod
    def why_not_started(cls):
        """What the job was doing when it did not reach its markers: the
        ranks' logs and hangtrace's own report on it (text)."""
        out = []
        for root, _, files in os.walk(cls.log_dir):
            for name in files:
                with open(os.path.join(root, name), errors="replace") as f:
                    out.append("--- %s ---\n%s" % (name, f.read()[-4000:]))
        report = run_hangtrace_args(["--pid", cls.job.pid, "--stall-after", "1"], timeout=120)
        out.append("--- hangtrace on the job (exit %d) ---\n%s%s" % (
            report.returncode, report.stdout[-12000:], report.stderr[-2000:]))
        return "\n".join(out)

    @classmethod
    def tearDownClass(cls):
        cls.job.kill()
        shutil.rmtree(cls.log_dir, ignore_errors=True)

    def setUp(self):
        super().setUp()
        self.assertTrue(self.job.alive(), self.job.stderr_tail())

    def test_the_launcher_is_torchruns_child_of_the_shell(self):
        # Precondition: the launcher is the process the shell started, and
        # both ranks are its children (the markers' ppid).
        self.assertEqual(self.ranks[1]["ppid"][0], self.launcher, self.ranks)
        with open("/proc/%d/cmdline" % self.launcher) as f:
            self.assertIn("torch.distributed.run", f.read().split("\0"))

    def assertTheJob(self, report):
        """The torchrun job, once: rooted at the launcher, ranks 0 and 1 each
        with its two workers, rank 1 named absent from rank 0's all_reduce."""
        self.assertNoCrash(report)
        self.assertEqual(report.returncode, 2, report.dump())
        job = report.json.get("job") if isinstance(report.json, dict) else None
        self.assertIsInstance(job, dict, "no job block\n" + report.dump())
        self.assertEqual(job.get("root_pid"), self.launcher, report.dump())
        self.assertEqual(job.get("launcher_pid"), self.launcher, report.dump())
        ranks = sorted(job.get("ranks") or [], key=lambda r: r.get("rank", -1))
        self.assertEqual([r.get("rank") for r in ranks], [0, 1], report.dump())
        for r in ranks:
            want = self.ranks[r["rank"]]
            self.assertEqual(r.get("pid"), want["pid"][0], report.dump())
            self.assertEqual(r.get("local_rank"), r["rank"], report.dump())
            self.assertEqual(r.get("world_size"), 2, report.dump())
            self.assertEqual(sorted(r.get("workers") or []), sorted(want["workers"]), report.dump())

        found = report.of_kind("collective-wait")
        self.assertEqual(len(found), 1, "expected one collective-wait finding\n" + report.dump())
        details = found[0].get("details") or {}
        self.assertEqual(details.get("collective"), "all_reduce", report.dump())
        self.assertEqual(details.get("backend"), "gloo", report.dump())
        self.assertEqual([(w.get("pid"), w.get("rank")) for w in details.get("waiting") or []],
                         [(self.rank0, 0)], report.dump())
        self.assertEqual([(a.get("pid"), a.get("rank")) for a in details.get("absent") or []],
                         [(self.rank1, 1)], report.dump())
        self.assertIn("rank 1", found[0].get("summary") or "", report.dump())
        return job

    def roles(self, report, job, pid):
        given = self.assertGiven(report, job, [pid])
        return given[pid].lower()

    def test_the_launchers_pid(self):
        report = run_hangtrace_args(["--pid", self.launcher, "--json", "-"] + STALLED)
        job = self.assertTheJob(report)
        self.assertIn("launcher", self.roles(report, job, self.launcher), report.dump())

    def test_rank_0s_pid(self):
        report = run_hangtrace_args(["--pid", self.rank0, "--json", "-"] + STALLED)
        job = self.assertTheJob(report)
        self.assertIn("rank 0", self.roles(report, job, self.rank0), report.dump())
        self.assertRoleLine(report, r"pid %d is rank 0 \(local rank 0\) of job %d" % (self.rank0, self.launcher))

    def test_a_worker_of_rank_1(self):
        worker = self.ranks[1]["workers"][0]
        report = run_hangtrace_args(["--pid", worker, "--json", "-"] + STALLED)
        job = self.assertTheJob(report)
        self.assertIn("worker", self.roles(report, job, worker), report.dump())
        self.assertRoleLine(report, r"pid %d is a (DataLoader )?worker of rank 1 of job %d" % (worker, self.launcher))

    def test_every_pid_of_the_job_at_once(self):
        everyone = [self.launcher] + [p for m in self.ranks.values() for p in m["pid"] + m["workers"]]
        report = run_hangtrace_args(["-p", ",".join(map(str, everyone)), "--json", "-"] + STALLED)
        job = self.assertTheJob(report)
        self.assertGiven(report, job, everyone)

    def test_no_pid_finds_the_job_among_the_hosts(self):
        # Other training jobs may be on the host (the test runner itself maps
        # libtorch): this one must be among the reports, once.
        report = run_hangtrace_args(["--json", "-"] + STALLED)
        self.assertNoCrash(report)
        self.assertEqual(report.returncode, 2, report.dump())
        mine = [r for r in report.reports if ((r.json or {}).get("job") or {}).get("root_pid") == self.launcher]
        self.assertEqual(len(mine), 1, "the torchrun job is not reported once\n" + report.dump())
        self.assertTheJob(mine[0])
        self.assertTrue([l for l in report.stderr.splitlines() if re.search(r"\b%d\b" % self.launcher, l)],
                        "stderr does not say it found job %d\n%s" % (self.launcher, report.dump()))

    def test_match_selects_the_job_by_its_command_line(self):
        # [h]: the pattern does not match its own text in hangtrace's command line.
        report = run_hangtrace_args(["--match", "[h]" + TAG[1:], "--json", "-"] + STALLED)
        self.assertIsInstance(report.json, dict, "one job matches: one report\n" + report.dump())
        self.assertTheJob(report)


if __name__ == "__main__":
    unittest.main()
