"""Waits whose releaser is outside the job: a file lock another process
holds (flock, POSIX, OFD; the flock's holder another user), the job's stdout
into a pipe whose reader stopped reading (asleep elsewhere, SIGSTOPped), and
pause() for a signal nobody sends, and loops that poll (for a lock another
process holds; for a file that never appears). Each is a finding that names
the object and the process that could end the wait -- critical where that
process is known not to move -- never "no hang found"."""
import os
import shutil
import signal
import unittest

from scenario_support import (chain_text, PYTHON, ScenarioTestCase, _syscall_numbers, parse_marker, proc_state,
                              requires_bpf_and_torch, run_hangtrace_args, wait_for, wait_until_blocked, workload)

SYS = _syscall_numbers()
NOBODY = 65534


@requires_bpf_and_torch
class WaitReleasers(ScenarioTestCase):
    def setUp(self):
        super().setUp()
        self.dir = self.shared_dir("hangtrace-releasers-")

    def assertStalledOn(self, report, main, releaser, words):
        first = self.assertStalledNaming(report, words, releaser)
        self.assertIn(main, first.get("tids", []) + (first.get("details") or {}).get("waiting_tids", []),
                      report.dump())
        return first

    def test_a_file_lock_held_by_another_process(self):
        for kind, nr in (("flock", "flock"), ("posix", "fcntl"), ("ofd", "fcntl")):
            with self.subTest(kind=kind):
                path = os.path.join(self.dir, "cache-%s.lock" % kind)
                with open(path, "w"):
                    pass
                os.chmod(path, 0o666)
                # The holder is not of the job -- another user's, for flock.
                wrapper = ["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups"] \
                    if kind == "flock" and shutil.which("setpriv") else None
                holder_w = self.start("releasers.py", "lock-hold", kind, path, wrapper=wrapper)
                holder = parse_marker(holder_w.wait_for_line("READY"))["holder"][0]
                job = self.start("releasers.py", "lock-take", kind, path)
                main = parse_marker(job.wait_for_line("READY"))["main"][0]
                wait_until_blocked(main, main_syscalls=[SYS[nr]], settle=1.2)
                report = self.hangtrace(main, "--stall-after", "1")
                first = self.assertStalledOn(report, main, holder, [path, "peer %d" % holder])
                self.assertEqual(first.get("kind"), "no-progress", report.dump())
                self.assertIn("has not moved for", first.get("summary", ""), report.dump())
                self.assertIn("kill %d" % holder, " ".join(first.get("advice", [])), report.dump())
                holder_w.kill()
                job.kill()

    def test_a_file_lock_held_by_another_process_under_timeout(self):
        # `timeout 600 python3 ...`, both pids given, as `--pid $(pgrep -f
        # SCRIPT)` gives them (timeout's command line names the script too):
        # one job whose root is timeout; timeout's wait for SIGCHLD hands the
        # job to its child, whose flock wait is the finding.
        path = os.path.join(self.dir, "timeout.lock")
        holder_w = self.start("releasers.py", "lock-hold", "flock", path)
        holder = parse_marker(holder_w.wait_for_line("READY"))["holder"][0]
        job = self.start("releasers.py", "lock-take", "flock", path, wrapper=["timeout", "600"])
        main = parse_marker(job.wait_for_line("READY"))["main"][0]
        self.assertNotEqual(main, job.pid, "precondition: timeout forks its command")
        wait_until_blocked(main, main_syscalls=[SYS["flock"]], settle=1.2)
        report = run_hangtrace_args(["--pid", job.pid, main, "--json", "-", "--stall-after", "1"])
        first = self.assertStalledOn(report, main, holder, [path, "peer %d" % holder])
        self.assertEqual(first.get("kind"), "no-progress", report.dump())
        self.assertIn("kill %d" % holder, " ".join(first.get("advice", [])), report.dump())
        self.assertEqual(report.json["job"]["root_pid"], job.pid, "timeout is the job's root\n" + report.dump())
        self.assertEqual(sorted(g["pid"] for g in report.json["job"]["given"]), sorted([job.pid, main]),
                         "one job for both pids\n" + report.dump())
        self.assertFalse([f for f in report.findings if job.pid in f.get("tids", [])],
                         "timeout's own wait is no finding\n" + report.dump())

    def test_a_file_lock_held_outside_under_mp_spawn(self):
        # Another launcher: torch.multiprocessing.spawn's parent joins its
        # processes (poll on their sentinels); each waits for the lock.
        path = os.path.join(self.dir, "spawn.lock")
        holder_w = self.start("releasers.py", "lock-hold", "flock", path)
        holder = parse_marker(holder_w.wait_for_line("READY"))["holder"][0]
        job = self.start("releasers.py", "spawn-lock-take", "flock", path)
        marker = parse_marker(job.wait_for_line("READY", timeout=120))
        main, children = marker["main"][0], marker["children"]
        wait_until_blocked(children, main_syscalls=[SYS["flock"]], settle=1.2)
        report = self.hangtrace(main, "--stall-after", "1")
        self.assertEqual(report.returncode, 2, report.dump())
        first = report.findings[0]
        self.assertEqual(first.get("severity"), "critical", report.dump())
        text = first.get("summary", "") + "\n" + chain_text(first)
        self.assertIn(path, text, report.dump())
        self.assertIn("peer %d" % holder, text, report.dump())
        advice = " ".join(first.get("advice", []))
        self.assertIn("kill %d" % holder, advice, report.dump())
        # The sentinel pipes of spawn's join are not a log shipper to restart.
        self.assertNotIn("drain", advice, report.dump())

    def test_a_lock_polled_for_held_by_another_process(self):
        # The lock-file libraries' way: LOCK_NB, sleep, try again.
        path = os.path.join(self.dir, "polled.lock")
        holder_w = self.start("releasers.py", "lock-hold", "flock", path)
        holder = parse_marker(holder_w.wait_for_line("READY"))["holder"][0]
        job = self.start("releasers.py", "lock-poll", "flock", path)
        main = parse_marker(job.wait_for_line("READY"))["main"][0]
        wait_until_blocked(holder, main_syscalls=[SYS["clock_nanosleep"]], settle=1.2)
        report = self.hangtrace(main, "--stall-after", "1")
        first = self.assertStalledOn(report, main, holder, [path, "peer %d" % holder, "polls"])
        self.assertEqual(first.get("kind"), "no-progress", report.dump())
        self.assertTrue((first.get("details") or {}).get("polls"), report.dump())
        self.assertIn("releasers.py:", first.get("summary", ""), report.dump())
        self.assertIn("kill %d" % holder, " ".join(first.get("advice", [])), report.dump())

    def test_a_loop_polling_for_a_file_that_never_appears(self):
        # Nothing the kernel shows: a warning that names the loop, never "no hang found".
        job = self.start("releasers.py", "wait-file", os.path.join(self.dir, "never"))
        main = parse_marker(job.wait_for_line("READY"))["main"][0]
        report = self.hangtrace(main, "--stall-after", "1")
        self.assertEqual(report.returncode, 0, report.dump())
        self.assertEqual(report.json["verdict"]["status"], "suspect", report.dump())
        first = report.findings[0]
        self.assertEqual((first.get("kind"), first.get("severity")), ("no-progress", "warning"), report.dump())
        self.assertIn("polls in", first.get("summary", ""), report.dump())
        self.assertIn("releasers.py:", first.get("summary", ""), report.dump())
        self.assertIn("every ~", first.get("summary", ""), report.dump())

    def test_stdout_into_a_pipe_whose_reader_sleeps(self):
        pipeline = "%s -u %s write-stdout | %s -u %s read-stdin sleep" % (
            PYTHON, workload("releasers.py"), PYTHON, workload("releasers.py"))
        w = self.start_argv(["bash", "-c", pipeline])
        marker = parse_marker(w.wait_for_line("READY"))
        main, reader = marker["main"][0], marker["reader"][0]
        wait_until_blocked(main, main_syscalls=[SYS["write"]], settle=1.2)
        report = self.hangtrace(main, "--stall-after", "1")
        first = self.assertStalledOn(report, main, reader, ["stdout", "pipe:[", "peer %d" % reader,
                                                            "does not read or write it"])
        self.assertEqual(first.get("kind"), "no-progress", report.dump())
        self.assertIn("pipe is full", chain_text(first), report.dump())
        self.assertIn("send the job's output to a file", " ".join(first.get("advice", [])), report.dump())

    def test_stdout_into_a_pipe_whose_reader_is_stopped(self):
        pipeline = "%s -u %s write-stdout | %s -u %s read-stdin slow" % (
            PYTHON, workload("releasers.py"), PYTHON, workload("releasers.py"))
        w = self.start_argv(["bash", "-c", pipeline])
        marker = parse_marker(w.wait_for_line("READY"))
        main, reader = marker["main"][0], marker["reader"][0]
        os.kill(reader, signal.SIGSTOP)
        self.addCleanup(lambda: os.kill(reader, signal.SIGCONT) if proc_state(reader) else None)
        wait_for(lambda: proc_state(reader) == "T", 30, "the reader to stop")
        wait_until_blocked(main, main_syscalls=[SYS["write"]], settle=1.2)
        report = self.hangtrace(main, "--stall-after", "1")
        first = self.assertStalledOn(report, main, reader, ["peer %d" % reader])
        self.assertEqual(first.get("kind"), "stopped", report.dump())
        self.assertIn("kill -CONT %d" % reader, " ".join(first.get("advice", [])), report.dump())

    def test_pause_for_a_signal_nobody_sends(self):
        job = self.start("releasers.py", "pause")
        main = parse_marker(job.wait_for_line("READY"))["main"][0]
        wait_until_blocked(main, main_syscalls=[SYS["pause"]], settle=1.2)
        report = self.hangtrace(main, "--stall-after", "1")
        self.assertEqual(report.returncode, 2, report.dump())
        first = report.findings[0]
        self.assertEqual(first.get("kind"), "no-progress", report.dump())
        self.assertIn("waits for a signal", first.get("summary", ""), report.dump())
        self.assertIn("unknown", first.get("summary", ""), report.dump())
        # Nobody to name: the fix is to find who should send it.
        self.assertIn("find which process should", " ".join(first.get("advice", [])), report.dump())


if __name__ == "__main__":
    unittest.main()
