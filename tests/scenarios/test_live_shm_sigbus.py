"""Live: a DataLoader worker dies of SIGBUS on a full Docker-sized /dev/shm.

The job runs under `hangtrace -- COMMAND` from its first instruction, in a
private mount namespace whose /dev/shm is a 64 MiB tmpfs (Docker's default).
PyTorch itself only says "DataLoader worker (pid N) is killed by signal: Bus
error"; the report must name the worker, the signal and the full tmpfs --
measured while it happened, since the job exits afterwards and /dev/shm is
empty by the time anyone looks.
"""
import os
import re
import shutil
import unittest

from scenario_support import (PYTHON, ScenarioTestCase, killed_findings, parse_marker, proc_state,
                              requires_bpf_and_torch, workload)

SHM_SIZE = 64 * 1024 * 1024
SIGBUS = 7
HANG_AFTER_S = 5
# PyTorch, not hangtrace, decides how a worker meets the full tmpfs: almost
# always SIGBUS while touching a fresh segment's pages, but in a few runs in a
# hundred the worker's allocation fails outright and it raises ("Caught
# RuntimeError in DataLoader worker process N"): nobody dies, and the run has
# nothing for this test to check. Such a run is started again, this often.
ATTEMPTS = 3


def dead_workers(error):
    """The worker pids PyTorch names in its error: "DataLoader worker (pid
    N) is killed by signal: Bus error" when its SIGCHLD handler saw the death
    first, "DataLoader worker (pid(s) N, M) exited unexpectedly" when the
    closed result pipe did (and then nothing about /dev/shm)."""
    m = re.search(r"worker \(pids? ?(?:\(s\))? ?([\d, ]+)\) (?:is killed by signal: Bus error|"
                  r"exited unexpectedly)", error)
    return [int(p) for p in m.group(1).replace(",", " ").split()] if m else []


def loader_error(job, timeout):
    """The job's LOADER-ERROR line; or "ended before LOADER-ERROR: ..." for
    another of PyTorch's ways to meet the full tmpfs, where the main process
    dies while reporting the bus error ("lost sys.stderr") before the loader
    raises (no worker is named: until_a_worker_dies starts it again)."""
    try:
        return job.wait_for_line("LOADER-ERROR", timeout=timeout)
    except AssertionError as e:
        if job.workload.alive():
            raise
        return "ended before LOADER-ERROR: %s" % str(e).splitlines()[0]


def small_shm(*argv):
    """argv run in a private mount namespace with a 64 MiB tmpfs on /dev/shm
    (unshare execs sh, which execs argv: one pid all the way)."""
    return ["unshare", "-m", "--propagation", "private", "sh", "-c",
            'mount -t tmpfs -o size=64m tmpfs /dev/shm && exec "$@"', "small-shm"] + list(argv)


@requires_bpf_and_torch
@unittest.skipUnless(shutil.which("unshare"), "needs unshare(1)")
class LiveShmSigbus(ScenarioTestCase):
    def until_a_worker_dies(self, run):
        """run() -> (job, LOADER-ERROR line, READY marker, report), at most
        ATTEMPTS times, until a worker died of SIGBUS -- as PyTorch's error
        names it, or (when the main process met the dead worker's closed
        socket first: ConnectionResetError, EOFError, most often on a busy
        machine) as the workload read the workers' exit statuses; returns
        those and the dead workers."""
        errors = []
        for _ in range(ATTEMPTS):
            job, error, marker, report = run()
            named = dead_workers(error) or [p for p in (marker or {}).get("sigbus", []) if isinstance(p, int)]
            if named:
                return job, error, marker, report, named
            errors.append(error)
            job.kill()
        self.fail("precondition: no dead worker named in %d runs: %s" % (ATTEMPTS, errors))

    def test_worker_sigbus_is_traced_to_the_full_dev_shm(self):
        def run():
            job = self.launch(small_shm(PYTHON, "-u", workload("dataloader_shm_full.py"), "--exit"))
            error = loader_error(job, timeout=180)
            if error.startswith("ended"):
                return job, error, None, None
            marker = parse_marker(job.wait_for_line("READY", timeout=60))
            job.workload.also_kill += [marker["main"][0]] + marker["workers"]
            return job, error, marker, None
        job, error, marker, _, named = self.until_a_worker_dies(run)
        workers = marker["workers"]
        self.assertTrue(set(named) <= set(workers), (named, marker))
        self.assertIn("bus error", job.workload.stderr_tail().lower(),
                      "precondition: torch's worker SIGBUS handler said nothing")
        self.assertEqual(marker["shm_size"][0], SHM_SIZE, marker)

        report = self.launched_report(job)     # the job exits (3); hangtrace reports then
        self.assertEqual(report.returncode, 2, "a killed worker is critical\n" + report.dump())

        for victim in named:     # one worker or both may have hit the full tmpfs
            d = self.assertWorkerKilled(report, victim)
            self.assertEqual(d.get("signal"), SIGBUS, report.dump())
            self.assertEqual(d.get("cause"), "sigbus-shm", report.dump())
            # The tmpfs as it was when the worker faulted: full.
            self.assertEqual(d.get("shm_size_bytes"), SHM_SIZE, report.dump())
            self.assertGreaterEqual(d.get("shm_used_bytes", 0) * 100, 90 * SHM_SIZE, report.dump())
        # Traced from the first instruction: the workers were followed through fork.
        live = report.json["live"]
        self.assertGreater(live.get("events", 0), 0, report.dump())

    def test_hang_after_reports_and_leaves_the_job_running(self):
        # Without --exit the job's error handler waits forever holding every
        # batch: no progress, so --hang-after reports -- the live SIGBUS and the
        # full /dev/shm the snapshot sees -- and leaves the job running. The
        # main process may stall before PyTorch even notices the dead worker
        # (its status check runs every 5 s), so the report can come before
        # the job's LOADER-ERROR line: read the job's lines afterwards.
        def run():
            job = self.launch(small_shm(PYTHON, "-u", workload("dataloader_shm_full.py")),
                              "--hang-after", HANG_AFTER_S)
            report = self.launched_report(job, timeout=HANG_AFTER_S + 180)
            self.assertIsInstance(report.json.get("target_pid"), int, report.dump())
            job.workload.also_kill.append(report.json["target_pid"])
            error = loader_error(job, timeout=60)
            if error.startswith("ended"):     # hangtrace reported the job's end, not a hang
                return job, error, None, report
            marker = parse_marker(job.wait_for_line("READY", timeout=60))
            job.workload.also_kill += marker["workers"]
            return job, error, marker, report
        job, error, marker, report, named = self.until_a_worker_dies(run)
        main = report.json["target_pid"]
        self.assertEqual(report.returncode, 2, report.dump())
        self.assertEqual(marker["main"][0], main, marker)   # unshare and sh exec'd python
        self.assertTrue(proc_state(main) not in (None, "Z", "X"),
                        "hangtrace must leave the job running\n" + report.dump())
        for victim in named:
            killed = killed_findings(report, victim)
            self.assertEqual(len(killed), 1, report.dump())
            self.assertEqual(killed[0]["details"].get("cause"), "sigbus-shm", report.dump())
        # The job still holds the batches: the snapshot sees the full tmpfs too.
        full = report.of_kind("shm-exhausted")
        self.assertEqual(len(full), 1, report.dump())
        self.assertEqual(full[0]["details"].get("size_bytes"), SHM_SIZE, report.dump())

if __name__ == "__main__":
    unittest.main()
