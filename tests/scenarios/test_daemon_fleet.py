"""Always-on fleet mode: `hangtrace daemon` against real PyTorch jobs.

- A real Prometheus server (Debian's `prometheus`) on loopback scrapes the
  daemon; its HTTP API shows hangtrace_hang_active go to 1 when a DataLoader
  job started after the daemon hangs (workers forked with a held lock), and
  the postmortem bundle is on disk with every file.
- A DataLoader worker OOM-killed under a memory cgroup limit gets a bundle
  naming the OOM kill.
- SIGKILL leaves no BPF program behind; a restarted daemon picks the hung job
  up again, shows the hang again, and does not write the same bundle twice.

A job across hosts (a daemon per host, bundles over HTTP, alerts through
Alertmanager, `hangtrace merge --prometheus`): test_fleet_hosts.py.
"""
import json
import os
import shutil
import signal
import tempfile
import time
import unittest

from scenario_support import (BUNDLE_FILES, MEMCG_V1, OPTIONAL_BUNDLE_FILES, SYS_FUTEX, Daemon, ScenarioTestCase, bpftool_ids,
                              own_match, parse_marker, read_bundle_meta, requires_bpf_and_torch, requires_memcg_v1, wait_for,
                              wait_until_blocked)
from fleet_support import MonitoringMixin


def bpf_programs_held_by(pid):
    """The ids of the BPF programs the fds of `pid` hold (a program's fd or
    a link's): its own, whatever tests beside this one load meanwhile."""
    ids = set()
    fdinfo = "/proc/%d/fdinfo" % pid
    for name in os.listdir(fdinfo):
        try:
            with open(os.path.join(fdinfo, name)) as f:
                ids.update(int(line.split()[1]) for line in f if line.startswith("prog_id:"))
        except OSError:   # closed meanwhile
            pass
    return ids


class FleetTestCase(MonitoringMixin, ScenarioTestCase):
    def setUp(self):
        super().setUp()
        self.bundles = tempfile.mkdtemp(prefix="hangtrace-bundles-")

    def tearDown(self):
        super().tearDown()
        if not os.environ.get("KEEP_BUNDLES"): shutil.rmtree(self.bundles, ignore_errors=True)

    def daemon(self, *args):
        d = Daemon(self.bundles, *args)
        self._workloads.append(d)
        return d

    def assertWholeBundle(self, path, may_be_empty=()):
        self.assertEqual(os.path.dirname(path), self.bundles)
        names = sorted(n for n in os.listdir(path) if n not in OPTIONAL_BUNDLE_FILES)
        self.assertEqual(names, sorted(BUNDLE_FILES), path)
        for name in BUNDLE_FILES:
            if name not in may_be_empty:
                self.assertGreater(os.path.getsize(os.path.join(path, name)), 0, name)
        for name in ("report.json", "snapshot.json", "trace.json", "recorder.json", "meta.json"):
            with open(os.path.join(path, name)) as f:
                json.load(f)
        with open(os.path.join(path, "flamegraph.svg")) as f:
            self.assertIn("<svg", f.read(4096))
        # Written atomically: no temporary directory is left beside it.
        self.assertFalse([n for n in os.listdir(self.bundles) if n.startswith(".")], os.listdir(self.bundles))

    def hung_job(self):
        job = self.start("fork_inherited_lock.py")
        marker = parse_marker(job.wait_for_line("READY"))
        main, workers = marker["main"][0], marker["workers"]
        wait_until_blocked(workers, main_syscalls=[SYS_FUTEX])
        return job, main, workers


@requires_bpf_and_torch
class DaemonPrometheus(FleetTestCase):
    def setUp(self):
        super().setUp()
        self.require_prometheus()

    def test_prometheus_sees_the_hang_and_the_bundle_is_on_disk(self):
        daemon = self.daemon("--match", own_match("fork_inherited_lock.py"), "--hang-after", "6", "--scan-every", "0.2")
        api = self.start_prometheus(daemon.metrics_address)
        wait_for(lambda: self.query(api, 'up{job="hangtrace"} == 1'), 60, "Prometheus to scrape the daemon")
        self.assertEqual(self.query(api, "sum(hangtrace_hang_active)"), [])  # no hang yet, no series

        # A job started after the daemon: picked up, with its workers.
        job, main, workers = self.hung_job()
        daemon.wait_for_job(main)
        path = daemon.wait_for_bundle(timeout=120)
        self.assertWholeBundle(path)
        meta = read_bundle_meta(path)
        self.assertEqual(meta["trigger"], "hang", meta)
        self.assertEqual(meta["cause"], "orphaned-lock", meta)
        self.assertEqual(meta["job_pid"], main, meta)
        self.assertTrue(set(workers) <= set(meta["pids"]), meta)
        with open(os.path.join(path, "report.json")) as f:
            report = json.load(f)
        self.assertEqual(report["verdict"]["status"], "hang", report["verdict"])
        self.assertTrue([f for f in report["findings"] if f["kind"] == "orphaned-lock"], report["findings"])
        with open(os.path.join(path, "recorder.json")) as f:
            recorder = json.load(f)
        self.assertEqual(recorder["job"]["pid"], main, recorder["job"])
        # The kernel's wake counts, the job's threads only: the main thread's
        # poll times out every 5 s (woken from interrupt context or by
        # whatever ran on the CPU), besides what woke it at start-up.
        self.assertTrue([w for w in recorder["wakeups"] if w["wakee_tid"] == main], recorder["wakeups"])
        self.assertTrue(all(w["wakee_pid"] in meta["pids"] for w in recorder["wakeups"]), recorder["wakeups"])

        active = wait_for(lambda: self.query(api, "hangtrace_hang_active == 1"), 60,
                          "hangtrace_hang_active to reach 1 in Prometheus")
        self.assertEqual(active[0]["metric"].get("cause"), "orphaned-lock", active)
        detected = self.query(api, 'hangtrace_hangs_detected_total{cause="orphaned-lock"}')
        self.assertEqual(detected[0]["value"][1], "1", detected)
        written = self.query(api, 'hangtrace_bundles_written_total{trigger="hang"}')
        self.assertEqual(written[0]["value"][1], "1", written)
        # Blocked time by role and wait kind: the main thread's poll times out
        # every 5 s (a wait of seconds: sampled, or in kernel while the exact
        # hooks were attached).
        waits = wait_for(lambda: self.query(api, 'hangtrace_blocked_seconds_count{role="main_thread",wait="poll"} > 0'),
                         30, "the main thread's poll waits in the blocked-time histogram")
        self.assertTrue(waits)
        sums = self.query(api, 'hangtrace_blocked_seconds_sum{role="main_thread",wait="poll"} / '
                               'hangtrace_blocked_seconds_count{role="main_thread",wait="poll"}')
        self.assertGreater(float(sums[0]["value"][1]), 1.0, sums)
        own = self.query(api, "hangtrace_daemon_resident_memory_bytes")
        self.assertLess(float(own[0]["value"][1]), 256 * 1024 * 1024, own)
        # Labels stay bounded: no pid or tid label on any hangtrace series.
        for series in self.query(api, '{__name__=~"hangtrace_.*"}'):
            self.assertFalse({"pid", "tid"} & set(series["metric"]), series["metric"])


@requires_bpf_and_torch
class DaemonExactHistograms(FleetTestCase):
    def test_exact_steady_state_counts_every_wait_in_kernel(self):
        # The workers' short futex waits at start-up, before they block for
        # good: only the in-kernel histograms see waits this short.
        daemon = self.daemon("--match", own_match("fork_inherited_lock.py"), "--hang-after", "600", "--scan-every", "0.2",
                             "--steady-state", "exact")
        job, main, workers = self.hung_job()
        daemon.wait_for_job(main)

        def worker_futex_waits():
            for line in daemon.metrics().splitlines():
                if line.startswith('hangtrace_blocked_seconds_count{role="worker",wait="futex"}'):
                    return float(line.split()[-1]) > 0
            return False
        wait_for(worker_futex_waits, 30, "worker futex waits in the in-kernel histograms")
        self.assertIn("hangtrace_exact_hooks_attached 1", daemon.metrics())


@requires_bpf_and_torch
@requires_memcg_v1
class DaemonOomKill(FleetTestCase):
    LIMIT = 512 * 1024 * 1024

    def setUp(self):
        super().setUp()
        self.cgroup = os.path.join(MEMCG_V1, "hangtrace-daemon-%d" % os.getpid())
        os.mkdir(self.cgroup)
        with open(os.path.join(self.cgroup, "memory.limit_in_bytes"), "w") as f:
            f.write(str(self.LIMIT))

    def tearDown(self):
        super().tearDown()
        deadline = time.monotonic() + 30
        while os.path.exists(self.cgroup):
            try:
                with open(os.path.join(self.cgroup, "cgroup.procs")) as f:
                    for p in f.read().split():
                        os.kill(int(p), signal.SIGKILL)
                os.rmdir(self.cgroup)
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def test_worker_oom_kill_writes_a_bundle(self):
        daemon = self.daemon("--match", own_match("dataloader_worker_oom.py"), "--scan-every", "0.2", "-v")
        go = os.path.join(self.bundles, "..", os.path.basename(self.bundles) + ".go")
        self.addCleanup(lambda: os.path.exists(go) and os.unlink(go))
        enter = 'echo $$ > "$0/cgroup.procs" && exec "$@"'
        job = self.start("dataloader_worker_oom.py", "--go-file", go,
                         wrapper=["sh", "-c", enter, self.cgroup])
        marker = parse_marker(job.wait_for_line("START", timeout=120))
        main, victim = marker["main"][0], marker["workers"][0]
        daemon.wait_for_job(main)
        wait_for(lambda: any("job %d: process %d joins" % (main, victim) in l for l in daemon.lines), 30,
                 "the worker to be tracked")
        open(go, "w").close()   # now let the worker's cache grow
        job.wait_for_line("LOADER-ERROR", timeout=120)
        path = daemon.wait_for_bundle(timeout=60)
        # The main process exits right after its worker's death (PyTorch's
        # SIGCHLD handler): no thread may be left to fold a stack of.
        self.assertWholeBundle(path, may_be_empty=("stacks.folded",))
        meta = read_bundle_meta(path)
        self.assertEqual(meta["trigger"], "oom-kill", meta)
        self.assertIn("process %d" % victim, meta["note"], meta)
        with open(os.path.join(path, "report.json")) as f:
            report = json.load(f)
        killed = [f for f in report["findings"] if f["kind"] == "process-killed" and
                  (f.get("details") or {}).get("pid") == victim]
        self.assertEqual(len(killed), 1, json.dumps(report["findings"], indent=1))
        self.assertEqual(killed[0]["details"].get("cause"), "oom-killer", killed[0])
        self.assertEqual(killed[0]["details"].get("limit_bytes"), self.LIMIT, killed[0])
        with open(os.path.join(path, "recorder.json")) as f:
            recorder = json.load(f)
        self.assertIn("oom-victim", [e["type"] for e in recorder["events"]], recorder["events"][-10:])
        self.assertIn('hangtrace_process_deaths_total{how="oom-kill"} 1', daemon.metrics())
        self.assertTrue([h for h in report["live"]["hooks"] if h.get("active")], report["live"]["hooks"])


@requires_bpf_and_torch
class DaemonHealthyJob(FleetTestCase):
    def test_a_job_making_progress_is_never_called_hung(self):
        self.healthy_job_is_never_hung("sampled")

    def test_a_job_making_progress_is_never_called_hung_exact(self):
        # Here the kernel's who-woke-whom counts are a progress signal all the time.
        self.healthy_job_is_never_hung("exact")

    def healthy_job_is_never_hung(self, steady_state):
        hang_after = 3.0
        daemon = self.daemon("--match", own_match("healthy_loader.py"), "--hang-after", hang_after, "--check-every", "0.5",
                             "--scan-every", "0.2", "--steady-state", steady_state, "-vv")
        job = self.start("healthy_loader.py", "--seconds", "600")
        main = parse_marker(job.wait_for_line("READY"))["main"][0]
        daemon.wait_for_job(main)
        # A second job that ends on its own meanwhile: its end must not
        # disturb the first one's watch.
        short = self.start("healthy_loader.py", "--seconds", "1")
        short_main = parse_marker(short.wait_for_line("READY"))["main"][0]
        short.wait_for_line("DONE", timeout=60)
        # Three times --hang-after of progress samples, each one moving.
        signals = []
        started = time.monotonic()
        while time.monotonic() - started < 3 * hang_after:
            line = daemon.wait_for_line("hangtrace daemon: job %d: progress (" % main, timeout=30)
            signals.append(line.rsplit("(", 1)[1].rstrip(")"))
        if steady_state == "exact":
            self.assertIn("wakeups from the job", signals)
        else:
            self.assertIn("Python frames", signals)
        ended = "hangtrace daemon: job %d (python3) ended" % short_main
        wait_for(lambda: any(l.startswith(ended) for l in daemon.lines), 30, "the short job to end")
        self.assertFalse([l for l in daemon.lines if "made no progress" in l], "\n".join(daemon.lines))
        self.assertEqual(os.listdir(self.bundles), [])
        self.assertNotIn("hangtrace_hang_active{", daemon.metrics())
        self.assertTrue(job.alive(), job.stderr_tail())


@requires_bpf_and_torch
class DaemonKilledAndRestarted(FleetTestCase):
    def test_sigkill_leaves_nothing_attached_and_a_restart_carries_on(self):
        job, main, workers = self.hung_job()
        first = self.daemon("--match", own_match("fork_inherited_lock.py"), "--hang-after", "5", "--scan-every", "0.2")
        first.wait_for_job(main)
        path = first.wait_for_bundle(timeout=120)
        self.assertWholeBundle(path)
        loaded = bpf_programs_held_by(first.pid)
        self.assertTrue(loaded, "the daemon has BPF programs loaded")
        self.assertTrue(loaded <= bpftool_ids("prog"), (loaded, bpftool_ids("prog")))

        os.killpg(first.pid, signal.SIGKILL)
        first.proc.wait(timeout=30)
        # Every link and map is owned by the daemon's fds: the kernel frees them.
        wait_for(lambda: not (bpftool_ids("prog") & loaded), 30, "the killed daemon's BPF programs to go")

        second = self.daemon("--match", own_match("fork_inherited_lock.py"), "--hang-after", "5", "--scan-every", "0.2")
        second.wait_for_job(main)
        second.wait_for_line("hangtrace daemon: job %d: this hang was bundled before" % main, timeout=120)
        wait_for(lambda: 'hangtrace_hang_active{cause="orphaned-lock"} 1' in second.metrics(), 30,
                 "the restarted daemon to show the hang")
        self.assertEqual(os.listdir(self.bundles), [os.path.basename(path)], "no second bundle for the same hang")
        self.assertTrue(job.alive(), "the job is left running")


if __name__ == "__main__":
    unittest.main()
