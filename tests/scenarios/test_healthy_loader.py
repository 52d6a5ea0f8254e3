"""The control case: a DataLoader that keeps making progress is not a hang."""
import unittest

from scenario_support import ScenarioTestCase, parse_marker, requires_bpf_and_torch


@requires_bpf_and_torch
class HealthyLoader(ScenarioTestCase):
    def test_progressing_job_is_not_called_hung(self):
        job = self.start("healthy_loader.py", "--seconds", "600")
        marker = parse_marker(job.wait_for_line("READY"))
        main, workers = marker["main"][0], marker["workers"]
        self.assertEqual(len(workers), 2, marker)
        for attempt in range(3):
            report = self.hangtrace(main)
            critical = [f for f in report.findings if f.get("severity") == "critical"]
            self.assertEqual(report.returncode, 0, "run %d\n%s" % (attempt + 1, report.dump()))
            self.assertFalse(critical, "run %d\n%s" % (attempt + 1, report.dump()))
            self.assertNotEqual(report.json["verdict"]["status"], "hang", report.dump())
            # Looking must not stop it: a new STEP line arrives after each run.
            job.wait_for_line("STEP", timeout=60)
            self.assertTrue(job.alive(), job.stderr_tail())


if __name__ == "__main__":
    unittest.main()
