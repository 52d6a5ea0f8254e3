"""Shape c of issue 18, lock contention: the main thread and 3 Python threads
queue on one threading.Lock, each holding it 10 ms in a GIL-releasing
time.sleep and working 2 ms outside it (workloads/lock_contention.py), so
each waits ~70% of the time to acquire it. `hangtrace --pid MAIN --duration
8` must find, within ±10 points of what the threads measured: main's "lock"
share (its time blocked acquiring); on the critical path, the step via "lock" of the
threads that released it to main and their own "lock" share; a
lock-contention warning naming the lock, waiters and holders among the
contending threads, with main's share; verdict slow, exit 0.
"""
import unittest

from scenario_support import SlowJobTestCase, cause_share, requires_bpf_and_torch


@requires_bpf_and_torch
class LockContention(SlowJobTestCase):
    def test_threads_queue_on_one_lock(self):
        job, marker = self.start_job("lock_contention.py", "--seconds", 180)
        main, others = marker["main"][0], marker["threads"]
        self.assertEqual(len(others), 3, marker)
        contenders = set([main] + others)
        report, profile, window = self.profile_of(main)

        thread = self.main_thread(report, profile, main)
        measured_main = self.truth.share("acquire", window, [main], "blocked")
        self.assertShare("main %d's lock share (wall acquiring %.3f)" % (main, self.truth.share("acquire", window, [main])),
                         measured_main, cause_share(thread, "lock"), report)

        step = self.step_via(report, self.main_path(report, profile, main), "lock")
        tids = set(step.get("tids") or [])
        self.assertTrue(tids and tids <= contenders, "lock step %s, contenders %s\n%s"
                        % (sorted(tids), sorted(contenders), self.slow_dump(report)))
        self.assertEqual(step.get("pids"), [main], self.slow_dump(report))
        self.assertShare("lock share of threads %s" % sorted(tids), self.measured_step_share("acquire", window, step),
                         cause_share(step, "lock"), report)

        details = self.assertSlowFinding(report, "lock-contention")
        self.assertTrue(details.get("lock"), self.slow_dump(report))
        waiters, holders = set(details.get("waiter_tids") or []), set(details.get("holder_tids") or [])
        self.assertGreaterEqual(len(waiters), 2, self.slow_dump(report))
        self.assertTrue(waiters <= contenders and holders and holders <= contenders,
                        "waiters %s, holders %s, contenders %s\n%s"
                        % (sorted(waiters), sorted(holders), sorted(contenders), self.slow_dump(report)))
        self.assertShare("lock-contention share", measured_main, details.get("share", -1), report)
        self.assertTrue(job.alive(), job.stderr_tail())


if __name__ == "__main__":
    unittest.main()
