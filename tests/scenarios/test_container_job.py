"""A job in its own pid and mount namespace, diagnosed from the host.

The container: `unshare --pid --fork --mount-proc --mount` with a private
64 MiB tmpfs on /dev/shm (what Docker gives without --shm-size), running
dataloader_shm_full.py, which fills it (see test_dataloader_shm_full.py), as
pid 1 of its namespace. Where the cgroup v1 memory controller is writable the
container also gets a Docker-style cgroup, /docker/<64 hex digits>.

From the host, by the host pid: the report shows both pids of each process
(NSpid), the container id from the cgroup, the container's /dev/shm -- not
the host's -- and the Python stacks of threads the interpreter knows by their
ids inside the namespace.
"""
import os
import secrets
import shutil
import unittest

from scenario_support import (MEMCG_SKIP_REASON, MEMCG_V1, PYTHON, ScenarioTestCase, Workload, host_pid,
                              ns_pids, parse_marker, remove_cgroup, requires_bpf_and_torch,
                              run_hangtrace_args, under_shell, wait_until_blocked, workload)

SHM_SIZE = 64 * 1024 * 1024
# $0: the cgroup directory the container's init enters first (as Docker puts
# the container's processes, and only those, in theirs), or "none".
CONTAINER = ["unshare", "--pid", "--fork", "--mount-proc", "--mount", "--propagation", "private",
             "sh", "-c", 'mount -t tmpfs -o size=64m tmpfs /dev/shm && '
             '{ [ "$0" = none ] || echo $$ > "$0/cgroup.procs"; } && exec "$@"']


@requires_bpf_and_torch
@unittest.skipUnless(shutil.which("unshare"), "needs unshare(1)")
class ContainerJob(ScenarioTestCase):
    @classmethod
    def setUpClass(cls):
        cls.container_id, cls.cgroup, cls.made_docker = None, None, False
        try:
            if not MEMCG_SKIP_REASON:
                docker = os.path.join(MEMCG_V1, "docker")
                cls.made_docker = not os.path.isdir(docker)
                cls.container_id = secrets.token_hex(32)
                cls.cgroup = os.path.join(docker, cls.container_id)
                os.makedirs(cls.cgroup)
            argv = CONTAINER + [cls.cgroup or "none", PYTHON, "-u", workload("dataloader_shm_full.py")]
            cls.job = Workload(*under_shell(argv))
            marker = parse_marker(cls.job.wait_for_line("READY", timeout=180))
            cls.inner = marker["main"][0]
            cls.main = host_pid(cls.inner, cls.job.pid)
            cls.marker = marker
            # Asleep in its error handler, every batch still held.
            wait_until_blocked(cls.main, all_threads=False)
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        if getattr(cls, "job", None):
            cls.job.kill()
        if cls.cgroup:
            remove_cgroup(cls.cgroup)
        if cls.made_docker:
            try:
                os.rmdir(os.path.dirname(cls.cgroup))
            except OSError:
                pass                   # someone else's container appeared there

    def setUp(self):
        super().setUp()
        self.assertTrue(self.job.alive(), self.job.stderr_tail())

    def test_precondition_a_container_with_a_full_small_dev_shm(self):
        self.assertEqual(self.inner, 1, "sh exec'd python: pid 1 of the namespace\n%s" % self.marker)
        self.assertEqual(ns_pids(self.main), [self.main, self.inner])
        self.assertEqual(self.marker["shm_size"][0], SHM_SIZE, self.marker)
        self.assertGreaterEqual(self.marker["shm_used"][0] * 100, 90 * SHM_SIZE, self.marker)
        self.assertNotEqual(os.statvfs("/dev/shm").f_blocks * os.statvfs("/dev/shm").f_frsize, SHM_SIZE,
                            "the host's /dev/shm is 64 MiB too: the test could not tell them apart")

    def test_diagnosed_from_the_host_with_both_pids(self):
        report = run_hangtrace_args(["--pid", self.main, "--json", "-"])
        self.assertNoCrash(report)
        self.assertEqual(report.returncode, 2, report.dump())
        job = self.one_job(report)
        self.assertEqual(job.get("root_pid"), self.main,
                         "the namespace's init (as under containerd-shim) is the job's root\n" + report.dump())
        entry = report.process(self.main)
        self.assertIsNotNone(entry, report.dump())
        nspids = entry.get("ns_pids")
        self.assertEqual(nspids, [self.main, self.inner], report.dump())
        self.assertLessEqual(nspids[-1], 2, report.dump())
        for p in report.json.get("processes") or []:   # every process: host pid first
            self.assertEqual((p.get("ns_pids") or [None])[0], p.get("pid"), report.dump())
            self.assertEqual(len(p.get("ns_pids")), 2, report.dump())

    def test_python_stacks_of_threads_known_by_their_container_ids(self):
        # The interpreter names its threads by their ids in the pid namespace
        # (native_thread_id, struct pthread's tid): matched through NSpid.
        report = run_hangtrace_args(["--pid", self.main, "--json", "-"])
        self.assertNoCrash(report)
        entry = report.process(self.main)
        self.assertIsNotNone(entry, report.dump())
        thread = next(t for t in entry["threads"] if t["tid"] == self.main)
        stack = thread.get("python_stack") or []
        self.assertTrue(any(f.get("file", "").endswith("dataloader_shm_full.py") for f in stack),
                        "no Python stack for the container's main thread\n" + report.dump())

    def test_the_containers_dev_shm_not_the_hosts(self):
        report = run_hangtrace_args(["--pid", self.main, "--json", "-"])
        self.assertNoCrash(report)
        self.assertEqual((report.json or {}).get("shm", {}).get("size_bytes"), SHM_SIZE, report.dump())
        found = report.of_kind("shm-exhausted")
        self.assertEqual(len(found), 1, "no shm-exhausted finding\n" + report.dump())
        details = found[0].get("details") or {}
        self.assertEqual(details.get("size_bytes"), SHM_SIZE, report.dump())
        self.assertGreaterEqual(details.get("used_bytes", 0) * 100, 90 * SHM_SIZE, report.dump())
        self.assertIn(self.main, found[0].get("pids") or [], report.dump())

    @unittest.skipIf(MEMCG_SKIP_REASON, MEMCG_SKIP_REASON)
    def test_container_id_from_the_cgroup(self):
        report = run_hangtrace_args(["--pid", self.main, "--json", "-"])
        self.assertNoCrash(report)
        entry = report.process(self.main)
        self.assertIsNotNone(entry, report.dump())
        self.assertEqual(entry.get("container_id"), self.container_id, report.dump())

    @unittest.skipIf(MEMCG_SKIP_REASON, MEMCG_SKIP_REASON)
    def test_cgroup_selects_the_job(self):
        path = "/docker/" + self.container_id     # as in /proc/PID/cgroup
        report = run_hangtrace_args(["--cgroup", path, "--json", "-"])
        self.assertNoCrash(report)
        self.assertEqual(report.returncode, 2, report.dump())
        mine = [r for r in report.reports if r.process(self.main)]
        self.assertEqual(len(mine), 1, "the container's main process is not in one report\n" + report.dump())
        self.assertEqual(len(mine[0].of_kind("shm-exhausted")), 1, report.dump())
        # Nothing outside the cgroup: every process reported is in it (but a
        # zombie -- a worker killed by SIGBUS -- has left every cgroup).
        for r in report.reports:
            for p in r.json.get("processes") or []:
                if p.get("state") == "Z":
                    continue
                with open("/proc/%d/cgroup" % p["pid"]) as f:
                    self.assertIn(":" + path + "\n", f.read(), report.dump())


if __name__ == "__main__":
    unittest.main()
