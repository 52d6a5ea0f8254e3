"""A DataLoader worker waits in recv() on a local server that never answers."""
import unittest

from scenario_support import (SYS_ACCEPT, SYS_ACCEPT4, SYS_RECVFROM, ScenarioTestCase,
                              parse_marker, requires_bpf_and_torch, wait_until_blocked)


@requires_bpf_and_torch
class TcpSilentServer(ScenarioTestCase):
    def test_worker_stalled_on_a_silent_peer(self):
        # The server is its own process, outside the job's process tree.
        server = self.start("tcp_silent_server.py", "serve")
        listening = parse_marker(server.wait_for_line("LISTENING"))
        server_pid, port = listening["pid"][0], listening["port"][0]
        self.assertEqual(server_pid, server.pid)

        job = self.start("tcp_silent_server.py", "train", "--port", port)
        marker = parse_marker(job.wait_for_line("READY"))
        main, workers = marker["main"][0], marker["workers"]
        self.assertEqual(len(workers), 1, marker)
        worker = workers[0]
        # Parked in recv() for longer than --stall-after.
        wait_until_blocked(worker, main_syscalls=[SYS_RECVFROM], settle=1.0)
        wait_until_blocked(server_pid, main_syscalls=[SYS_ACCEPT, SYS_ACCEPT4])

        report = self.hangtrace(main, "--stall-after", "0.5")
        self.assertNotEqual(report.returncode, 1, report.dump())
        waits = [f for f in report.of_kind("network-wait") if worker in (f.get("pids") or [])]
        self.assertEqual(len(waits), 1, "no network-wait naming worker %d\n%s" % (worker, report.dump()))
        details = waits[0].get("details") or {}
        self.assertEqual(details.get("remote"), "127.0.0.1:%d" % port, report.dump())
        self.assertTrue(str(details.get("local", "")).startswith("127.0.0.1:"), report.dump())
        self.assertIn(server_pid, details.get("peer_pids") or [], report.dump())
        self.assertGreaterEqual(details.get("blocked_s", 0), 0.5, report.dump())
        # The server is a peer, not part of the job.
        entry = report.process(server_pid)
        if entry is not None:
            self.assertEqual(entry.get("role"), "peer", report.dump())


if __name__ == "__main__":
    unittest.main()
