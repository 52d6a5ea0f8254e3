"""Python stacks read from outside a PyTorch job: a DataLoader worker stuck in
the dataset's __getitem__ shows that frame, at that line, in the report."""
import unittest

from scenario_support import (SYS_FUTEX, ScenarioTestCase, parse_marker, requires_bpf_and_torch,
                              wait_until_blocked)


@requires_bpf_and_torch
class PythonStacks(ScenarioTestCase):
    def test_worker_stuck_in_getitem_shows_the_frame(self):
        job = self.start("dataloader_blocked_getitem.py")
        marker = parse_marker(job.wait_for_line("READY"))
        main, workers, line = marker["main"][0], marker["workers"], marker["getitem_line"][0]
        self.assertEqual(len(workers), 2, marker)
        wait_until_blocked(workers, main_syscalls=[SYS_FUTEX])
        report = self.hangtrace(main)
        for pid in workers:
            proc = report.process(pid)
            self.assertIsNotNone(proc, report.dump())
            self.assertTrue(proc["is_python"], report.dump())
            thread = next(t for t in proc["threads"] if t["tid"] == pid)
            stack = thread.get("python_stack")
            self.assertTrue(stack, "no Python stack for worker %d\n%s" % (pid, report.dump()))
            getitem = [f for f in stack if f["function"] == "StuckDataset.__getitem__"]
            self.assertTrue(getitem, "no __getitem__ frame in %s" % stack)
            self.assertTrue(getitem[0]["file"].endswith("dataloader_blocked_getitem.py"), getitem)
            self.assertEqual(getitem[0]["line"], line, stack)
            self.assertFalse(thread.get("holds_gil"), thread)   # blocked in a wait: GIL released
        # The text report shows it too, under the worker's thread line.
        text = self.hangtrace_text(main)
        self.assertIn("dataloader_blocked_getitem.py:%d StuckDataset.__getitem__" % line, text)

    def hangtrace_text(self, pid):
        import subprocess
        from scenario_support import hangtrace_bin
        out = subprocess.run([hangtrace_bin(), "--pid", str(pid)], capture_output=True, text=True,
                             timeout=180)
        return out.stdout


if __name__ == "__main__":
    unittest.main()
