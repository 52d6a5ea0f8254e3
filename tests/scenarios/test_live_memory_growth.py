"""Live: a training loop that keeps `loss` with its autograd graph grows RSS.

`hangtrace --pid P --duration 8` watches the running loop; the report must
name the training process in a memory-growth finding. The control -- the same
loop keeping loss.item() -- must not get one.
"""
import unittest

from scenario_support import ScenarioTestCase, parse_marker, requires_bpf_and_torch

MIB = 1024 * 1024
DURATION_S = 8


def rss_bytes(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS for %d" % pid)


@requires_bpf_and_torch
class LiveMemoryGrowth(ScenarioTestCase):
    def watch(self, keep):
        job = self.start("loss_history_leak.py", "--keep", keep)
        main = parse_marker(job.wait_for_line("READY"))["main"][0]
        self.assertEqual(main, job.pid)
        before = rss_bytes(main)
        report = self.hangtrace(main, "--duration", DURATION_S, timeout=DURATION_S + 120)
        after = rss_bytes(main)
        self.assertTrue(job.alive(), job.stderr_tail())
        live = report.json.get("live")
        self.assertIsInstance(live, dict, "no live block\n" + report.dump())
        self.assertGreaterEqual(live.get("duration_s", 0), DURATION_S - 1, report.dump())
        return main, before, after, report

    def test_loss_kept_with_graph_is_memory_growth(self):
        main, before, after, report = self.watch("graph")
        # Precondition, seen from /proc: it really grew while watched.
        self.assertGreaterEqual(after - before, 256 * MIB, "precondition: RSS %d -> %d" % (before, after))
        found = report.of_kind("memory-growth")
        self.assertEqual(len(found), 1, "expected one memory-growth finding\n" + report.dump())
        f = found[0]
        d = f.get("details") or {}
        self.assertEqual(f.get("pids"), [main], report.dump())
        self.assertEqual(d.get("pid"), main, report.dump())
        self.assertEqual(f.get("severity"), "critical", report.dump())
        self.assertEqual(report.returncode, 2, report.dump())
        self.assertGreater(d.get("growth_bytes_per_s", 0), 0, report.dump())
        # What hangtrace saw lies within what /proc saw around the run.
        self.assertGreaterEqual(d.get("rss_end_bytes", 0) - d.get("rss_start_bytes", 0), 128 * MIB,
                                report.dump())
        self.assertGreaterEqual(d.get("rss_start_bytes", 0), before - 64 * MIB, report.dump())
        self.assertLessEqual(d.get("rss_end_bytes", 0), after + 64 * MIB, report.dump())

    def test_loss_item_is_not_memory_growth(self):
        main, before, after, report = self.watch("item")
        self.assertLess(after - before, 32 * MIB, "precondition: RSS %d -> %d" % (before, after))
        self.assertFalse(report.of_kind("memory-growth"), report.dump())
        self.assertEqual(report.returncode, 0, report.dump())
        self.assertNotEqual(report.json["verdict"]["status"], "hang", report.dump())


if __name__ == "__main__":
    unittest.main()
