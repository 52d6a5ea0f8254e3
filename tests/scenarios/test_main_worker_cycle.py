"""Main holds a multiprocessing.Lock and waits for data that needs it."""
import unittest

from scenario_support import (SYS_FUTEX, SYS_POLL, SYS_READ, ScenarioTestCase, parse_marker,
                              requires_bpf_and_torch, wait_until_blocked)


@requires_bpf_and_torch
class MainWorkerCycle(ScenarioTestCase):
    def _cycle_through(self, report, main, workers):
        cycles = [f for f in report.of_kind("deadlock-cycle")
                  if main in (f.get("pids") or []) and set(workers) & set(f.get("pids") or [])]
        self.assertTrue(cycles, "no deadlock-cycle through main %d and a worker of %s\n%s"
                        % (main, workers, report.dump()))
        return cycles[0]

    def _critical_cycle(self, mode, main_syscall):
        """main_worker_cycle.py MODE, once its workers wait in futex and main
        in `main_syscall`: the report (a hang) and its critical deadlock-cycle
        through main and a worker."""
        job = self.start("main_worker_cycle.py", mode)
        marker = parse_marker(job.wait_for_line("READY"))
        main, workers = marker["main"][0], marker["workers"]
        wait_until_blocked(workers, main_syscalls=[SYS_FUTEX])
        wait_until_blocked(main, main_syscalls=[main_syscall])

        report = self.hangtrace(main)
        self.assertHang(report)
        cycle = self._cycle_through(report, main, workers)
        self.assertEqual(cycle.get("severity"), "critical", report.dump())
        return report, cycle

    def test_dataloader_workers_need_the_lock_main_holds(self):
        report, cycle = self._critical_cycle("dataloader", SYS_POLL)
        # DataLoader re-arms a 5 s poll: a timed wait, so "probable" is fair.
        self.assertIn(cycle.get("confidence"), ("certain", "probable"), report.dump())

    def test_process_and_queue_without_timeout_is_a_certain_cycle(self):
        report, cycle = self._critical_cycle("process", SYS_READ)
        self.assertEqual(cycle.get("confidence"), "certain", report.dump())


if __name__ == "__main__":
    unittest.main()
