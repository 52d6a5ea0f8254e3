"""What a user may hand hangtrace by mistake: a clear line each, never a crash.

The live process here is an unrelated `sleep` started from a shell -- a job
of its own, with nothing hung. A dead pid is one of a process that exited
and was reaped. hangtrace's own pid comes from `exec hangtrace --pid $$`,
kthreadd is pid 2. Each bad pid gets one stderr line that names it and is
skipped; while a live pid is left the run goes on (exit 0: the sleep does not
hang); with nothing left, or an argument that is no pid, exit 1.
"""
import subprocess
import unittest

from scenario_support import (SYS_CLOCK_NANOSLEEP, ScenarioTestCase, requires_bpf_and_torch,
                              run_hangtrace_args, run_hangtrace_line, wait_for_child,
                              wait_until_blocked)

KTHREADD = 2


def dead_pid():
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@requires_bpf_and_torch
class FrontDoorBadInput(ScenarioTestCase):
    def setUp(self):
        super().setUp()
        sleeper = self.start_argv(["sleep", "1000"], shell=True)
        self.live = wait_for_child(sleeper.pid, "sleep")
        wait_until_blocked(self.live, main_syscalls=[SYS_CLOCK_NANOSLEEP])

    def assertOneLineEach(self, report, pids):
        for pid in pids:
            lines = report.stderr_lines_naming(pid)
            self.assertEqual(len(lines), 1, "want one stderr line naming %s\n%s" % (pid, report.dump()))

    def assertSleepDiagnosed(self, report):
        """The sleep alone, as its own job: one report, no hang, exit 0."""
        self.assertNoCrash(report)
        self.assertEqual(report.returncode, 0, report.dump())
        job = self.one_job(report)
        self.assertEqual(job.get("root_pid"), self.live, report.dump())
        self.assertNotEqual(report.json["verdict"]["status"], "hang", report.dump())
        self.assertIsNotNone(report.process(self.live), report.dump())

    def assertNothingLeft(self, report, pids):
        self.assertNoCrash(report)
        self.assertEqual(report.returncode, 1, report.dump())
        self.assertEqual(report.stdout.strip(), "", "no report without a process\n" + report.dump())
        self.assertOneLineEach(report, pids)

    def test_an_unrelated_sleep_is_its_own_job(self):
        report = run_hangtrace_args(["--pid", self.live, "--json", "-"])
        self.assertSleepDiagnosed(report)
        self.assertGiven(report, self.one_job(report), [self.live])

    def test_a_dead_pid_among_live_ones_is_named_and_skipped(self):
        dead = dead_pid()
        for args in (["--pid", self.live, dead], ["-p", "%d,%d" % (dead, self.live)]):
            with self.subTest(args=args):
                report = run_hangtrace_args(args + ["--json", "-"])
                self.assertSleepDiagnosed(report)
                self.assertOneLineEach(report, [dead])

    def test_only_a_dead_pid(self):
        dead = dead_pid()
        self.assertNothingLeft(run_hangtrace_args(["--pid", dead, "--json", "-"]), [dead])

    def test_hangtraces_own_pid(self):
        report = run_hangtrace_line('exec hangtrace --pid $$ --json -')
        self.assertNothingLeft(report, [report.pid])

    def test_a_kernel_thread(self):
        self.assertNothingLeft(run_hangtrace_args(["--pid", KTHREADD, "--json", "-"]), [KTHREADD])

    def test_all_of_them_with_one_live_pid(self):
        dead = dead_pid()
        report = run_hangtrace_line('exec hangtrace --pid $$ "$@" --json -', KTHREADD, dead, self.live)
        self.assertSleepDiagnosed(report)
        self.assertOneLineEach(report, [report.pid, KTHREADD, dead])

    def test_arguments_that_are_no_pid(self):
        for word in ("abc", "-5", "1,,2", "12abc", "0", "99999999999999999999"):
            with self.subTest(word=word):
                report = run_hangtrace_args(["--pid", word, "--json", "-"])
                self.assertNoCrash(report)
                self.assertEqual(report.returncode, 1, report.dump())
                self.assertEqual(report.stdout.strip(), "", report.dump())
                # (CLI11's "Run with --help for more information." may follow.)
                lines = [l for l in report.stderr.splitlines() if l.strip() and not l.startswith("Run with --help")]
                self.assertEqual(len(lines), 1, "want one line, no more\n" + report.dump())
                self.assertEqual(report.stderr_lines_naming(word), lines, report.dump())
        # A good pid next to a bad word is still a usage error: nothing runs.
        report = run_hangtrace_args(["--pid", self.live, "abc", "--json", "-"])
        self.assertNoCrash(report)
        self.assertEqual(report.returncode, 1, report.dump())
        self.assertEqual(report.stdout.strip(), "", report.dump())

    def test_no_training_job_matches(self):
        # [b]: the pattern does not match its own text in hangtrace's command line.
        report = run_hangtrace_args(["--match", "no-such-jo[b]-%d" % self.live, "--json", "-"])
        self.assertNoCrash(report)
        self.assertEqual(report.returncode, 1, report.dump())
        self.assertEqual(report.stdout.strip(), "", report.dump())
        lines = [l for l in report.stderr.splitlines() if l.strip()]
        self.assertEqual(len(lines), 1, "one clear line\n" + report.dump())


if __name__ == "__main__":
    unittest.main()
