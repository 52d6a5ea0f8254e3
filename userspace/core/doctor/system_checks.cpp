// The kernel, BPF and privilege checks (memlock, release, BTF, CapEff, which
// hooks load) and the versions of torch and python.
#include <sys/stat.h>

#include <cctype>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "hangtrace/procfs.h"
#include "hangtrace/text.h"
#include "internal.h"

namespace hangtrace::doctor::detail {

Check check_memlock(const std::string& self_limits, std::optional<std::pair<int, int>> kernel) {
  auto lim = parse_limit(self_limits, "Max locked memory");
  if (!lim)
    return make("ulimit-memlock", Verdict::Skip,
                fmt::format("cannot read doctor's memlock limit: {}", lim.error()));
  nlohmann::json d = {{"soft", lim->soft ? nlohmann::json(*lim->soft) : nlohmann::json("unlimited")}};
  std::string figures =
      fmt::format("hangtrace's memlock limit is {}", lim->soft ? format_bytes(*lim->soft) : "unlimited");
  if (kernel && *kernel >= std::pair<int, int>{5, 11}) {
    d["memcg_accounting"] = true;
    return make("ulimit-memlock", Verdict::Ok,
                figures + "; not used for BPF maps on kernel >= 5.11 (charged to the memory cgroup)", "", d);
  }
  d["memcg_accounting"] = false;
  if (lim->soft && *lim->soft < 64 * kMiB)
    return make("ulimit-memlock", Verdict::Warn,
                figures +
                    "; kernels before 5.11 charge BPF maps to it (hangtrace's ring buffer and stack map need "
                    "tens of MiB)",
                "ulimit -l unlimited before running hangtrace (docker run --ulimit memlock=-1)", d);
  return make("ulimit-memlock", Verdict::Ok, figures + "; enough for BPF maps on this pre-5.11 kernel", "",
              d);
}

Check check_privileges(const std::string& self_status) {
  auto caps = cap_eff(self_status);
  if (!caps) return make("privileges", Verdict::Skip, "cannot read CapEff of doctor's own process");
  constexpr int kCapSysAdmin = 21, kCapPerfmon = 38, kCapBpf = 39, kCapSysPtrace = 19;
  auto has = [&](int c) { return ((*caps >> c) & 1) != 0; };
  nlohmann::json d = {{"cap_eff", fmt::format("{:016x}", *caps)}};
  bool bpf = has(kCapSysAdmin) || (has(kCapBpf) && has(kCapPerfmon));
  if (bpf && has(kCapSysPtrace))
    return make("privileges", Verdict::Ok,
                "running with CAP_BPF/CAP_PERFMON (or CAP_SYS_ADMIN) and CAP_SYS_PTRACE", "", d);
  return make("privileges", Verdict::Warn,
              fmt::format("missing {}{}: hangtrace cannot load BPF or read other processes' memory",
                          bpf ? "" : "CAP_BPF+CAP_PERFMON ", has(kCapSysPtrace) ? "" : "CAP_SYS_PTRACE"),
              "run hangtrace with sudo (in a container: --cap-add SYS_ADMIN,SYS_PTRACE or --privileged)", d);
}

Check check_kernel(const std::string& release) {
  if (release.empty()) return make("kernel", Verdict::Skip, "cannot read the kernel release");
  auto v = parse_kernel_release(release);
  nlohmann::json d = {{"release", release}};
  if (!v)
    return make("kernel", Verdict::Warn, fmt::format("kernel {}: cannot parse the version", release), "", d);
  if (*v < std::pair<int, int>{5, 8})
    return make(
        "kernel", Verdict::Warn,
        fmt::format("kernel {}: before 5.8, no BPF ring buffer: live tracing is off, snapshots still work",
                    release),
        "use a 5.8+ kernel (5.11+ for memcg-accounted BPF memory)", d);
  return make("kernel", Verdict::Ok, fmt::format("kernel {}", release), "", d);
}

Check check_btf(const DoctorInputs& in) {
  std::string path = in.sys_root + "/kernel/btf/vmlinux";
  struct stat st {};
  if (stat(path.c_str(), &st) != 0)
    return make("btf", Verdict::Fail,
                fmt::format("{} missing ({}): hangtrace's BPF programs (CO-RE) cannot load", path,
                            std::strerror(errno)),
                "use a kernel built with CONFIG_DEBUG_INFO_BTF=y (every major distro kernel since 2020)",
                {{"path", path}});
  return make("btf", Verdict::Ok,
              fmt::format("{} present ({})", path, format_bytes(static_cast<uint64_t>(st.st_size))), "",
              {{"path", path}, {"size_bytes", static_cast<uint64_t>(st.st_size)}});
}

Check check_hooks(const HookProbe& h) {
  if (!h.attempted)
    return make("bpf-hooks", Verdict::Skip, h.not_attempted_why.empty() ? "not probed" : h.not_attempted_why);
  if (!h.error.empty())
    return make("bpf-hooks", Verdict::Fail, fmt::format("the live tracer did not start: {}", h.error),
                "check dmesg and `hangtrace --list-hooks -vvv` for the verifier's log");
  nlohmann::json d = {
      {"active", h.active}, {"standby", h.standby}, {"off", h.off}, {"off_hooks", h.off_hooks}};
  std::string figures =
      fmt::format("{} hooks active, {} twins on standby, {} unavailable", h.active, h.standby, h.off);
  if (h.off > 0) {
    std::string names;
    for (size_t i = 0; i < h.off_hooks.size() && i < 3; ++i) names += (i ? "; " : "") + h.off_hooks[i];
    if (h.off_hooks.size() > 3) names += fmt::format("; +{} more", h.off_hooks.size() - 3);
    return make("bpf-hooks", Verdict::Warn, figures + ": " + names,
                "hangtrace --list-hooks shows each and why", d);
  }
  return make("bpf-hooks", Verdict::Ok, figures, "", d);
}

std::optional<std::string> torch_version_of(const DoctorInputs& in, const Target* t, std::string* where) {
  if (!t) {
    auto text = procfs::read_text_file(in.default_torch_version_py);
    if (!text) return std::nullopt;
    *where = in.default_torch_version_py;
    return parse_torch_version_py(*text);
  }
  // .../site-packages/torch/_C.cpython-*.so or .../torch/lib/libtorch*.so: version.py is in torch/.
  for (const auto& p : t->mapped_paths) {
    std::string dir;
    if (auto pos = p.rfind("/torch/_C"); pos != std::string::npos)
      dir = p.substr(0, pos + 6);
    else if (auto pos2 = p.rfind("/torch/lib/libtorch"); pos2 != std::string::npos)
      dir = p.substr(0, pos2 + 6);
    if (dir.empty()) continue;
    std::string path = fmt::format("{}/{}/root{}/version.py", in.proc_root, t->pid, dir);
    if (auto text = procfs::read_text_file(path))
      if (auto v = parse_torch_version_py(*text)) {
        *where = dir + "/version.py";
        return v;
      }
  }
  // Distro builds: /usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13.0.
  for (const auto& p : t->mapped_paths) {
    auto pos = p.rfind("/libtorch_cpu.so.");
    if (pos == std::string::npos) continue;
    *where = p;
    return p.substr(pos + std::strlen("/libtorch_cpu.so."));
  }
  return std::nullopt;
}

std::optional<std::string> python_version_of(const Target* t, std::string* where) {
  if (!t) return std::nullopt;
  auto version_in = [](const std::string& s, const std::string& key) -> std::optional<std::string> {
    auto pos = s.rfind(key);
    if (pos == std::string::npos) return std::nullopt;
    std::string v;
    for (size_t i = pos + key.size();
         i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.'); ++i)
      v += s[i];
    while (!v.empty() && v.back() == '.') v.pop_back();
    if (v.empty() || v.find('.') == std::string::npos) return std::nullopt;
    return v;
  };
  for (const auto& p : t->mapped_paths)
    if (auto v = version_in(p, "/libpython")) {
      *where = p;
      return v;
    }
  std::string exe_name = basename_of(t->exe);
  if (exe_name.starts_with("python"))
    if (auto v = version_in("/" + exe_name, "/python")) {
      *where = t->exe;
      return v;
    }
  return std::nullopt;
}

}  // namespace hangtrace::doctor::detail
