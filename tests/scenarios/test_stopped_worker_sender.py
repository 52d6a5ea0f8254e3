"""hangtrace launches a job and traces it live; the test stops the job's
worker with SIGSTOP from outside and main waits on it. The report comes on
--hang-after: the stopped finding leads and names the signal and its sender
(this test's process), which only the live window can know.
"""
import os
import signal
import unittest

from scenario_support import PYTHON, ScenarioTestCase, parse_marker, proc_state, requires_bpf_and_torch, wait_for, workload


@requires_bpf_and_torch
class StoppedWorkerSender(ScenarioTestCase):
    def test_the_stop_signal_and_its_sender_are_named(self):
        job = self.launch([PYTHON, "-u", workload("stopped_worker.py")], "--hang-after", "2")
        marker = parse_marker(job.wait_for_line("READY"))
        main, worker = marker["main"][0], marker["worker"][0]
        os.kill(worker, signal.SIGSTOP)
        wait_for(lambda: proc_state(worker) == "T", 30, "the worker to stop")
        report = self.launched_report(job)
        self.assertEqual(report.returncode, 2, report.dump())
        first = report.json["findings"][0]
        self.assertEqual(first.get("kind"), "stopped", report.dump())
        self.assertEqual(first.get("pids"), [worker], report.dump())
        self.assertEqual(first["details"].get("signal"), "SIGSTOP", report.dump())
        self.assertEqual(first["details"].get("sender_pid"), os.getpid(), report.dump())
        self.assertIn("stopped by SIGSTOP from %d" % os.getpid(), first.get("summary", ""), report.dump())
        self.assertIn(main, first["details"].get("waiting_tids") or [], report.dump())


if __name__ == "__main__":
    unittest.main()
