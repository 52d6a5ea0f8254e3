"""Always-on fleet mode: `hangtrace daemon` against real PyTorch jobs.

- A real Prometheus server (Debian's `prometheus`) on loopback scrapes the
  daemon; its HTTP API shows hangtrace_hang_active go to 1 when a DataLoader
  job started after the daemon hangs (workers forked with a held lock), and
  the postmortem bundle is on disk with every file.
- A DataLoader worker OOM-killed under a memory cgroup limit gets a bundle
  naming the OOM kill.
- SIGKILL leaves no BPF program behind; a restarted daemon picks the hung job
  up again, shows the hang again, and does not write the same bundle twice.
"""
import http.server
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse
import urllib.request

from scenario_support import (wait_for, BUNDLE_FILES, OPTIONAL_BUNDLE_FILES, MEMCG_V1, PYTHON, SYS_FUTEX, Daemon, ScenarioTestCase, Workload,
                              free_port,
                              parse_marker, read_bundle_meta, requires_bpf_and_torch, requires_memcg_v1,
                              hangtrace_bin, wait_until_blocked, workload)

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
ALERTMANAGER = shutil.which("prometheus-alertmanager") or "/usr/bin/prometheus-alertmanager"
SHIPPED_ALERT_RULES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "deploy",
                                   "alerts.yml")


def http_ok(url, headers=None):
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


class WebhookReceiver:
    """The webhook an Alertmanager delivers to: every POSTed JSON body kept."""

    def __init__(self):
        received = self.received = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                received.append(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d/alerts" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def alerts(self, name):
        return [a for body in list(self.received) for a in body.get("alerts", []) if a["labels"]["alertname"] == name]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def bpf_program_ids():
    out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True, check=True).stdout
    return {p["id"] for p in json.loads(out or "[]")}


class FleetTestCase(ScenarioTestCase):
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

    def require_prometheus(self):
        if not os.access(PROMETHEUS, os.X_OK):
            self.skipTest("needs the prometheus server (Debian package prometheus)")
        self.prom_dir = tempfile.mkdtemp(prefix="hangtrace-prom-")
        self.addCleanup(shutil.rmtree, self.prom_dir, ignore_errors=True)

    def start_prometheus(self, target, alertmanager=None):
        """A real Prometheus scraping `target` every second; with
        `alertmanager` (HOST:PORT) it also evaluates the shipped alert rules
        (scripts/deploy/alerts.yml, their `for:` cut to 2 s) and sends to it."""
        port = free_port()
        config = os.path.join(self.prom_dir, "prometheus.yml")
        text = ("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                "scrape_configs:\n  - job_name: hangtrace\n    static_configs:\n"
                "      - targets: ['%s']\n" % target)
        if alertmanager:
            with open(SHIPPED_ALERT_RULES) as f:
                rules = re.sub(r"(?m)^(\s+for: )\S+$", r"\g<1>2s", f.read())
            with open(os.path.join(self.prom_dir, "alerts.yml"), "w") as f:
                f.write(rules)
            text += ("rule_files: ['%s']\nalerting:\n  alertmanagers:\n    - static_configs:\n"
                     "        - targets: ['%s']\n" % (os.path.join(self.prom_dir, "alerts.yml"), alertmanager))
        with open(config, "w") as f:
            f.write(text)
        prom = Workload(["sh", "-c", 'exec "$@" 2>&1', "sh", PROMETHEUS, "--config.file=" + config,
                         "--storage.tsdb.path=" + os.path.join(self.prom_dir, "data"),
                         "--web.listen-address=127.0.0.1:%d" % port])
        self._workloads.append(prom)
        api = "http://127.0.0.1:%d" % port
        wait_for(lambda: http_ok(api + "/-/ready"), 60, "Prometheus to be ready")
        return api

    def start_alertmanager(self, webhook):
        """A real Alertmanager (Debian's prometheus-alertmanager) routing every
        alert at once to `webhook`; returns its HOST:PORT."""
        if not os.access(ALERTMANAGER, os.X_OK):
            self.skipTest("needs Alertmanager (Debian package prometheus-alertmanager)")
        port = free_port()
        config = os.path.join(self.prom_dir, "alertmanager.yml")
        with open(config, "w") as f:
            f.write("route:\n  receiver: hook\n  group_by: ['alertname', 'job_id', 'rank']\n"
                    "  group_wait: 1s\n  group_interval: 1s\n  repeat_interval: 1h\n"
                    "receivers:\n  - name: hook\n    webhook_configs:\n"
                    "      - url: '%s'\n        send_resolved: false\n" % webhook)
        am = Workload(["sh", "-c", 'exec "$@" 2>&1', "sh", ALERTMANAGER, "--config.file=" + config,
                       "--storage.path=" + os.path.join(self.prom_dir, "am"), "--cluster.listen-address=",
                       "--web.listen-address=127.0.0.1:%d" % port])
        self._workloads.append(am)
        wait_for(lambda: http_ok("http://127.0.0.1:%d/-/ready" % port), 60, "Alertmanager to be ready")
        return "127.0.0.1:%d" % port

    def query(self, api, expr):
        url = api + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=5) as r:
            body = json.load(r)
        self.assertEqual(body.get("status"), "success", body)
        return body["data"]["result"]

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
        daemon = self.daemon("--match", r"fork_inherited_lock\.py", "--hang-after", "6", "--scan-every", "0.2")
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
        daemon = self.daemon("--match", r"fork_inherited_lock\.py", "--hang-after", "600", "--scan-every", "0.2",
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
        daemon = self.daemon("--match", r"dataloader_worker_oom\.py", "--scan-every", "0.2", "-v")
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
        daemon = self.daemon("--match", r"healthy_loader\.py", "--hang-after", hang_after, "--check-every", "0.5",
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
class DaemonRanksMerged(FleetTestCase):
    """Two gloo ranks, one of which never joins the all_reduce: the daemon
    writes a bundle per rank. `hangtrace merge` names the absent rank from the
    bundle directory, and from the daemon over HTTP, found through a real
    Prometheus by the job id; sources that fail are one line each, and the
    rest are still merged. The shipped alert rules, evaluated by that
    Prometheus, reach a webhook through a real Alertmanager with the job id,
    the cause, the host and the bundle's URL."""

    def merge(self, *args):
        merged = subprocess.run([hangtrace_bin(), "merge"] + [str(a) for a in args] + ["--json", "-"],
                                capture_output=True, text=True, timeout=180)
        self.assertIn(merged.returncode, (0, 1, 2), merged.stderr)
        report = json.loads(merged.stdout) if merged.returncode != 1 else None
        return merged, report

    def assertAbsentRankOne(self, merged, report):
        self.assertEqual(merged.returncode, 2, merged.stdout + merged.stderr)
        self.assertEqual(len(report["jobs"]), 1, report)
        absent = report["jobs"][0]["absent"]
        self.assertEqual([a["rank"] for a in absent], [1], report)
        self.assertIn("wait_for_checkpoint_upload", json.dumps(absent), report)

    def token_file(self, name, token):
        path = os.path.join(self.prom_dir, name)
        with open(path, "w") as f:
            f.write(token + "\n")
        os.chmod(path, 0o600)
        return path

    def test_each_rank_is_a_job_and_merge_names_the_absent_one(self):
        self.require_prometheus()
        token = self.token_file("token", "fleet-token-0123456789abcdef")
        # The launcher (like torchrun) matches too, but its ranks are the jobs.
        daemon = self.daemon("--match", r"gloo_allreduce_skip\.py", "--hang-after", "4", "--scan-every", "0.2",
                             "--serve-bundles", "--bundle-token-file", token)
        webhook = WebhookReceiver()
        self.addCleanup(webhook.close)
        api = self.start_prometheus(daemon.metrics_address, alertmanager=self.start_alertmanager(webhook.url))
        job = self.start("gloo_allreduce_skip.py", "--steps", "3")
        marker = parse_marker(job.wait_for_line("READY", timeout=180))
        launcher, rank0, rank1 = marker["launcher"][0], marker["rank0"][0], marker["rank1"][0]
        paths = [daemon.wait_for_bundle(timeout=120), daemon.wait_for_bundle(timeout=120)]
        metas = {read_bundle_meta(p)["rank"]: read_bundle_meta(p) for p in paths}
        self.assertEqual(sorted(metas), [0, 1], metas)
        self.assertEqual(metas[0]["job_pid"], rank0, metas)
        self.assertEqual(metas[1]["job_pid"], rank1, metas)
        job_id = metas[0]["job_id"]
        self.assertTrue(job_id, metas)
        self.assertEqual(metas[1]["job_id"], job_id, metas)
        self.assertIsNotNone(metas[0]["clock"], metas)
        self.assertFalse([l for l in daemon.lines if "tracking job %d " % launcher in l], "\n".join(daemon.lines))

        # The bundle directory, as before.
        self.assertAbsentRankOne(*self.merge(self.bundles))

        # Over HTTP: Prometheus says which daemon reports the job hung, and
        # merge fetches that daemon's bundles of the job.
        wait_for(lambda: self.query(api, 'hangtrace_job_hung{job_id="%s"} == 1' % job_id), 60,
                 "Prometheus to see job %s hung" % job_id)
        merged, report = self.merge("--prometheus", api, "--job", job_id, "--token-file", token)
        self.assertAbsentRankOne(merged, report)
        print("merge --prometheus: exit %d, %s" % (merged.returncode, report["verdict"]["summary"]), file=sys.stderr)
        self.assertEqual(merged.stderr, "")
        served = "http://%s/bundles/" % daemon.metrics_address
        self.assertEqual(len(report["bundles"]), 2, report["bundles"])
        self.assertTrue(all(b.startswith(served) for b in report["bundles"]), report["bundles"])
        ranks = report["jobs"][0]["ranks"]
        self.assertEqual(sorted(r["rank"] for r in ranks), [0, 1], ranks)
        for r in ranks:
            self.assertIn("fetched from its daemon", r["clock"]["basis"], r)
            self.assertLess(abs(r["clock"]["offset_s"]), 1.0, r)  # one host, one clock
            self.assertTrue(r["stack"], r)
        # Rank 0 waits in all_reduce, rank 1 uploads: two stacks.
        self.assertEqual(len(report["jobs"][0]["stack_groups"]), 2, report["jobs"][0]["stack_groups"])
        # Both ranks stalled: the first one's lead over the other, on one host's clock.
        first = report["jobs"][0]["first_stall"]
        self.assertTrue(first["certain"], first)
        self.assertIn("on one host's clock", first["order"], first)

        # The alert arrives through Alertmanager, one per hung rank, with the
        # job id, the cause, the host and the link to that rank's bundle.
        hung = wait_for(lambda: len(webhook.alerts("TrainingRankHung")) >= 2 and webhook.alerts("TrainingRankHung"),
                        90, "TrainingRankHung for both ranks at the webhook")
        by_rank = {int(a["labels"]["rank"]): a for a in hung}
        print("alerts at the webhook: %s" % json.dumps([{"labels": a["labels"], "annotations": a["annotations"]}
                                                         for a in by_rank.values()]), file=sys.stderr)
        self.assertEqual(sorted(by_rank), [0, 1], hung)
        for rank, alert in by_rank.items():
            path = [p for p in paths if read_bundle_meta(p)["rank"] == rank][0]
            self.assertEqual(alert["status"], "firing", alert)
            self.assertEqual(alert["labels"]["job_id"], job_id, alert)
            self.assertEqual(alert["labels"]["cause"], metas[rank]["cause"], alert)
            self.assertEqual(alert["annotations"]["host"], daemon.metrics_address, alert)
            url = alert["annotations"]["bundle_url"]
            self.assertEqual(url, "http://%s/bundles/%s" % (daemon.metrics_address, os.path.basename(path)), alert)
            self.assertTrue(http_ok(url, {"Authorization": "Bearer fleet-token-0123456789abcdef"}), url)
            self.assertFalse(http_ok(url), url)  # without the token
            self.assertIn("--job %s" % job_id, alert["annotations"]["merge"], alert)

        # Bad sources, one line each; the bundles that can be read are merged.
        other = os.path.join(self.prom_dir, "other-job")
        shutil.copytree(paths[0], other)
        meta = read_bundle_meta(other)
        meta["job_id"] = "another-job"
        with open(os.path.join(other, "meta.json"), "w") as f:
            json.dump(meta, f)
        corrupt = os.path.join(self.prom_dir, "corrupt.tar")
        with open(corrupt, "wb") as f:
            f.write(b"not a tar archive" * 100)
        unreachable = "http://127.0.0.1:%d" % free_port()
        wrong = self.token_file("wrong", "not-the-fleet-token-000000")
        merged, report = self.merge(unreachable, corrupt, other, "http://" + daemon.metrics_address,
                                    self.bundles, "--job", job_id, "--token-file", wrong)
        self.assertAbsentRankOne(merged, report)
        lines = merged.stderr.splitlines()
        print("merge of bad and good sources: exit %d\n%s" % (merged.returncode, merged.stderr), file=sys.stderr)
        self.assertEqual(len(lines), 4, merged.stderr)
        self.assertTrue(all(l.startswith("hangtrace: skipped ") for l in lines), merged.stderr)
        text = merged.stderr
        self.assertIn("failed to fetch %s/bundles: " % unreachable, text)
        self.assertIn("failed to read archive %s: " % corrupt, text)
        self.assertIn("%s: a bundle of job another-job, not of job %s" % (other, job_id), text)
        self.assertIn("HTTP 401", text)
        self.assertEqual(len([w for w in report["warnings"] if w.startswith("skipped ")]), 4, report["warnings"])
        self.assertEqual(sorted(report["bundles"]), sorted(paths), report["bundles"])

        # Nothing readable at all: one line, exit status 1.
        merged, _ = self.merge(unreachable, corrupt)
        self.assertEqual(merged.returncode, 1, merged.stderr)
        self.assertIn("hangtrace: failed to merge: no bundle could be read (2 sources skipped)", merged.stderr)


@requires_bpf_and_torch
class DaemonKilledAndRestarted(FleetTestCase):
    def test_sigkill_leaves_nothing_attached_and_a_restart_carries_on(self):
        before = bpf_program_ids()
        job, main, workers = self.hung_job()
        first = self.daemon("--match", r"fork_inherited_lock\.py", "--hang-after", "5", "--scan-every", "0.2")
        first.wait_for_job(main)
        path = first.wait_for_bundle(timeout=120)
        self.assertWholeBundle(path)
        loaded = bpf_program_ids() - before
        self.assertTrue(loaded, "the daemon has BPF programs loaded")

        os.killpg(first.pid, signal.SIGKILL)
        first.proc.wait(timeout=30)
        # Every link and map is owned by the daemon's fds: the kernel frees them.
        wait_for(lambda: not (bpf_program_ids() & loaded), 30, "the killed daemon's BPF programs to go")

        second = self.daemon("--match", r"fork_inherited_lock\.py", "--hang-after", "5", "--scan-every", "0.2")
        second.wait_for_job(main)
        second.wait_for_line("hangtrace daemon: job %d: this hang was bundled before" % main, timeout=120)
        wait_for(lambda: 'hangtrace_hang_active{cause="orphaned-lock"} 1' in second.metrics(), 30,
                 "the restarted daemon to show the hang")
        self.assertEqual(os.listdir(self.bundles), [os.path.basename(path)], "no second bundle for the same hang")
        self.assertTrue(job.alive(), "the job is left running")


if __name__ == "__main__":
    unittest.main()
