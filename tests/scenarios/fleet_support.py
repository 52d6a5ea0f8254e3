"""What the fleet scenarios share: the engines a fleet already runs (a real
Prometheus, a real Alertmanager, a webhook they deliver to), and hosts made of
network namespaces on a private bridge, each with a daemon of its own.

Hosts (NetnsHosts): each is a network namespace (`ip netns add`) whose eth0 is
one end of a veth pair, the other end on a bridge in the test's own namespace
(which holds the bridge's address: Prometheus and `hangtrace merge` reach every
host from there); a UTS namespace per process gives it the host's name; and a
cgroup per host holds its job's processes, so that the daemon of a host
(`--cgroup` of that host) tracks them and no other host's, as on a real
machine where the daemon sees only its own processes.
"""
import http.server
import ipaddress
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import urllib.parse
import urllib.request

from scenario_support import Workload, free_port, remove_cgroup, wait_for

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


class MonitoringMixin:
    """For a ScenarioTestCase: a real Prometheus and Alertmanager, started as
    its workloads (killed when the test ends), configured in self.prom_dir."""

    def require_prometheus(self):
        if not os.access(PROMETHEUS, os.X_OK):
            self.skipTest("needs the prometheus server (Debian package prometheus)")
        self.prom_dir = tempfile.mkdtemp(prefix="hangtrace-prom-")
        self.addCleanup(shutil.rmtree, self.prom_dir, ignore_errors=True)

    def write_file_sd(self, targets, name="targets.json"):
        """Prometheus's file-based service discovery: `targets` (HOST:PORT
        each) written atomically where start_prometheus(file_sd=...) looks."""
        path = os.path.join(self.prom_dir, name)
        with open(path + ".tmp", "w") as f:
            json.dump([{"targets": list(targets), "labels": {}}], f)
        os.replace(path + ".tmp", path)
        return path

    def start_prometheus(self, target=None, alertmanager=None, file_sd=None):
        """A real Prometheus scraping every second `target` (HOST:PORT) or the
        targets of the file_sd JSON file (re-read every second); with
        `alertmanager` (HOST:PORT) it also evaluates the shipped alert rules
        (scripts/deploy/alerts.yml, their `for:` cut to 2 s) and sends to it."""
        port = free_port()
        config = os.path.join(self.prom_dir, "prometheus.yml")
        text = ("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                "scrape_configs:\n  - job_name: hangtrace\n")
        if file_sd:
            text += "    file_sd_configs:\n      - files: ['%s']\n        refresh_interval: 1s\n" % file_sd
        else:
            text += "    static_configs:\n      - targets: ['%s']\n" % target
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

    def token_file(self, name, token):
        path = os.path.join(self.prom_dir, name)
        with open(path, "w") as f:
            f.write(token + "\n")
        os.chmod(path, 0o600)
        return path


# ---- hosts as network namespaces ------------------------------------------------

def _run(*argv):
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=30)


def _cgroup_hierarchy():
    """(mount point, hierarchy name as /proc/PID/cgroup names it) of a cgroup
    hierarchy a host's cgroup can be made in: v1 "pids" or "cpu", else v2."""
    with open("/proc/self/mounts") as f:
        mounts = [line.split() for line in f]
    for controller in ("pids", "cpu"):
        for m in mounts:
            if m[2] == "cgroup" and controller in m[3].split(","):
                return m[1], controller
    for m in mounts:
        if m[2] == "cgroup2":
            return m[1], ""
    return None, None


def netns_skip_reason():
    """Why hosts cannot be made here, or None."""
    if os.geteuid() != 0:
        return "needs root to make network namespaces"
    for tool in ("ip", "nsenter", "unshare"):
        if not shutil.which(tool):
            return "needs %s (iproute2, util-linux)" % tool
    if _cgroup_hierarchy()[0] is None:
        return "needs a cgroup hierarchy to make a host's cgroup in"
    probe = "htprobe%d" % os.getpid()
    made = _run("ip", "netns", "add", probe)
    if made.returncode != 0:
        return "cannot make a network namespace: " + made.stderr.strip()
    _run("ip", "netns", "del", probe)
    return None


class Host:
    def __init__(self, name, netns, address, cgroup_dir, cgroup_path):
        self.name = name                # its hostname (a UTS namespace of each process)
        self.netns = netns              # /run/netns/<netns>
        self.address = address          # eth0's IPv4 address, on the bridge
        self.cgroup_dir = cgroup_dir    # the directory its job's processes join
        self.cgroup_path = cgroup_path  # that cgroup as /proc/PID/cgroup shows it

    def wrap(self, argv, in_cgroup=True):
        """`argv` run on this host: in its network and a UTS namespace named
        after it, in the host's cgroup unless in_cgroup is False. nsenter, not
        `ip netns exec`, which would mount a sysfs of its own over /sys (and
        hide /sys/fs/cgroup from the daemon). Each step execs: the pid is
        argv's. The cgroup is joined last: `hostname` (a child of the shell)
        runs outside it, where no daemon takes it for a job."""
        enter = 'hostname "$1" && shift && exec "$@"'
        if in_cgroup:
            enter = 'hostname "$1" && echo $$ > "$2/cgroup.procs" && shift 2 && exec "$@"'
        return (["nsenter", "--net=/run/netns/" + self.netns, "--", "unshare", "--uts", "--", "sh", "-c", enter,
                 "sh", self.name] + ([self.cgroup_dir] if in_cgroup else []) + [str(a) for a in argv])


class NetnsHosts:
    """`count` hosts h1..hN on a private bridge. Made on construction; close()
    removes the namespaces, the bridge and the cgroups (killing what is left
    in them). Names carry the test's pid, so parallel runs do not collide."""

    def __init__(self, count):
        tag = os.getpid()
        self.bridge = "htb%d" % tag
        # A /24 of 10.200.0.0/13, chosen by pid: parallel runs get different ones.
        net = ipaddress.ip_network("10.%d.%d.0/24" % (200 + (tag >> 8) % 8, tag % 256))
        self.gateway = str(net.network_address + 1)
        mount, self.hierarchy = _cgroup_hierarchy()
        self.cgroup_root = os.path.join(mount, "hangtrace-hosts-%d" % tag)
        self.hosts = []
        self._links, self._netns = [], []
        try:
            self._ip("link", "add", self.bridge, "type", "bridge")
            self._links.append(self.bridge)
            self._ip("addr", "add", "%s/24" % self.gateway, "dev", self.bridge)
            self._ip("link", "set", self.bridge, "up")
            os.mkdir(self.cgroup_root)
            for n in range(1, count + 1):
                self.hosts.append(self._add_host(n, net, tag))
        except BaseException:
            self.close()
            raise

    def _ip(self, *args):
        done = _run("ip", *args)
        if done.returncode != 0:
            raise AssertionError("ip %s: %s" % (" ".join(args), done.stderr.strip()))

    def _add_host(self, n, net, tag):
        netns, veth = "ht%dh%d" % (tag, n), "htv%dh%d" % (tag, n)
        address = str(net.network_address + 10 + n)
        self._ip("netns", "add", netns)
        self._netns.append(netns)
        self._ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns)
        self._links.append(veth)
        self._ip("link", "set", veth, "master", self.bridge, "up")
        self._ip("-n", netns, "addr", "add", "%s/24" % address, "dev", "eth0")
        self._ip("-n", netns, "link", "set", "eth0", "up")
        self._ip("-n", netns, "link", "set", "lo", "up")
        name = "h%d" % n
        cgroup_dir = os.path.join(self.cgroup_root, name, "job")
        os.makedirs(cgroup_dir)
        return Host(name, netns, address, cgroup_dir, self._cgroup_path_of(cgroup_dir))

    def _cgroup_path_of(self, cgroup_dir):
        """The cgroup's path as /proc/PID/cgroup shows it, read off a process
        put in it (relative to the cgroup namespace's root, which a directory
        name alone does not say)."""
        shown = _run("sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec cat /proc/self/cgroup', cgroup_dir)
        for line in shown.stdout.splitlines():
            _, controllers, path = line.split(":", 2)
            if (self.hierarchy in controllers.split(",")) if self.hierarchy else controllers == "":
                return path
        raise AssertionError("no %r line in /proc/self/cgroup: %r" % (self.hierarchy, shown.stdout))

    def close(self):
        for host in self.hosts:
            remove_cgroup(host.cgroup_dir)
            remove_cgroup(os.path.dirname(host.cgroup_dir))
        if os.path.isdir(self.cgroup_root):
            remove_cgroup(self.cgroup_root)
        for netns in self._netns:
            _run("ip", "netns", "del", netns)   # its eth0 goes, and so the veth's other end
        for link in reversed(self._links):
            _run("ip", "link", "del", link)
        self.hosts, self._links, self._netns = [], [], []
