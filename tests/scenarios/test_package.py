"""The Debian package (scripts/package.sh, CPack in CMakeLists.txt) is a working tool.

scripts/package.sh builds the .deb from the build tree; `dpkg-deb -x` unpacks
it into a scratch root (and `cmake --install --prefix` installs into another).
The package holds the binary, the man page (rendered by man(1), every option
of --help in it: tests/integration/man_page_test.sh), the systemd unit naming
the installed binary and docs, the docs, and the CUPTI injection library where
the build has one. The unpacked binary reports the build's version, finds its
injection library at the installed path (launch mode hands it to the job as
CUDA_INJECTION64_PATH), and diagnoses the bundled hung job
(scripts/demo_hung_job.py) as `hangtrace demo` does: an orphaned lock, exit 2.
"""
import os
import re
import shutil
import subprocess
import tempfile
import unittest

from scenario_support import (PYTHON, REPO, SKIP_REASON, SYS_FUTEX, Report, ScenarioTestCase, Workload,
                              hangtrace_bin, parse_marker, wait_until_blocked)

BUILD_DIR = os.environ.get("HANGTRACE_BUILD_DIR") or os.path.dirname(hangtrace_bin())
CUPTI_BUILT = os.environ.get("HANGTRACE_CUPTI_BUILT") == "ON"
MAN_BUILT = os.environ.get("HANGTRACE_MAN_BUILT") == "ON"
DEMO_JOB = os.path.join(REPO, "scripts", "demo_hung_job.py")
MAN_PAGE_TEST = os.path.join(REPO, "tests", "integration", "man_page_test.sh")


def _run(argv, **kw):
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                          text=True, **kw)


def _package_skip_reason():
    for tool in ("cpack", "dpkg-deb"):
        if not shutil.which(tool):
            return "needs %s" % tool
    if not os.access(hangtrace_bin(), os.X_OK):
        return "hangtrace binary not found at %s (set HANGTRACE_BIN)" % hangtrace_bin()
    return ""


PACKAGE_SKIP_REASON = _package_skip_reason()


@unittest.skipUnless(not PACKAGE_SKIP_REASON, PACKAGE_SKIP_REASON)
class DebianPackage(ScenarioTestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="hangtrace-pkg-")
        env = dict(os.environ, BUILD_DIR=BUILD_DIR, PACKAGE_DIR=os.path.join(cls.tmp, "out"))
        built = _run(["bash", os.path.join(REPO, "scripts", "package.sh")], env=env, timeout=600)
        if built.returncode != 0:
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise AssertionError("scripts/package.sh failed (rc=%d)\n%s%s"
                                 % (built.returncode, built.stdout, built.stderr))
        cls.deb = built.stdout.strip().splitlines()[-1]
        cls.root = os.path.join(cls.tmp, "root")
        extracted = _run(["dpkg-deb", "-x", cls.deb, cls.root])
        if extracted.returncode != 0:
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise AssertionError("dpkg-deb -x %s: %s" % (cls.deb, extracted.stderr))
        cls.bin = os.path.join(cls.root, "usr", "bin", "hangtrace")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def path(self, *parts):
        return os.path.join(self.root, "usr", *parts)

    def field(self, name):
        out = _run(["dpkg-deb", "--field", self.deb, name])
        self.assertEqual(out.returncode, 0, out.stderr)
        return out.stdout.strip()

    def build_version(self):
        out = _run([hangtrace_bin(), "--version"])
        self.assertEqual(out.returncode, 0, out.stderr)
        return out.stdout.strip()

    def test_control_fields(self):
        self.assertEqual(self.field("Package"), "hangtrace")
        self.assertEqual("hangtrace " + self.field("Version"), self.build_version())
        self.assertTrue(self.field("Maintainer"))
        # Computed from the libraries the binary links (dpkg-shlibdeps).
        depends = self.field("Depends")
        for lib in ("libbpf1", "libelf1", "libdw1", "libre2-9", "libc6"):
            self.assertRegex(depends, r"(^|, )%s\b" % lib, "Depends: %s" % depends)

    def test_extracted_binary_reports_the_build_version(self):
        self.assertTrue(os.access(self.bin, os.X_OK), self.bin)
        out = _run([self.bin, "--version"])
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.strip(), self.build_version())

    @unittest.skipUnless(MAN_BUILT, "no man page in this build (help2man not found at configure)")
    def test_man_page_renders_with_every_option(self):
        page = self.path("share", "man", "man1", "hangtrace.1")
        self.assertTrue(os.path.isfile(page), page)
        checked = _run(["sh", MAN_PAGE_TEST, self.bin, page])
        self.assertEqual(checked.returncode, 0, checked.stdout + checked.stderr)
        rendered = _run(["man", "-l", page], env=dict(os.environ, LC_ALL="C", MANWIDTH="120", MANPAGER="cat"))
        self.assertIn("--pid", rendered.stdout)

    def test_unit_names_the_installed_binary_and_docs(self):
        unit = self.path("lib", "systemd", "system", "hangtrace.service")
        with open(unit) as f:
            text = f.read()
        exec_start = re.findall(r"^ExecStart=(\S+) daemon ", text, re.M)
        self.assertEqual(exec_start, ["/usr/bin/hangtrace"], text)
        self.assertTrue(os.access(os.path.join(self.root, exec_start[0].lstrip("/")), os.X_OK))
        docs = re.findall(r"^Documentation=file://(\S+)$", text, re.M)
        self.assertEqual(docs, ["/usr/share/doc/hangtrace/docs/deploy.md"], text)
        self.assertTrue(os.path.isfile(os.path.join(self.root, docs[0].lstrip("/"))))
        self.assertNotIn("/usr/local/", text)

    def test_docs(self):
        doc = self.path("share", "doc", "hangtrace")
        self.assertTrue(os.path.isfile(os.path.join(doc, "README.md")))
        for name in os.listdir(os.path.join(REPO, "docs")):
            if name.endswith(".md"):
                self.assertTrue(os.path.isfile(os.path.join(doc, "docs", name)), name)

    @unittest.skipUnless(CUPTI_BUILT, "the CUPTI injection library is not built (no CUPTI or sys/sdt.h)")
    def test_cupti_injection_library_is_installed(self):
        self.assertTrue(os.path.isfile(self.path("lib", "hangtrace", "libhangtrace_cupti.so")))

    def assertLaunchFindsInjectionLibrary(self, binary, library):
        """Launch mode of `binary` hands its job CUDA_INJECTION64_PATH=library."""
        env = {k: v for k, v in os.environ.items() if k != "CUDA_INJECTION64_PATH"}
        out = _run([binary, "--json", os.path.join(self.tmp, "launch.json"), "--",
                    "/bin/sh", "-c", 'echo "injection=$CUDA_INJECTION64_PATH"'], env=env, timeout=120)
        self.assertIn(out.returncode, (0, 2), out.stdout + out.stderr)
        lines = [line for line in out.stdout.splitlines() if line.startswith("injection=")]
        self.assertEqual(lines, ["injection=" + os.path.realpath(library)], out.stdout + out.stderr)

    @unittest.skipUnless(CUPTI_BUILT, "the CUPTI injection library is not built (no CUPTI or sys/sdt.h)")
    @unittest.skipUnless(not SKIP_REASON, SKIP_REASON)
    def test_launch_mode_finds_the_installed_injection_library(self):
        self.assertLaunchFindsInjectionLibrary(self.bin, self.path("lib", "hangtrace", "libhangtrace_cupti.so"))

    def test_cmake_install_to_a_prefix(self):
        """`cmake --install BUILD --prefix P`: the same layout under P, the unit naming P."""
        prefix = os.path.join(self.tmp, "prefix")
        out = _run(["cmake", "--install", BUILD_DIR, "--prefix", prefix])
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        binary = os.path.join(prefix, "bin", "hangtrace")
        version = _run([binary, "--version"])
        self.assertEqual(version.stdout.strip(), self.build_version(), version.stderr)
        with open(os.path.join(prefix, "lib", "systemd", "system", "hangtrace.service")) as f:
            unit = f.read()
        self.assertEqual(re.findall(r"^ExecStart=(\S+) daemon ", unit, re.M), [binary])
        self.assertIn("Documentation=file://%s/share/doc/hangtrace/docs/deploy.md\n" % prefix, unit)
        self.assertTrue(os.path.isfile(os.path.join(prefix, "share", "doc", "hangtrace", "docs", "deploy.md")))
        if MAN_BUILT:
            self.assertTrue(os.path.isfile(os.path.join(prefix, "share", "man", "man1", "hangtrace.1")))
        if CUPTI_BUILT and not SKIP_REASON:
            self.assertLaunchFindsInjectionLibrary(
                binary, os.path.join(prefix, "lib", "hangtrace", "libhangtrace_cupti.so"))

    @unittest.skipUnless(not SKIP_REASON, SKIP_REASON)
    def test_extracted_binary_diagnoses_the_bundled_hung_job(self):
        job = Workload([PYTHON, "-u", DEMO_JOB])
        self._workloads.append(job)   # killed, with its workers, when the test ends
        marker = parse_marker(job.wait_for_line("hangtrace-demo: READY"))
        main, workers = marker["main"][0], marker["workers"]
        self.assertEqual(len(workers), 2, marker)
        wait_until_blocked(workers, main_syscalls=[SYS_FUTEX])
        wait_until_blocked(main, all_threads=False)

        argv = [self.bin, "--pid", str(main), "--json", "-"]
        report = Report(argv, _run(argv, timeout=180))
        self.assertIsNotNone(report.json, report.dump())
        self.assertEqual(report.json.get("target_pid"), main, report.dump())
        self.assertHang(report)
        orphaned = report.of_kind("orphaned-lock")
        self.assertTrue(orphaned, "no orphaned-lock finding\n" + report.dump())
        covered = set()
        for f in orphaned:
            covered.update(f.get("pids") or [])
        self.assertTrue(set(workers) <= covered, report.dump())


if __name__ == "__main__":
    unittest.main()
