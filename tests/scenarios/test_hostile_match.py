"""Issue 34: another user's process must never crash hangtrace's --match.

A process of uid 65534 (nobody) whose command line is ~1.1 MiB -- python3 -c
CODE TAG, eleven arguments of 100 kB, train.py last -- waits in read() on a
pipe while hangtrace scans the process table with --match (std::regex once
overflowed its stack on such a line, exit 139, and the daemon crash-looped):

- `hangtrace --match P` for the patterns of the report (`python.*train\\.py`,
  `.*train\\.py`) and one only this process could match: each ends on its own
  (exit 0, 1 or 2, no signal); the match past the first MiB is not made, and
  that is said, naming the pid.
- A pattern whose match lies in the first MiB picks the process, and -v says
  it matched in that first MiB only.
- `hangtrace daemon --match '.*train\\.py'` keeps scanning (its scan counter
  rises) and serving /metrics, and says the cut once; with a pattern that
  matches, it tracks the process as a job.
- A pattern RE2 refuses (a backreference, a lookahead): one line, exit 1,
  from both.

This file also runs on the sanitized build (label scenario_sanitized,
scripts/sanitize.sh): the same checks under ASan and UBSan.
"""
import os
import re
import shutil
import subprocess
import tempfile
import unittest

from scenario_support import (PYTHON, SYS_READ, Daemon, ScenarioTestCase, Workload, hangtrace_bin,
                              requires_bpf_and_torch, run_hangtrace_args, wait_for, wait_until_blocked)

NOBODY = 65534
TAG = "ht-match-%d" % os.getpid()
# Blocks in read() on a pipe whose write end it holds: waits for ever, as nobody.
CODE = "import os; r, w = os.pipe(); print('READY', flush=True); os.read(r, 1)"
CUT = "its command line is longer than 1 MiB; --match searched its first 1 MiB only and did not match"
CUT_LINE = "pid %d: " + CUT                           # hangtrace's
DAEMON_CUT_LINE = "hangtrace daemon: pid %d (python3): " + CUT  # the daemon's, with the comm


def scans(metrics):
    m = re.search(r"^hangtrace_daemon_scans_total (\d+)", metrics, re.M)
    return int(m.group(1)) if m else None


@requires_bpf_and_torch
@unittest.skipUnless(shutil.which("setpriv"), "needs setpriv (util-linux) to run a process as another user")
class HostileMatch(ScenarioTestCase):
    @classmethod
    def setUpClass(cls):
        cls.target = Workload(["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups", PYTHON,
                               "-c", CODE, TAG] + [chr(ord("a") + i) * 100_000 for i in range(11)] + ["train.py"],
                              cwd="/")
        try:
            cls.target.wait_for_line("READY", timeout=60)
            cls.pid = cls.target.pid  # setpriv exec'd python3: the same process
            wait_until_blocked(cls.pid, main_syscalls=[SYS_READ], all_threads=False)
        except BaseException:
            cls.target.kill()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.target.kill()

    def setUp(self):
        super().setUp()
        with open("/proc/%d/cmdline" % self.pid, "rb") as f:
            cmdline = f.read()
        self.assertGreater(len(cmdline), 1 << 20)
        self.assertTrue(cmdline.endswith(b"train.py\0"), cmdline[-40:])
        self.assertEqual(os.stat("/proc/%d" % self.pid).st_uid, NOBODY)

    def assertEndedOnItsOwn(self, report):
        self.assertNoCrash(report)
        self.assertIn(report.returncode, (0, 1, 2), report.dump())

    def test_dot_star_patterns_end_and_say_the_cut(self):
        for pattern in (r"python.*train\.py", r".*train\.py", re.escape(TAG) + r".*train\.py"):
            report = run_hangtrace_args(["--match", pattern], timeout=300)
            self.assertEndedOnItsOwn(report)
            self.assertIn(CUT_LINE % self.pid, report.stderr, "%s\n%s" % (pattern, report.dump()))
        # Only this process could match the last: nothing was picked.
        self.assertEqual(report.returncode, 1, report.dump())
        self.assertIn("no process matches --match", report.stderr, report.dump())

    def test_a_match_in_the_first_mib_picks_the_process(self):
        report = run_hangtrace_args(["--match", "^" + re.escape(PYTHON) + " -c .* " + re.escape(TAG) + " a+ b+",
                                     "-v", "--json", "-"], timeout=300)
        self.assertEndedOnItsOwn(report)
        self.assertIn("pid %d picked: cmdline ~ '" % self.pid, report.stderr, report.dump())
        self.assertIn("' (in its first 1 MiB)", report.stderr, report.dump())
        self.assertIsNotNone(report.process(self.pid), report.dump())

    def test_the_daemon_keeps_scanning_and_serving(self):
        bundles = tempfile.mkdtemp(prefix="hangtrace-match-")
        self.addCleanup(shutil.rmtree, bundles, True)
        daemon = Daemon(bundles, "-v", "--match", r".*train\.py", "--scan-every", "0.2", "--hang-after", 600)
        self._workloads.append(daemon)
        daemon.wait_for_line(DAEMON_CUT_LINE % self.pid, timeout=60)
        first = scans(daemon.metrics())
        self.assertIsNotNone(first, daemon.stderr_tail())
        wait_for(lambda: (scans(daemon.metrics()) or 0) >= first + 10, timeout=60,
                 what="ten more scans\n" + daemon.stderr_tail())
        self.assertIsNone(daemon.proc.poll(), daemon.stderr_tail())
        said = [l for l in daemon.lines if l == DAEMON_CUT_LINE % self.pid]
        self.assertEqual(len(said), 1, "said once\n" + daemon.stderr_tail())

        matching = Daemon(bundles, "--match", re.escape(TAG) + " a+", "--scan-every", "0.2", "--hang-after", 600)
        self._workloads.append(matching)
        line = matching.wait_for_job(self.pid, timeout=60)
        self.assertIn("(in its first 1 MiB)", line, matching.stderr_tail())
        self.assertIn("hangtrace_tracked", matching.metrics())
        self.assertIsNone(matching.proc.poll(), matching.stderr_tail())

    def test_a_pattern_re2_refuses_is_one_line(self):
        for pattern, reason in ((r"(train)\1", "invalid escape sequence"), (r"train(?=\.py)", "invalid perl operator")):
            for argv in ([hangtrace_bin(), "--match", pattern],
                         [hangtrace_bin(), "daemon", "--match", pattern, "--metrics", "127.0.0.1:0"]):
                done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                      text=True, timeout=120)
                why = "%s: rc %d\n%s%s" % (argv, done.returncode, done.stdout, done.stderr)
                self.assertEqual(done.returncode, 1, why)
                lines = [l for l in done.stderr.splitlines() if l.strip()]
                self.assertEqual(len(lines), 1, why)
                self.assertIn("failed to compile --match '%s': %s" % (pattern, reason), lines[0], why)


if __name__ == "__main__":
    unittest.main()
