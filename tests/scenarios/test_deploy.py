"""Deployment (scripts/deploy, docs/deploy.md): the capability set is proven.

The systemd unit, the DaemonSet and the docs' capability table must name the
same capabilities. The daemon, run the way the unit runs it -- a uid of its
own holding exactly those capabilities, NoNewPrivileges, its own mount
namespace with a read-only root, an empty /tmp and a read-only /home -- must
bundle a real hung PyTorch job of another user with kernel, Python and native
stacks; `--list-hooks` and `--pid` (uid 0 only) must work with the same
capabilities; and without each capability, the operation the docs say needs
it must fail.
"""
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
import urllib.request

from scenario_support import (REPO, SYS_FUTEX, SYS_POLL, SYS_READ, SYS_RECVFROM, ScenarioTestCase,
                              hangtrace_bin, own_match, parse_marker, requires_bpf_and_torch, wait_until_blocked)

UNIT = os.path.join(REPO, "scripts", "deploy", "hangtrace.service")
DAEMONSET = os.path.join(REPO, "scripts", "deploy", "daemonset.yaml")
ALERTS = os.path.join(REPO, "scripts", "deploy", "alerts.yml")
DOC = os.path.join(REPO, "docs", "deploy.md")
METRICS_SOURCE = os.path.join(REPO, "userspace", "cli", "daemon_metrics.cpp")

# DynamicUser=yes picks a uid in 61184-65519; the emulation takes the first.
SERVICE_UID = 61184
CAP_NUMBERS = {"CAP_DAC_OVERRIDE": 1, "CAP_DAC_READ_SEARCH": 2, "CAP_SYS_PTRACE": 19, "CAP_SYS_ADMIN": 21,
               "CAP_SYS_RESOURCE": 24, "CAP_SYSLOG": 34, "CAP_PERFMON": 38, "CAP_BPF": 39}
NOBODY = 65534


def _read(path):
    with open(path) as f:
        return f.read()


def unit_directive(name):
    values = [line.split("=", 1)[1].strip() for line in _read(UNIT).splitlines() if line.startswith(name + "=")]
    return values


def unit_capabilities():
    bounding = unit_directive("CapabilityBoundingSet")
    ambient = unit_directive("AmbientCapabilities")
    assert len(bounding) == 1 and len(ambient) == 1, (bounding, ambient)
    return bounding[0].split(), ambient[0].split()


def documented_capabilities():
    """The first column of the table under '## Capabilities' in docs/deploy.md."""
    text = _read(DOC)
    section = text.split("\n## Capabilities", 1)[1].split("\n## ", 1)[0]
    table = section.split("\n### ", 1)[0]
    return re.findall(r"^\| `(CAP_[A-Z_]+)` \|", table, re.M)


def setpriv_caps(caps):
    return ",".join("+" + c[len("CAP_"):].lower() for c in caps)


def cap_mask(caps):
    mask = 0
    for c in caps:
        mask |= 1 << CAP_NUMBERS[c]
    return mask


def kallsyms_needs_syslog():
    """Whether /proc/kallsyms hides addresses from a reader without CAP_SYSLOG
    (kernel/kallsyms.c: kallsyms_show_value)."""
    kptr = int(_read("/proc/sys/kernel/kptr_restrict"))
    paranoid = int(_read("/proc/sys/kernel/perf_event_paranoid"))
    return kptr >= 1 or paranoid > 1


# The unit's sandbox, rebuilt with unshare and setpriv (systemd is not PID 1
# where the tests run): ProtectSystem=strict (read-only /), ReadWritePaths (the
# state directory), PrivateTmp (empty /tmp, /var/tmp), ProtectHome=read-only,
# UMask=0077, NoNewPrivileges=yes, DynamicUser=yes (a uid of its own) with
# exactly the capabilities as ambient ones.
SANDBOX = r"""
state=$1; caps=$2; uid=$3; shift 3
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs -o mode=1777 tmpfs /var/tmp
for d in /home /root; do if [ -d $d ]; then mount --bind $d $d; mount -o remount,bind,ro $d; fi; done
mount --bind "$state" "$state"
mount -o remount,bind,ro /
umask 077
exec setpriv --no-new-privs --reuid=$uid --regid=$uid --clear-groups \
  --inh-caps=-all,$caps --ambient-caps=-all,$caps --bounding-set=-all,$caps -- "$@"
"""


def as_unit(state, caps, argv, uid=SERVICE_UID):
    return ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-ec", SANDBOX, "sh", state,
            setpriv_caps(caps), str(uid)] + list(argv)


def with_caps(caps, argv):
    """uid 0 with exactly `caps` (no sandbox): for the drop-one-at-a-time runs."""
    c = setpriv_caps(caps)
    return ["setpriv", "--reuid=0", "--regid=0", "--clear-groups", "--inh-caps=-all," + c,
            "--ambient-caps=-all," + c, "--bounding-set=-all," + c, "--"] + list(argv)


def as_nobody():
    return ["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups"]


def run(argv, timeout=120):
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                          text=True, timeout=timeout)


def report_of(argv, timeout=120):
    """hangtrace --json - under argv's wrapper: (returncode, report dict or None, stderr)."""
    r = run(argv, timeout)
    try:
        return r.returncode, json.loads(r.stdout), r.stderr
    except ValueError:
        return r.returncode, None, r.stderr + "\n(stdout not JSON)\n" + r.stdout[-2000:]


class DaemonProcess:
    """`hangtrace daemon` started in its own session; stderr goes to a file the
    test polls. stop() sends SIGTERM (as systemd does) and returns the exit code."""

    def __init__(self, argv, log_path):
        self.argv = argv
        self.log_path = log_path
        self._log = open(log_path, "w")
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=self._log,
                                     stdin=subprocess.DEVNULL, start_new_session=True)

    def log(self):
        return _read(self.log_path)

    def wait_for(self, pattern, count=1, timeout=90.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.findall(pattern, self.log(), re.M)
            if len(found) >= count:
                return found
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError("no %r (x%d) from the daemon (rc=%s) within %.0fs:\n%s"
                             % (pattern, count, self.proc.poll(), timeout, self.log()))

    def daemon_pid(self):
        """The hangtrace process itself (unshare/sh exec into it: the same pid)."""
        return self.proc.pid

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        self._log.close()
        return self.proc.returncode


class DeployFilesAgree(unittest.TestCase):
    """No root needed: the files say the same thing."""

    def test_unit_daemonset_and_docs_grant_the_same_capabilities(self):
        bounding, ambient = unit_capabilities()
        documented = documented_capabilities()
        self.assertTrue(documented, "no capability table under '## Capabilities' in " + DOC)
        self.assertEqual(sorted(bounding), sorted(ambient), UNIT)
        self.assertEqual(sorted(bounding), sorted(documented), "the unit vs docs/deploy.md's table")
        text = _read(DAEMONSET)
        added = re.search(r'^\s*add: \[(.*)\]\s*$', text, re.M)
        self.assertIsNotNone(added, DAEMONSET)
        k8s = sorted("CAP_" + c.strip().strip('"') for c in added.group(1).split(","))
        self.assertEqual(k8s, sorted(documented), "the DaemonSet vs docs/deploy.md's table")
        self.assertRegex(text, r'drop: \["ALL"\]')
        for required in ["CAP_BPF", "CAP_PERFMON", "CAP_SYS_PTRACE", "CAP_DAC_READ_SEARCH"]:
            self.assertIn(required, documented)

    def test_unit_keeps_its_hardening(self):
        for directive, value in [("DynamicUser", "yes"), ("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"),
                                 ("ProtectHome", "read-only"), ("StateDirectory", "hangtrace"),
                                 ("ReadWritePaths", "/var/lib/hangtrace"), ("Restart", "always"),
                                 ("KillSignal", "SIGTERM"), ("PrivateTmp", "yes"), ("UMask", "0077"),
                                 ("RestrictNamespaces", "net")]:
            self.assertEqual(unit_directive(directive), [value], directive)
        exec_start = unit_directive("ExecStart")
        self.assertEqual(len(exec_start), 1)
        self.assertTrue(exec_start[0].startswith("/usr/local/bin/hangtrace daemon "), exec_start)
        # Each of these would break the daemon (docs/deploy.md says how).
        for breaking in ["ProcSubset", "ProtectProc", "ProtectKernelLogs", "ProtectClock", "PrivateDevices",
                         "DevicePolicy", "DeviceAllow", "PrivateUsers", "PrivateNetwork", "LimitMEMLOCK"]:
            self.assertEqual(unit_directive(breaking), [], breaking)

    def test_daemonset_security_context(self):
        text = _read(DAEMONSET)
        for needle in ["hostPID: true", "privileged: false", "allowPrivilegeEscalation: false",
                       "readOnlyRootFilesystem: true", "containerPort: 9464", "- 0.0.0.0:9464",
                       "memory: 128Mi", "path: /sys/kernel/btf", "path: /var/lib/hangtrace",
                       'prometheus.io/scrape: "true"']:
            self.assertIn(needle, text)
        self.assertNotIn("/sys/kernel/debug", text.replace("No /sys/kernel/debug", ""))

    def test_alert_rules_use_metrics_the_daemon_exports(self):
        exported = set(re.findall(r'\.Name\("(hangtrace_[a-z_]+)"\)', _read(METRICS_SOURCE)))
        self.assertIn("hangtrace_hang_active", exported)
        used = set(re.findall(r"\b(hangtrace_[a-z_]+)", _read(ALERTS)))
        for name in used:
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            self.assertTrue(name in exported or base in exported, "alerts.yml uses %s, not exported" % name)
        for expected in ["hangtrace_hang_active", "hangtrace_process_deaths_total",
                         "hangtrace_bundles_written_total", "hangtrace_dropped_events_total",
                         "hangtrace_daemon_cpu_seconds_total", "hangtrace_daemon_resident_memory_bytes",
                         "hangtrace_gpu_idle_seconds_total", "hangtrace_hangs_detected_total"]:
            self.assertIn(expected, used)


@requires_bpf_and_torch
class DaemonUnderTheUnitsCapabilities(ScenarioTestCase):
    def setUp(self):
        super().setUp()
        bounding, _ = unit_capabilities()
        self.caps = bounding
        self.bin = hangtrace_bin()
        # Not under /tmp or /var/tmp (the sandbox empties them), not on a
        # read-only root: /dev/shm is its own mount, as /var/lib/hangtrace
        # is a ReadWritePaths= one.
        self.state = tempfile.mkdtemp(prefix="hangtrace-deploy-", dir="/dev/shm")
        os.chown(self.state, SERVICE_UID, SERVICE_UID)   # StateDirectory= belongs to the service
        self.bundles = os.path.join(self.state, "bundles")
        self.daemons = []
        if self.bin.startswith(("/tmp/", "/var/tmp/")):
            shutil.copy2(self.bin, os.path.join(self.state, "hangtrace"))
            self.bin = os.path.join(self.state, "hangtrace")

    def tearDown(self):
        for d in self.daemons:
            d.stop()
        super().tearDown()
        shutil.rmtree(self.state, ignore_errors=True)

    def start_daemon(self, caps, match, *extra, sandbox=True):
        argv = [self.bin, "daemon", "--match", match, "--hang-after", "5", "--check-every", "1",
                "--scan-every", "0.5", "--bundle-dir", self.bundles, "--metrics", "127.0.0.1:0"] + list(extra)
        argv = as_unit(self.state, caps, argv) if sandbox else with_caps(caps, argv)
        d = DaemonProcess(argv, os.path.join(self.state, "daemon-%d.log" % len(self.daemons)))
        self.daemons.append(d)
        return d

    def hung_job_of_nobody(self):
        job = self.start("fork_inherited_lock.py", wrapper=as_nobody(), env={"HOME": "/tmp"})
        marker = parse_marker(job.wait_for_line("READY"))
        main, workers = marker["main"][0], marker["workers"]
        wait_until_blocked(workers, main_syscalls=[SYS_FUTEX])
        wait_until_blocked(main, main_syscalls=[SYS_POLL])
        return main, workers

    def test_bundles_a_hung_job_of_another_user_with_every_stack(self):
        main, workers = self.hung_job_of_nobody()
        d = self.start_daemon(self.caps, own_match("fork_inherited_lock.py"))
        ready = d.wait_for(r"ready: .* metrics on http://(127\.0\.0\.1:\d+)/metrics")[0]
        # What it really holds: exactly the unit's capabilities, no new privileges.
        status = _read("/proc/%d/status" % d.daemon_pid())
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        self.assertEqual(int(fields["CapEff"], 16), cap_mask(self.caps), status)
        self.assertEqual(int(fields["CapBnd"], 16), cap_mask(self.caps), status)
        self.assertEqual(fields["NoNewPrivs"].strip(), "1", status)
        self.assertEqual(fields["Uid"].split()[1], str(SERVICE_UID), status)
        d.wait_for(r"tracking job %d \(" % main)
        d.wait_for(r"bundle written: (\S+) \(hang, orphaned-lock")
        # The gauges are refreshed every second.
        deadline = time.monotonic() + 10
        while True:
            metrics = urllib.request.urlopen("http://%s/metrics" % ready, timeout=10).read().decode()
            if 'hangtrace_hang_active{cause="orphaned-lock"} 1' in metrics or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        self.assertIn('hangtrace_bundles_written_total{trigger="hang"} 1', metrics)
        self.assertIn('hangtrace_hang_active{cause="orphaned-lock"} 1', metrics)
        self.assertEqual(d.stop(), 0, d.log())
        self.assertNotIn("warning", d.log())

        bundle = glob.glob(os.path.join(self.bundles, "*-%d-hang" % main))
        self.assertEqual(len(bundle), 1, os.listdir(self.bundles))
        text = _read(os.path.join(bundle[0], "report.txt"))
        report = json.loads(_read(os.path.join(bundle[0], "report.json")))
        self.assertEqual(report["limitations"], [], text)
        self.assertRegex(text, r"(?m)^    py: .*fork_inherited_lock\.py:\d+", text)
        self.assertRegex(text, r"(?m)^    native: \S+ <- \S+ <- ", text)   # unwound, not one frame
        self.assertRegex(text, r"kernel: futex_\w+ <- ", text)            # symbolized kernel stacks
        for pid in [main] + workers:
            self.assertIsNotNone(next((p for p in report["processes"] if p["pid"] == pid), None), pid)
        # UMask=0077: what the bundle says about other users' jobs is root's alone.
        for path in glob.glob(os.path.join(bundle[0], "*")):
            self.assertEqual(os.stat(path).st_mode & 0o077, 0, path)

    def test_list_hooks_and_pid_under_the_units_capabilities(self):
        main, _ = self.hung_job_of_nobody()
        # The CLI's one-shot modes still insist on uid 0 (not the daemon).
        r = run(as_unit(self.state, self.caps, [self.bin, "--list-hooks"], uid=0))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"\d+ hooks active, \d+ twins on standby, 0 unavailable", r.stdout)
        rc, report, err = report_of(as_unit(self.state, self.caps, [self.bin, "--pid", str(main), "--json", "-"],
                                            uid=0))
        self.assertEqual(rc, 2, err)
        self.assertEqual(report["verdict"]["status"], "hang", err)
        self.assertEqual(report["limitations"], [], json.dumps(report, indent=1)[:4000])

    def test_without_each_capability_its_operation_fails(self):
        """The docs' table, row by row: drop one capability, see its failure.
        CAP_SYS_ADMIN also passes the kernel's checks for CAP_BPF and
        CAP_PERFMON (bpf_capable, perfmon_capable): the rows are measured
        against the set without it, as a unit without CAP_SYS_ADMIN has it
        (its own row is test_sys_admin_...)."""
        main, workers = self.hung_job_of_nobody()
        self.assertIn("CAP_SYS_ADMIN", self.caps)
        base = [c for c in self.caps if c != "CAP_SYS_ADMIN"]
        root_bundles = os.path.join(tempfile.mkdtemp(prefix="hangtrace-deploy-root-", dir="/dev/shm"), "b")
        self.addCleanup(shutil.rmtree, os.path.dirname(root_bundles), True)

        def without(cap):
            self.assertIn(cap, base)
            return [c for c in base if c != cap]

        def daemon_refuses(caps):
            r = run(with_caps(caps, [self.bin, "daemon", "--match", "x", "--bundle-dir", root_bundles,
                                     "--metrics", ""]), timeout=30)
            self.assertEqual(r.returncode, 1, r.stderr)
            return r.stderr

        # With CAP_SYS_ADMIN, neither CAP_BPF nor CAP_PERFMON is asked for.
        r = run(with_caps(["CAP_SYS_ADMIN", "CAP_SYS_PTRACE", "CAP_DAC_READ_SEARCH"], [self.bin, "--list-hooks"]))
        self.assertEqual(r.returncode, 0, r.stderr)

        # CAP_BPF, CAP_PERFMON: nothing loads; the daemon says which is missing.
        for cap in ["CAP_BPF", "CAP_PERFMON"]:
            self.assertIn("missing " + cap + " (", daemon_refuses(without(cap)))
            r = run(with_caps(without(cap), [self.bin, "--list-hooks"]))
            self.assertNotEqual(r.returncode, 0, r.stdout)
            self.assertIn("Operation not permitted", r.stderr)

        def limitations(caps, *extra):
            rc, report, err = report_of(with_caps(caps, [self.bin, "--pid", str(main), "--json", "-"] +
                                                  list(extra)))
            self.assertIsNotNone(report, err)
            return report["limitations"], report

        # CAP_SYS_PTRACE: no Python stacks (process_vm_readv), no syscalls,
        # nothing through /proc/PID/root; the daemon refuses to start.
        lim, report = limitations(without("CAP_SYS_PTRACE"))
        self.assertTrue(any("syscalls of the threads of %d unknown: Operation not permitted" % main in l
                            for l in lim), lim)
        self.assertTrue(any("/proc/%d/root/dev/shm: Permission denied" % main in l for l in lim), lim)
        threads = [t for p in report["processes"] for t in p["threads"]]
        self.assertFalse(any(t.get("python_stack") for t in threads), "Python stacks without CAP_SYS_PTRACE")
        self.assertIn("missing CAP_SYS_PTRACE (", daemon_refuses(without("CAP_SYS_PTRACE")))

        # CAP_DAC_READ_SEARCH: another user's 0500 /proc/PID/fd and 0400
        # /proc/PID/task/*/syscall, auxv (native stacks).
        lim, _ = limitations(without("CAP_DAC_READ_SEARCH"))
        self.assertIn("no fds of %d: failed to list /proc/%d/fd: Permission denied" % (main, main), lim)
        self.assertTrue(any(l.startswith("native stacks of %d not unwound" % main) for l in lim), lim)
        self.assertIn("missing CAP_DAC_READ_SEARCH (", daemon_refuses(without("CAP_DAC_READ_SEARCH")))

        # CAP_SYSLOG: /proc/kallsyms shows zeros (unless the sysctls open it).
        lim, _ = limitations(without("CAP_SYSLOG"))
        hidden = [l for l in lim if l.startswith("kernel stacks not symbolized")]
        self.assertEqual(bool(hidden), kallsyms_needs_syslog(), lim)

        # The set without CAP_SYS_ADMIN misses nothing for this job (host
        # network namespace, no GPU library).
        lim, _ = limitations(base)
        self.assertEqual(lim, [])

    def test_sys_admin_uprobes_and_other_network_namespaces(self):
        """CAP_SYS_ADMIN: uprobes (perf_event_open of the uprobe PMU, kernels
        with ba677dbe77af) and setns into a job's network namespace."""
        stub = os.environ.get("HANGTRACE_STUB_CUDA") or os.path.join(
            os.path.dirname(self.bin), "tests", "gpu_stubs", "libcuda.so.1")
        self.assertTrue(os.path.exists(stub), "the stub libcuda (tests/gpu_stubs) is not built: " + stub)
        cuda = self.start("stub_cuda_sync.py", stub, wrapper=as_nobody())
        cuda_pid = parse_marker(cuda.wait_for_line("READY"))["main"][0]
        wait_until_blocked(cuda_pid, main_syscalls=[SYS_READ], all_threads=False)

        def uprobes(caps):
            rc, report, err = report_of(with_caps(caps, [self.bin, "--pid", str(cuda_pid), "--duration", "1",
                                                         "--json", "-"]))
            self.assertIsNotNone(report, err)
            libs = (report.get("live") or {}).get("gpu", {}).get("libraries") or []
            counts = [int(m.group(1)) for l in libs for m in [re.search(r": (\d+) uprobes", l)] if m]
            self.assertEqual(len(counts), 1, libs)
            return counts[0]

        self.assertGreater(uprobes(self.caps), 0)
        without = [c for c in self.caps if c != "CAP_SYS_ADMIN"]
        self.assertIn("CAP_BPF", without)
        release = tuple(int(x) for x in re.findall(r"\d+", os.uname().release)[:2])
        if release >= (6, 16):
            self.assertEqual(uprobes(without), 0, "uprobes attached without CAP_SYS_ADMIN on %s"
                             % os.uname().release)

        # A job in its own network namespace: its unix-socket peers are read
        # from inside that namespace.
        job = self.start("unix_peer_wait.py", wrapper=["unshare", "--net"])
        marker = parse_marker(job.wait_for_line("READY"))
        main, child = marker["main"][0], marker["workers"][0]
        wait_until_blocked(main, main_syscalls=[SYS_RECVFROM])

        def peer_limitations(caps):
            rc, report, err = report_of(with_caps(caps, [self.bin, "--pid", str(main), "--json", "-"]))
            self.assertIsNotNone(report, err)
            return [l for l in report["limitations"] if "network namespace" in l]

        self.assertEqual(peer_limitations(self.caps), [])
        self.assertEqual(peer_limitations(without),
                         ["unix socket peers unknown: failed to enter the network namespace /proc/%d/ns/net: "
                          "Operation not permitted" % main])


if __name__ == "__main__":
    unittest.main()
