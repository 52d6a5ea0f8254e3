// hangtrace doctor's kernel, BPF, privilege and version checks over a fake
// host (doctor_fake_host.h): memlock before and after 5.11, the release, BTF,
// CapEff, which hooks load, torch and python versions.
#include <filesystem>

#include <gtest/gtest.h>

#include "doctor_fake_host.h"

namespace hangtrace::doctor::testing {
namespace {

namespace fs = std::filesystem;

// ---- memlock, kernel, BTF, hooks, versions -----------------------------------------------------------

TEST(DoctorUlimit, MemlockMattersOnlyBefore511) {
  FakeHost host;
  host.write(host.proc() + "/self/limits", limits_text("65536", "65536", "65536"));
  auto r = host.run(0);
  EXPECT_EQ(check_of(r, "ulimit-memlock").verdict, Verdict::Ok);  // 6.1: memcg accounting
  host.write(host.proc() + "/sys/kernel/osrelease", "5.10.0-28-amd64\n");
  r = host.run(0);
  Check c = check_of(r, "ulimit-memlock");
  EXPECT_EQ(c.verdict, Verdict::Warn) << c.finding;
  EXPECT_NE(c.fix.find("ulimit -l unlimited"), std::string::npos);
  EXPECT_EQ(check_of(r, "kernel").verdict, Verdict::Ok);  // has the ring buffer (5.8)
  host.write(host.proc() + "/sys/kernel/osrelease", "4.19.0-25-amd64\n");
  r = host.run(0);
  Check k = check_of(r, "kernel");
  EXPECT_EQ(k.verdict, Verdict::Warn);
  EXPECT_NE(k.finding.find("ring buffer"), std::string::npos) << k.finding;
}

TEST(DoctorKernel, MissingBtfFails) {
  FakeHost host;
  fs::remove(host.sys() + "/kernel/btf/vmlinux");
  auto r = host.run(0);
  Check c = check_of(r, "btf");
  EXPECT_EQ(c.verdict, Verdict::Fail) << c.finding;
  EXPECT_NE(c.fix.find("CONFIG_DEBUG_INFO_BTF"), std::string::npos);
  EXPECT_TRUE(r.any_fail());
}

TEST(DoctorKernel, PresentBtfAndReleaseAreOk) {
  FakeHost host;
  auto r = host.run(0);
  EXPECT_EQ(check_of(r, "btf").verdict, Verdict::Ok);
  Check k = check_of(r, "kernel");
  EXPECT_EQ(k.verdict, Verdict::Ok);
  EXPECT_EQ(k.details["release"], "6.1.0-18-amd64");
  EXPECT_EQ(parse_kernel_release("6.18.44-fc-v657"), (std::pair<int, int>{6, 18}));
  EXPECT_FALSE(parse_kernel_release("garbage").has_value());
}

TEST(DoctorKernel, PrivilegesComeFromCapEff) {
  FakeHost host;
  auto r = host.run(0);
  EXPECT_EQ(check_of(r, "privileges").verdict, Verdict::Ok);
  host.write(host.proc() + "/self/status", "Name:\thangtrace\nCapEff:\t0000000000000000\n");
  r = host.run(0);
  Check c = check_of(r, "privileges");
  EXPECT_EQ(c.verdict, Verdict::Warn) << c.finding;
  EXPECT_NE(c.fix.find("sudo"), std::string::npos);
}

TEST(DoctorHooks, NotRootSkipsTracerErrorFailsMissingHooksWarn) {
  FakeHost host;
  auto in = host.inputs(0);
  auto r = run_ok(in);
  EXPECT_EQ(check_of(r, "bpf-hooks").verdict, Verdict::Skip);
  EXPECT_EQ(check_of(r, "bpf-hooks").finding, "not root");
  in.hooks = HookProbe{};
  in.hooks.attempted = true;
  in.hooks.error = "failed to load futex: Operation not permitted";
  r = run_ok(in);
  EXPECT_EQ(check_of(r, "bpf-hooks").verdict, Verdict::Fail);
  in.hooks = HookProbe{};
  in.hooks.attempted = true;
  in.hooks.active = 10;
  in.hooks.off = 1;
  in.hooks.off_hooks = {"sched tp_btf/sched_waking: tp_btf unavailable"};
  r = run_ok(in);
  Check c = check_of(r, "bpf-hooks");
  EXPECT_EQ(c.verdict, Verdict::Warn);
  EXPECT_NE(c.finding.find("sched_waking"), std::string::npos) << c.finding;
  in.hooks.off = 0;
  in.hooks.off_hooks.clear();
  r = run_ok(in);
  EXPECT_EQ(check_of(r, "bpf-hooks").verdict, Verdict::Ok);
}

TEST(DoctorVersions, TorchVersionPyBesideTheMappedTorchAndPythonFromLibpython) {
  FakeHost host;
  FakeProcess p;
  p.exe = "/opt/venv/bin/python";
  p.maps =
      "7f0000000000-7f0000001000 r-xp 00000000 fe:00 300 /opt/conda/lib/libpython3.10.so.1.0\n"
      "7f0000002000-7f0000003000 r-xp 00000000 fe:00 301 "
      "/opt/venv/lib/python3.10/site-packages/torch/lib/libtorch_cpu.so\n";
  host.add(p);
  fs::remove(host.proc() + "/100/exe");
  fs::create_symlink(p.exe, host.proc() + "/100/exe");
  // Read through the target's root: PROC/100/root/<path>.
  host.write(host.proc() + "/100/root/opt/venv/lib/python3.10/site-packages/torch/version.py",
             "__version__ = '2.1.2+cu121'\ndebug = False\n");
  auto r = host.run(100);
  Check t = check_of(r, "torch-version");
  EXPECT_EQ(t.verdict, Verdict::Ok) << t.finding;
  EXPECT_EQ(t.details["version"], "2.1.2+cu121");
  Check py = check_of(r, "python-version");
  EXPECT_EQ(py.details["version"], "3.10") << py.finding;
  EXPECT_EQ(check_of(r, "hangtrace-version").details["version"], "0.1.0");
  EXPECT_EQ(check_of(r, "libbpf").details["version"], "1.1");
}

TEST(DoctorVersions, DistroTorchFromTheLibrarysName) {
  FakeHost host;
  add_loader_job(host, 0, 0, 0);
  auto r = host.run(100);
  EXPECT_EQ(check_of(r, "torch-version").details["version"], "1.13.0");
  EXPECT_EQ(check_of(r, "python-version").details["version"], "3.11");  // /usr/bin/python3.11
  EXPECT_EQ(parse_torch_version_py("__version__ = \"1.13.1\"\n"), "1.13.1");
  EXPECT_FALSE(parse_torch_version_py("version = 1").has_value());
}

}  // namespace
}  // namespace hangtrace::doctor::testing
