"""A thread pool whose tasks wait on tasks queued to the same pool
(workloads/pool_self_wait.py): every pool thread and the main thread wait
forever, each on a private semaphore no thread will ever post.

The finding must be pool-self-wait, not a fork-inherited lock: its tids are
every pool thread and the main thread, it names the pool and the task, and
its advice is about the pool, not about fork/spawn.
"""
import os
import unittest

from scenario_support import (SYS_FUTEX, ScenarioTestCase, parse_marker, requires_bpf_and_torch,
                              wait_until_blocked)


@requires_bpf_and_torch
class PoolSelfWait(ScenarioTestCase):
    def _pool_waits_on_itself(self, variant, pool_name):
        job = self.start("pool_self_wait.py", variant)
        marker = parse_marker(job.wait_for_line("READY"))
        main, workers = marker["main"][0], marker["workers"][0]
        wait_until_blocked(main, main_syscalls=[SYS_FUTEX], all_threads=False)
        report = self.hangtrace(main)
        self.assertHang(report)
        first = report.json["findings"][0]
        self.assertEqual(first.get("kind"), "pool-self-wait", report.dump())
        self.assertEqual(first.get("severity"), "critical", report.dump())
        self.assertEqual(first["details"].get("pool"), pool_name, report.dump())
        pool_tids = first["details"].get("pool_tids") or []
        self.assertEqual(len(pool_tids), workers, report.dump())
        threads = {int(t) for t in os.listdir("/proc/%d/task" % main)}
        self.assertTrue(set(pool_tids) <= threads, report.dump())
        self.assertIn(main, first.get("tids") or [], report.dump())
        self.assertTrue(set(pool_tids) <= set(first.get("tids") or []), report.dump())
        self.assertIn("load", first.get("summary", ""), report.dump())
        advice = " ".join(first.get("advice") or [])
        self.assertIn("own pool", advice, report.dump())
        self.assertNotIn("spawn", advice, report.dump())
        self.assertFalse(report.of_kind("orphaned-lock"), report.dump())
        self.assertIn("pool-self-wait", report.json["verdict"]["summary"], report.dump())

    def test_thread_pool_executor_waiting_on_itself(self):
        self._pool_waits_on_itself("thread", "concurrent.futures.ThreadPoolExecutor")

    def test_multiprocessing_thread_pool_waiting_on_itself(self):
        self._pool_waits_on_itself("mpool", "multiprocessing.pool.ThreadPool")


if __name__ == "__main__":
    unittest.main()
