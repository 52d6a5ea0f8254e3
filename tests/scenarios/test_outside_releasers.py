"""The rows of docs/coverage.md whose releaser is a process outside the job:
an eventfd handed over by a server (SCM_RIGHTS), a unix-socket server that
accepted and went quiet, a FIFO whose writer sleeps (through select()), a
POSIX semaphore another user's process holds, a pidfd of a process that does
not exit, a signalfd no one signals, and an open() of a FIFO no writer opens
(not modelled yet: the floor's unknown). Each is exit 2 with the object named
and the process outside the job that could end the wait -- or, where the
kernel cannot say who (a semaphore records no owner, a signal no sender),
that process left unknown, never assumed. And an eventfd its server keeps
writing is no finding."""
import os
import shutil
import unittest

from scenario_support import (ScenarioTestCase, _syscall_numbers, parse_marker, requires_bpf_and_torch,
                              wait_until_blocked)

SYS = _syscall_numbers()
NOBODY = 65534


def as_nobody():
    return ["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups"] \
        if shutil.which("setpriv") else None


@requires_bpf_and_torch
class OutsideReleasers(ScenarioTestCase):
    def setUp(self):
        super().setUp()
        self.dir = self.shared_dir("hangtrace-outside-")

    def outside(self, marker, *args, wrapper=None):
        w = self.start("outside.py", *args, wrapper=wrapper)
        return w, parse_marker(w.wait_for_line("READY"))[marker][0]

    def job(self, *args):
        w = self.start("outside.py", *args)
        return w, parse_marker(w.wait_for_line("READY"))["main"][0]

    def assertStalled(self, main, nr, words, releaser=None):
        """hangtrace on a main thread blocked in `nr`: exit 2, a critical
        first finding whose summary and chain hold `words`, naming
        `releaser` (a peer: outside the job) among the processes that could
        end the wait."""
        wait_until_blocked(main, main_syscalls=[SYS[nr]], settle=1.2)
        report = self.hangtrace(main, "--stall-after", "1")
        first = self.assertStalledNaming(report, words, releaser)
        return report, first

    def test_an_eventfd_whose_server_sleeps(self):
        sock = os.path.join(self.dir, "efd.sock")
        _, server = self.outside("server", "serve-eventfd", sock, wrapper=as_nobody())
        _, main = self.job("take-eventfd", sock)
        self.assertStalled(main, "read", ["eventfd", "peer %d" % server, "does not read or write it"], server)

    def test_an_eventfd_its_server_keeps_writing_is_no_finding(self):
        sock = os.path.join(self.dir, "efd-live.sock")
        self.outside("server", "serve-eventfd", sock, "live")
        job, main = self.job("take-eventfd", sock)
        job.wait_for_line("GOT")
        report = self.hangtrace(main, "--stall-after", "1")
        self.assertEqual(report.returncode, 0, report.dump())
        self.assertNotIn("critical", [f.get("severity") for f in report.findings], report.dump())

    def test_a_unix_socket_server_that_accepted_and_went_quiet(self):
        sock = os.path.join(self.dir, "daemon.sock")
        _, server = self.outside("server", "serve-silent", sock)
        _, main = self.job("ask", sock)
        self.assertStalled(main, "recvfrom", ["peer %d" % server], server)

    def test_select_on_a_fifo_whose_writer_sleeps(self):
        fifo = os.path.join(self.dir, "feed.fifo")
        os.mkfifo(fifo, 0o666)
        os.chmod(fifo, 0o666)
        writer_w = self.start("outside.py", "hold-fifo", fifo, wrapper=as_nobody())
        _, main = self.job("select-fifo", fifo)
        writer = parse_marker(writer_w.wait_for_line("READY"))["writer"][0]
        self.assertStalled(main, "pselect6", ["FIFO %s" % fifo, "peer %d" % writer], writer)

    def test_a_semaphore_another_user_holds_is_held_by_someone_unknown(self):
        name = "/hangtrace-test-%d" % os.getpid()
        self.addCleanup(lambda: os.path.exists("/dev/shm/sem." + name[1:]) and os.unlink("/dev/shm/sem." + name[1:]))
        _, holder = self.outside("holder", "hold-sem", name, wrapper=as_nobody())
        _, main = self.job("take-sem", name)
        # The other user's process that maps it is found and named as who
        # could post it -- but a semaphore records no owner: which process
        # holds it is unknown, never "certain", never "nobody".
        report, first = self.assertStalled(main, "futex", ["sem." + name[1:], "peer %d" % holder], holder)
        self.assertEqual(first.get("kind"), "no-progress", report.dump())
        self.assertIn("records no owner", first.get("summary", ""), report.dump())
        self.assertNotIn("certain", [f.get("confidence") for f in report.findings], report.dump())
        self.assertIn("kill %d" % holder, " ".join(first.get("advice", [])), report.dump())

    def test_a_pidfd_of_a_process_that_does_not_exit(self):
        _, sleeper = self.outside("sleeper", "sleeper", wrapper=as_nobody())
        _, main = self.job("wait-exit", sleeper)
        self.assertStalled(main, "poll", ["the exit of process %d" % sleeper, "peer %d" % sleeper], sleeper)

    def test_open_of_a_fifo_no_writer_opens(self):
        # Not modelled yet (the path is in the caller's memory): the floor
        # still calls it stuck, its releaser unknown -- never "no hang".
        fifo = os.path.join(self.dir, "never-opened.fifo")
        os.mkfifo(fifo, 0o666)
        _, main = self.job("open-fifo", fifo)
        self.assertStalled(main, "openat", ["in openat", "unknown"])

    def test_a_signalfd_nobody_signals(self):
        _, main = self.job("signalfd")
        report, first = self.assertStalled(main, "read", ["signalfd for SIGUSR1", "unknown"])
        self.assertIn("waits for a signal", " ".join(first.get("advice", [])), report.dump())


if __name__ == "__main__":
    unittest.main()
