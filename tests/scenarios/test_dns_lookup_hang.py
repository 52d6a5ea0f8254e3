"""A DataLoader worker waits in getaddrinfo() on a local resolver that never answers."""
import os
import shutil
import tempfile
import unittest

from scenario_support import (PYTHON, SYS_POLL, ScenarioTestCase, parse_marker, requires_bpf_and_torch,
                              wait_until_blocked, workload)


def resolver_address():
    """A 127.0.0.x of its own (the host may run a stub resolver on 127.0.0.53)."""
    return "127.0.0.%d" % (100 + os.getpid() % 100)


@unittest.skipUnless(shutil.which("unshare") and shutil.which("mount"), "needs unshare(1) and mount(8)")
@requires_bpf_and_torch
class DnsLookupHang(ScenarioTestCase):
    def test_worker_in_getaddrinfo_names_the_resolver(self):
        addr = resolver_address()
        server = self.start("dns_lookup_hang.py", "resolver", addr)
        listening = parse_marker(server.wait_for_line("LISTENING"))
        resolver_pid = listening["pid"][0]
        self.assertEqual(resolver_pid, server.pid)

        # The job sees its own resolv.conf (a bind mount in its own mount
        # namespace); the host's stays as it is.
        conf_dir = tempfile.mkdtemp(prefix="ht-dns-")
        self.addCleanup(shutil.rmtree, conf_dir, True)
        conf = os.path.join(conf_dir, "resolv.conf")
        with open(conf, "w") as f:
            f.write("nameserver %s\noptions timeout:30 attempts:5\n" % addr)
        job = self.start_argv([
            "unshare", "-m", "--propagation", "private", "sh", "-c",
            'mount --bind "$0" /etc/resolv.conf && exec "$@"', conf,
            PYTHON, "-u", workload("dns_lookup_hang.py"), "train"])
        marker = parse_marker(job.wait_for_line("READY"))
        main, workers = marker["main"][0], marker["workers"]
        self.assertEqual(len(workers), 1, marker)
        worker = workers[0]
        # The query reached the resolver, and the worker sits in poll() for it
        # longer than --stall-after.
        server.wait_for_line("QUERY")
        wait_until_blocked(worker, main_syscalls=[SYS_POLL], settle=1.5)

        report = self.hangtrace(main, "--stall-after", "1")
        self.assertEqual(report.returncode, 2, report.dump())
        found = [f for f in report.of_kind("dns-wait") if worker in (f.get("tids") or [])]
        self.assertEqual(len(found), 1, "no dns-wait naming worker %d\n%s" % (worker, report.dump()))
        f = found[0]
        details = f.get("details") or {}
        summary = f.get("summary", "")
        self.assertEqual(f.get("severity"), "critical", report.dump())
        self.assertIn("DNS lookup", summary, report.dump())
        self.assertIn("%s:53" % addr, summary, report.dump())
        self.assertNotIn("not on this host", summary, report.dump())
        self.assertIn("on this host", summary, report.dump())
        self.assertIn(str(resolver_pid), summary, report.dump())
        self.assertEqual(details.get("resolver"), "%s:53" % addr, report.dump())
        self.assertIn(resolver_pid, details.get("resolver_pids") or [], report.dump())
        self.assertTrue(details.get("resolver_on_this_host"), report.dump())
        # resolv.conf as the job sees it, not the host's.
        self.assertEqual(details.get("nameservers"), [addr], report.dump())
        self.assertEqual(details.get("resolv_timeout_s"), 30, report.dump())
        self.assertEqual(details.get("resolv_attempts"), 5, report.dump())
        # The lookup is not also a network-wait "not on this host".
        for n in report.of_kind("network-wait"):
            self.assertNotIn(worker, n.get("tids") or [], report.dump())
        # The resolver is a peer, not part of the job.
        entry = report.process(resolver_pid)
        if entry is not None:
            self.assertEqual(entry.get("role"), "peer", report.dump())


if __name__ == "__main__":
    unittest.main()
