"""The user's own line, `hangtrace --pid $(pgrep -f NAME)`, on a DataLoader job.

The job (fork_inherited_lock.py: main + 2 forked workers, which share main's
command line) runs from a shell with a unique tag among its arguments, so
`pgrep -f TAG` prints exactly main's and its workers' pids -- what `pgrep -f
train` prints on a user's host. Whichever of the job's pids hangtrace is
given, and however they are spelled, it diagnoses the one job: one report,
rooted at main, with the orphaned-lock finding test_fork_inherited_lock.py
expects from `--pid MAIN`.
"""
import os
import subprocess
import unittest

from scenario_support import (PYTHON, SYS_FUTEX, SYS_POLL, ScenarioTestCase, Workload, parse_marker,
                              requires_bpf_and_torch, run_hangtrace_args, run_hangtrace_line, under_shell,
                              wait_until_blocked, workload)

TAG = "ht-front-door-%d" % os.getpid()


@requires_bpf_and_torch
class FrontDoorPids(ScenarioTestCase):
    @classmethod
    def setUpClass(cls):
        cls.job = Workload(*under_shell([PYTHON, "-u", workload("fork_inherited_lock.py"), TAG]))
        try:
            marker = parse_marker(cls.job.wait_for_line("READY"))
            cls.main, cls.workers = marker["main"][0], marker["workers"]
            wait_until_blocked(cls.workers, main_syscalls=[SYS_FUTEX])
            wait_until_blocked(cls.main, main_syscalls=[SYS_POLL])
        except BaseException:
            cls.job.kill()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.job.kill()

    def setUp(self):
        super().setUp()
        self.assertTrue(self.job.alive(), self.job.stderr_tail())
        self.everyone = [self.main] + self.workers

    def assertTheJob(self, report, given):
        """One report, of the job rooted at main, with what
        test_fork_inherited_lock.py expects of `--pid MAIN`, listing `given`;
        returns {pid: role} of job.given."""
        self.assertNoCrash(report)
        self.assertOrphanedLock(report, self.workers)
        for pid in self.everyone:
            self.assertIsNotNone(report.process(pid), "pid %d missing\n%s" % (pid, report.dump()))
        job = self.one_job(report)
        self.assertEqual(job.get("root_pid"), self.main, report.dump())
        self.assertIsNone(job.get("launcher_pid"), "no launcher here\n" + report.dump())
        return self.assertGiven(report, job, given)

    def test_pgrep_line_diagnoses_the_job_once(self):
        # Precondition: pgrep prints the job's pids and nothing else.
        found = subprocess.run(["pgrep", "-f", TAG], capture_output=True, text=True).stdout.split()
        self.assertEqual(sorted(int(p) for p in found), sorted(self.everyone), "precondition: pgrep -f")

        report = run_hangtrace_line('hangtrace --pid $(pgrep -f "$TAG") --json -', env={"TAG": TAG})
        self.assertTheJob(report, self.everyone)
        # main and its workers are one job: no line saying they were merged
        # into different jobs, and every worker line names main's job.
        for worker in self.workers:
            self.assertRoleLine(report, r"pid %d is .*worker.* of job %d" % (worker, self.main))

    def test_a_workers_pid_alone_diagnoses_the_whole_job(self):
        worker = self.workers[1]
        report = run_hangtrace_args(["--pid", worker, "--json", "-"])
        roles = self.assertTheJob(report, [worker])
        self.assertIn("worker", roles[worker].lower(), report.dump())
        self.assertRoleLine(report, r"pid %d is a DataLoader worker of job %d" % (worker, self.main))

    def test_every_spelling_of_several_pids_is_the_same_job(self):
        a, b, c = (str(p) for p in self.everyone)
        for args in (["--pid", a, b, c], ["-p", "%s,%s,%s" % (a, b, c)], ["--pid", a, "--pid", b, "--pid", c],
                     ["-p", c, "-p", "%s,%s" % (a, b)]):
            with self.subTest(args=" ".join(args)):
                report = run_hangtrace_args(args + ["--json", "-"])
                self.assertTheJob(report, self.everyone)

    def test_host_processes_have_one_pid_and_the_keys(self):
        report = run_hangtrace_args(["--pid", self.main, "--json", "-"])
        self.assertTheJob(report, [self.main])
        for pid in self.everyone:
            entry = report.process(pid)
            self.assertEqual(entry.get("ns_pids"), [pid], "outside a container: one pid\n" + report.dump())
            self.assertIn("container_id", entry, report.dump())


if __name__ == "__main__":
    unittest.main()
