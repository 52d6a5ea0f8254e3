"""hangtrace merge: one bundle per gloo rank, as if from two hosts.

The gloo workload's rank 1 skips the last all_reduce and parks in
wait_for_checkpoint_upload while rank 0 waits in all_reduce. Each rank is
traced on its own (`hangtrace --pid <rank> --bundle DIR`), so neither bundle
alone shows both ranks; `hangtrace merge` of the two must name rank 1 as
absent from all_reduce, say what it does instead, and exit 2.
"""
import glob
import json
import os
import subprocess
import unittest

from scenario_support import GlooJobClass, hangtrace_bin, requires_bpf_and_torch, run_hangtrace


def run_merge(*args, timeout=120):
    argv = [hangtrace_bin(), "merge"] + [str(a) for a in args]
    completed = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                               timeout=timeout, text=True)
    return argv, completed


def dump(argv, completed):
    return "%s\nexit code %d\n--- stderr ---\n%s\n--- stdout ---\n%s" % (
        " ".join(argv), completed.returncode, completed.stderr, completed.stdout)


@requires_bpf_and_torch
class MergeRanks(GlooJobClass, unittest.TestCase):
    maxDiff = None
    tmp_prefix = "hangtrace-merge-"

    @classmethod
    def examine(cls, marker):
        cls.rank0, cls.rank1 = marker["rank0"][0], marker["rank1"][0]
        cls.bundles = os.path.join(cls.tmp, "bundles")
        # One bundle per rank, as each host's hangtrace would write it: --subtree
        # keeps a rank's pid from standing for the whole job it belongs to.
        cls.traces = [run_hangtrace(pid, "--subtree", "--bundle", cls.bundles) for pid in (cls.rank0, cls.rank1)]
        cls.paths = sorted(glob.glob(os.path.join(cls.bundles, "*")))
        cls.merge_argv, cls.merged = run_merge(*cls.paths, "--json", "-")
        try:
            cls.report = json.loads(cls.merged.stdout)
        except ValueError:
            cls.report = None

    def setUp(self):
        for trace in self.traces:
            self.assertNotEqual(trace.returncode, 1, trace.dump())
        self.assertEqual(len(self.paths), 2, "expected one bundle per rank: %s" % self.paths)
        self.assertIsNotNone(self.report, dump(self.merge_argv, self.merged))
        self.assertTrue(self.job.alive(), self.job.stderr_tail())

    def only_job(self):
        jobs = self.report.get("jobs") or []
        self.assertEqual(len(jobs), 1, dump(self.merge_argv, self.merged))
        self.assertEqual(jobs[0].get("world_size"), 2, dump(self.merge_argv, self.merged))
        return jobs[0]

    def test_names_rank_1_absent_from_all_reduce(self):
        out = dump(self.merge_argv, self.merged)
        self.assertEqual(self.merged.returncode, 2, out)
        self.assertEqual(self.report.get("schema"), "hangtrace.merge/1", out)
        self.assertEqual(self.report["verdict"]["status"], "hang", out)
        job = self.only_job()
        self.assertEqual(job.get("collective"), "all_reduce", out)
        self.assertEqual(job.get("backend"), "gloo", out)
        self.assertEqual(job.get("waiting"), [0], out)
        absent = job.get("absent") or []
        self.assertEqual([(a.get("rank"), a.get("pid"), a.get("has_bundle")) for a in absent],
                         [(1, self.rank1, True)], out)
        self.assertIn("wait_for_checkpoint_upload", absent[0].get("doing") or "", out)
        self.assertEqual(job.get("missing"), [], out)
        summary = self.report["verdict"]["summary"]
        self.assertTrue(summary.startswith("rank 1 (host "), out)
        self.assertIn("pid %d) never joined all_reduce" % self.rank1, summary)
        self.assertIn("wait_for_checkpoint_upload", summary)
        self.assertEqual(self.report.get("warnings"), [], out)

    def test_each_rank_comes_from_its_own_bundle(self):
        out = dump(self.merge_argv, self.merged)
        ranks = {r.get("rank"): r for r in self.only_job().get("ranks") or []}
        self.assertEqual(sorted(ranks), [0, 1], out)
        self.assertEqual(ranks[0]["pid"], self.rank0, out)
        self.assertEqual(ranks[1]["pid"], self.rank1, out)
        self.assertNotEqual(ranks[0]["bundle"], ranks[1]["bundle"], out)
        self.assertTrue(ranks[0]["in_collective"], out)
        self.assertEqual(ranks[0]["collective"]["op"], "all_reduce", out)
        self.assertGreater(ranks[0]["collective"]["blocked_s"] or 0, 0, out)
        self.assertFalse(ranks[1]["in_collective"], out)
        first = self.only_job().get("first_stall")
        self.assertIsInstance(first, dict, out)
        self.assertIn(first.get("rank"), (0, 1), out)

    def test_parent_directory_and_text_report(self):
        argv, completed = run_merge(self.bundles)
        out = dump(argv, completed)
        self.assertEqual(completed.returncode, 2, out)
        self.assertIn("verdict: HANG: rank 1 (host", completed.stdout, out)
        self.assertIn("missing from all_reduce:", completed.stdout, out)

    def test_an_unreadable_source_is_one_line_and_the_rest_is_merged(self):
        bogus = os.path.join(self.tmp, "not-a-bundle")
        os.makedirs(bogus, exist_ok=True)
        argv, completed = run_merge(self.paths[0], bogus)
        out = dump(argv, completed)
        lines = completed.stderr.strip().splitlines()
        self.assertEqual(lines, ["hangtrace: skipped %s: no bundle in that directory (no meta.json in it or below)"
                                 % bogus], out)
        # Rank 0's bundle alone: rank 1 sent none, so it is absent.
        self.assertEqual(completed.returncode, 2, out)
        self.assertIn("no bundle from rank 1 (of 2)", completed.stdout, out)
        self.assertIn("warning: skipped %s" % bogus, completed.stdout, out)

        argv, completed = run_merge(bogus)
        out = dump(argv, completed)
        self.assertEqual(completed.returncode, 1, out)
        self.assertEqual(completed.stderr.strip().splitlines()[-1],
                         "hangtrace: failed to merge: no bundle could be read (1 source skipped)", out)

if __name__ == "__main__":
    unittest.main()
