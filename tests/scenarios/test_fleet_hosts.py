"""A fleet, not a host: three hosts made of network namespaces on a private
bridge (fleet_support.NetnsHosts), a `hangtrace daemon` on each serving its
bundles with a bearer token, a two-rank gloo job split across two of them
(one torchrun-like launcher per host, one rank each) whose rank 1 never joins
the last all_reduce, and the engines a fleet already runs: one real Prometheus
scraping all daemons through file-based service discovery and evaluating the
shipped alert rules, one real Alertmanager delivering to a webhook this test
serves.

Asserted: each host's daemon tracks its own rank and no other host's; the
alert arrives per rank with the job id, the cause, the host and the bundle's
URL; `hangtrace merge --prometheus URL --job ID` finds both daemons through
Prometheus, fetches both bundles over HTTP and names the absent rank and its
host; bad sources (an unreachable daemon, a corrupt archive, a bundle of
another job, a wrong token) are one line each and the rest is still merged.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

from scenario_support import (PYTHON, Daemon, ScenarioTestCase, free_port, hangtrace_bin, parse_marker,
                              read_bundle_meta, requires_bpf_and_torch, wait_for, workload)
from fleet_support import MonitoringMixin, NetnsHosts, WebhookReceiver, http_ok, netns_skip_reason

NETNS_SKIP_REASON = netns_skip_reason()
TOKEN = "fleet-token-0123456789abcdef"
RENDEZVOUS_PORT = 29500   # on rank 0's host, its own network namespace: free


@requires_bpf_and_torch
@unittest.skipIf(NETNS_SKIP_REASON, NETNS_SKIP_REASON)
class FleetOfHosts(MonitoringMixin, ScenarioTestCase):
    def setUp(self):
        super().setUp()
        self.require_prometheus()
        self.hosts = NetnsHosts(3)
        self.addCleanup(self.hosts.close)   # after tearDown has killed every process

    def start_daemon(self, host, token):
        bundles = tempfile.mkdtemp(prefix="hangtrace-bundles-%s-" % host.name)
        self.addCleanup(shutil.rmtree, bundles, ignore_errors=True)
        # The daemon of a host tracks that host's processes: its cgroup
        # subtree, as `--cgroup /kubepods/` does on a node.
        daemon = Daemon(bundles, "--cgroup", os.path.dirname(host.cgroup_path) + "/", "--hang-after", "4",
                        "--scan-every", "0.2", "--stall-after", "2", "--serve-bundles", "--bundle-token-file", token,
                        metrics=host.address + ":0", wrapper=host.wrap([], in_cgroup=False))
        self._workloads.append(daemon)
        self.assertTrue(daemon.metrics_address.startswith(host.address + ":"), daemon.metrics_address)
        return daemon

    def start_node(self, host, node_rank, master):
        """One host's share of the job: a launcher starting its one rank."""
        argv = [PYTHON, "-u", workload("gloo_allreduce_skip.py"), "--steps", "3", "--nnodes", "2",
                "--node-rank", node_rank, "--master", master]
        return self.start_argv(host.wrap(argv), env={"GLOO_SOCKET_IFNAME": "eth0"})

    def merge(self, *args):
        merged = subprocess.run([hangtrace_bin(), "merge"] + [str(a) for a in args] + ["--json", "-"],
                                capture_output=True, text=True, timeout=180)
        self.assertIn(merged.returncode, (0, 1, 2), merged.stderr)
        report = json.loads(merged.stdout) if merged.returncode != 1 else None
        return merged, report

    def assertRankOneOfHostTwoAbsent(self, merged, report, rank1):
        self.assertEqual(merged.returncode, 2, merged.stdout + merged.stderr)
        self.assertEqual(len(report["jobs"]), 1, report)
        absent = report["jobs"][0]["absent"]
        self.assertEqual([a["rank"] for a in absent], [1], report)
        self.assertIn("wait_for_checkpoint_upload", json.dumps(absent), report)
        self.assertIn("rank 1 (host h2, pid %d) never joined all_reduce" % rank1, report["verdict"]["summary"])

    def test_merge_through_prometheus_names_the_hung_rank_and_its_host(self):
        h1, h2, h3 = self.hosts.hosts
        token = self.token_file("token", TOKEN)
        daemons = [self.start_daemon(h, token) for h in (h1, h2, h3)]
        webhook = WebhookReceiver()
        self.addCleanup(webhook.close)
        # Service discovery: the daemons' addresses in a file, as a fleet's
        # inventory writes it; Prometheus re-reads it.
        file_sd = self.write_file_sd(d.metrics_address for d in daemons)
        api = self.start_prometheus(file_sd=file_sd, alertmanager=self.start_alertmanager(webhook.url))

        master = "%s:%d" % (h1.address, RENDEZVOUS_PORT)
        nodes = [self.start_node(h1, 0, master), self.start_node(h2, 1, master)]
        markers = [parse_marker(n.wait_for_line("READY", timeout=180)) for n in nodes]
        rank0, rank1 = markers[0]["rank0"][0], markers[1]["rank1"][0]

        # Each host's daemon writes the bundle of its own rank, named after its host.
        paths = [daemons[0].wait_for_bundle(timeout=120), daemons[1].wait_for_bundle(timeout=120)]
        metas = [read_bundle_meta(p) for p in paths]
        for rank, (meta, host, pid) in enumerate(zip(metas, (h1, h2), (rank0, rank1))):
            self.assertEqual((meta["rank"], meta["hostname"], meta["job_pid"]), (rank, host.name, pid), meta)
            self.assertIsNotNone(meta["clock"], meta)
        # Alone on its host, rank 0 is seen waiting in all_reduce for the
        # rank on the other host (not the TCPStore's idle connections).
        self.assertEqual(metas[0]["cause"], "collective-wait", metas[0])
        self.assertIn("for the ranks on other hosts (rank 1 of world size 2)", metas[0]["summary"], metas[0])
        job_id = metas[0]["job_id"]
        self.assertTrue(job_id, metas)
        self.assertEqual(metas[1]["job_id"], job_id, metas)
        # The launchers (like torchrun) match too, but each host's rank is
        # its job: a launcher picked up before it started its rank gives way
        # to the rank. The other host's rank is not this daemon's.
        launchers = [m["launcher"][0] for m in markers]
        for daemon, launcher, rank_pid in zip(daemons, launchers + [None], ([rank0], [rank1], [])):
            tracked = [int(l.split("tracking job ", 1)[1].split()[0]) for l in daemon.lines
                       if l.startswith("hangtrace daemon: tracking job ")]
            self.assertEqual(tracked[-1:], rank_pid, "\n".join(daemon.lines))
            for pid in tracked[:-1]:
                self.assertEqual(pid, launcher, "\n".join(daemon.lines))
                # (picked up as early as the wrapper that execs it: `sh`)
                self.assertTrue([l for l in daemon.lines if l.startswith("hangtrace daemon: job %d (" % launcher) and
                                 l.endswith(") ended: it launches ranks, each a job of its own")],
                                "\n".join(daemon.lines))

        # Prometheus, through file_sd, scrapes all three; two report the job hung.
        wait_for(lambda: len(self.query(api, 'up{job="hangtrace"} == 1')) == 3, 60,
                 "Prometheus to scrape the three daemons")
        hung = wait_for(lambda: len(self.query(api, 'hangtrace_job_hung{job_id="%s"} == 1' % job_id)) == 2 and
                        self.query(api, 'hangtrace_job_hung{job_id="%s"} == 1' % job_id), 60,
                        "Prometheus to see job %s hung on two hosts" % job_id)
        self.assertEqual(sorted(s["metric"]["instance"] for s in hung),
                         sorted(d.metrics_address for d in daemons[:2]), hung)

        # The engineer's machine (the test's namespace): merge asks Prometheus
        # which hosts report the job hung and fetches their bundles.
        merged, report = self.merge("--prometheus", api, "--job", job_id, "--token-file", token)
        print("merge --prometheus: exit %d, %s" % (merged.returncode, report["verdict"]["summary"]), file=sys.stderr)
        self.assertRankOneOfHostTwoAbsent(merged, report, rank1)
        self.assertEqual(merged.stderr, "")
        self.assertEqual(sorted(b.rsplit("/", 1)[0] for b in report["bundles"]),
                         sorted("http://%s/bundles" % d.metrics_address for d in daemons[:2]), report["bundles"])
        ranks = report["jobs"][0]["ranks"]
        self.assertEqual(sorted((r["rank"], r["host"]) for r in ranks), [(0, "h1"), (1, "h2")], ranks)
        for r in ranks:
            self.assertIn("fetched from its daemon", r["clock"]["basis"], r)
            # The hosts share this machine's clock: what merge measured over
            # the bridge is the offset's error, within the request's round trip.
            self.assertLess(abs(r["clock"]["offset_s"]), 1.0, r)
            self.assertTrue(r["stack"], r)
        # Rank 0 waits in all_reduce, rank 1 uploads: two stacks.
        self.assertEqual(len(report["jobs"][0]["stack_groups"]), 2, report["jobs"][0]["stack_groups"])
        # Which rank stalled first is compared across the two hosts' clocks,
        # within what merge measured they may differ over the bridge (ms;
        # not the 16 s the unsynchronized clocks' own estimate would give).
        first = report["jobs"][0]["first_stall"]
        print("first stall: %s" % first["order"], file=sys.stderr)
        gap = re.search(r"clocks may differ \(± [0-9.]+ ms\)", first["order"])
        self.assertTrue(gap, first)
        self.assertNotIn("one host's clock", first["order"], first)
        # The bundle directories copied by hand, as before the fleet: the same answer.
        self.assertRankOneOfHostTwoAbsent(*self.merge(*[d.bundle_dir for d in daemons[:2]]), rank1)

        # The alert arrives through Alertmanager, one per hung rank, with the
        # job id, the cause, the host and the link to that rank's bundle.
        alerts = wait_for(lambda: len(webhook.alerts("TrainingRankHung")) >= 2 and webhook.alerts("TrainingRankHung"),
                          90, "TrainingRankHung for both ranks at the webhook")
        by_rank = {int(a["labels"]["rank"]): a for a in alerts}
        print("alerts at the webhook: %s" % json.dumps([{"labels": a["labels"], "annotations": a["annotations"]}
                                                         for a in by_rank.values()]), file=sys.stderr)
        self.assertEqual(sorted(by_rank), [0, 1], alerts)
        for rank, alert in by_rank.items():
            self.assertEqual(alert["status"], "firing", alert)
            self.assertEqual(alert["labels"]["job_id"], job_id, alert)
            self.assertEqual(alert["labels"]["cause"], metas[rank]["cause"], alert)
            self.assertEqual(alert["annotations"]["host"], daemons[rank].metrics_address, alert)
            url = alert["annotations"]["bundle_url"]
            self.assertEqual(url, "http://%s/bundles/%s" % (daemons[rank].metrics_address,
                                                            os.path.basename(paths[rank])), alert)
            self.assertTrue(http_ok(url, {"Authorization": "Bearer " + TOKEN}), url)
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
        unreachable = "http://%s:%d" % (h3.address, free_port())   # a host without a daemon on that port
        wrong = self.token_file("wrong", "not-the-fleet-token-000000")
        merged, report = self.merge(unreachable, corrupt, other, "http://" + daemons[1].metrics_address,
                                    daemons[0].bundle_dir, daemons[1].bundle_dir, "--job", job_id,
                                    "--token-file", wrong)
        print("merge of bad and good sources: exit %d\n%s" % (merged.returncode, merged.stderr), file=sys.stderr)
        self.assertRankOneOfHostTwoAbsent(merged, report, rank1)
        lines = merged.stderr.splitlines()
        self.assertEqual(len(lines), 4, merged.stderr)
        self.assertTrue(all(l.startswith("hangtrace: skipped ") for l in lines), merged.stderr)
        self.assertIn("failed to fetch %s/bundles: " % unreachable, merged.stderr)
        self.assertIn("failed to read archive %s: " % corrupt, merged.stderr)
        self.assertIn("%s: a bundle of job another-job, not of job %s" % (other, job_id), merged.stderr)
        self.assertIn("HTTP 401", merged.stderr)
        self.assertEqual(len([w for w in report["warnings"] if w.startswith("skipped ")]), 4, report["warnings"])
        self.assertEqual(sorted(report["bundles"]), sorted(paths), report["bundles"])

        # Nothing readable at all: one line, exit status 1.
        merged, _ = self.merge(unreachable, corrupt)
        self.assertEqual(merged.returncode, 1, merged.stderr)
        self.assertIn("hangtrace: failed to merge: no bundle could be read (2 sources skipped)", merged.stderr)


if __name__ == "__main__":
    unittest.main()
