"""DataLoader workers fork while a main-process thread holds the dataset's lock."""
import unittest

from scenario_support import (SYS_FUTEX, SYS_POLL, ScenarioTestCase, parse_marker,
                              requires_bpf_and_torch, wait_until_blocked)


@requires_bpf_and_torch
class ForkInheritedLock(ScenarioTestCase):
    def test_workers_wait_on_a_lock_nobody_in_them_can_release(self):
        job = self.start("fork_inherited_lock.py")
        marker = parse_marker(job.wait_for_line("READY"))
        main, workers = marker["main"][0], marker["workers"]
        self.assertEqual(len(workers), 2, marker)
        # Each worker's only thread sleeps in futex (the inherited lock);
        # main polls the result queue (5 s timeout, re-armed).
        wait_until_blocked(workers, main_syscalls=[SYS_FUTEX])
        wait_until_blocked(main, main_syscalls=[SYS_POLL])

        report = self.hangtrace(main)
        self.assertOrphanedLock(report, workers)
        # Nothing here waits in a circle: main waits for workers, workers for
        # a lock whose copy nobody holds.
        self.assertFalse(report.of_kind("deadlock-cycle"), report.dump())
        for pid, role in [(main, "target")] + [(w, "descendant") for w in workers]:
            entry = report.process(pid)
            self.assertIsNotNone(entry, "pid %d missing from processes\n%s" % (pid, report.dump()))
            self.assertEqual(entry.get("role"), role, report.dump())


if __name__ == "__main__":
    unittest.main()
