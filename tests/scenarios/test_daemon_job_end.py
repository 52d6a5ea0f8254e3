"""hangtrace daemon: one job's end is no incident for the others.

A stuck job and a short one are tracked, with --hang-after far away. When
the short one exits (status 0), nothing is bundled: before the fix, ending a
job ran every other job's progress check at time ~2^64, and each stuck one
got a "hang" bundle at once ("no progress for 18446742270 s", named 2611...).
"""
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

from scenario_support import (SYS_RECVFROM, ScenarioTestCase, hangtrace_bin, own_match, parse_marker,
                              requires_bpf_and_torch, wait_until_blocked)


@requires_bpf_and_torch
class DaemonJobEnd(ScenarioTestCase):
    def test_an_ordinary_end_bundles_nothing(self):
        stuck = self.start("unix_peer_wait.py")
        stuck_main = parse_marker(stuck.wait_for_line("READY"))["main"][0]
        wait_until_blocked(stuck_main, main_syscalls=[SYS_RECVFROM])

        state = tempfile.mkdtemp(prefix="hangtrace-jobend-")
        self.addCleanup(shutil.rmtree, state, True)
        bundles = os.path.join(state, "bundles")
        log_path = os.path.join(state, "daemon.log")
        log = open(log_path, "w")
        daemon = subprocess.Popen([hangtrace_bin(), "daemon", "--match", own_match("unix_peer_wait.py"),
                                   "--hang-after", "300", "--scan-every", "0.2", "--bundle-dir", bundles,
                                   "--metrics", ""], stdout=subprocess.DEVNULL, stderr=log,
                                  stdin=subprocess.DEVNULL, start_new_session=True)

        def stop():
            if daemon.poll() is None:
                daemon.send_signal(signal.SIGTERM)
                try:
                    daemon.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    daemon.kill()
                    daemon.wait()
            log.close()
        self.addCleanup(stop)

        def wait_log(pattern, timeout=60.0):
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                with open(log_path) as f:
                    text = f.read()
                if re.search(pattern, text, re.M):
                    return text
                self.assertIsNone(daemon.poll(), text)
                time.sleep(0.05)
            raise AssertionError("no %r within %.0fs:\n%s" % (pattern, timeout, text))

        wait_log(r"tracking job %d \(" % stuck_main)
        short = self.start("unix_peer_wait.py", "--exit-after", "2")
        short_main = parse_marker(short.wait_for_line("READY"))["main"][0]
        wait_log(r"tracking job %d \(" % short_main)
        text = wait_log(r"job %d \(python3\) ended" % short_main)
        time.sleep(1.0)   # a bundle would be written right after the end
        stop()
        with open(log_path) as f:
            text = f.read()
        self.assertEqual(daemon.returncode, 0, text)
        self.assertNotIn("capturing a bundle", text)
        self.assertFalse(os.path.isdir(bundles) and os.listdir(bundles), text)


if __name__ == "__main__":
    unittest.main()
