// hangtrace doctor: the pre-flight checklist (include/hangtrace/doctor.h,
// docs/doctor.md): every check in a fixed order, and the report as JSON and as
// a table. The checks live beside this file: loader_checks.cpp (/dev/shm and
// the DataLoader), environment_checks.cpp, system_checks.cpp (kernel, BPF,
// privileges, versions); target.cpp reads the target's /proc, parsers.cpp the
// figures.
#include <algorithm>
#include <cctype>
#include <map>

#include <fmt/format.h>

#include "hangtrace/procfs.h"
#include "internal.h"

namespace hangtrace::doctor {

namespace detail {

Check make(std::string id, Verdict v, std::string finding, std::string fix, nlohmann::json details) {
  Check c;
  c.id = std::move(id);
  c.verdict = v;
  c.finding = std::move(finding);
  c.fix = std::move(fix);
  c.details = details.is_null() ? nlohmann::json::object() : std::move(details);
  return c;
}

}  // namespace detail

using namespace detail;

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::Ok:
      return "ok";
    case Verdict::Warn:
      return "warn";
    case Verdict::Fail:
      return "fail";
    case Verdict::Skip:
      return "skip";
  }
  return "?";
}

const Check* DoctorReport::find(const std::string& id) const {
  for (const auto& c : checks)
    if (c.id == id) return &c;
  return nullptr;
}

bool DoctorReport::any_fail() const {
  return std::any_of(checks.begin(), checks.end(), [](const Check& c) { return c.verdict == Verdict::Fail; });
}

Result<DoctorReport> run_doctor(const DoctorInputs& in) {
  std::optional<Target> target;
  if (in.pid != 0) {
    auto t = read_target(in);
    if (!t) return make_error(t.error());
    target = std::move(*t);
  }
  const Target* t = target ? &*target : nullptr;
  std::string self_limits, self_status, release;
  const procfs::ProcFs fs(in.proc_root);
  if (auto l = fs.self_limits()) self_limits = *l;
  if (auto s = fs.self_status()) self_status = *s;
  if (auto r = fs.kernel_release()) release = *r;
  auto kernel = parse_kernel_release(release);

  DoctorReport r;
  r.pid = in.pid;
  std::string torch_where;
  auto torch_version = torch_version_of(in, t, &torch_where);

  r.checks.push_back(check_dev_shm(in, t));
  r.checks.push_back(check_sharing_strategy(t));
  r.checks.push_back(check_nofile(t, self_limits));
  r.checks.push_back(check_memlock(self_limits, kernel));
  check_environment(in, t, torch_version, r.checks);
  r.checks.push_back(check_start_method(t));
  r.checks.push_back(check_kernel(release));
  r.checks.push_back(check_btf(in));
  r.checks.push_back(check_privileges(self_status));
  r.checks.push_back(check_hooks(in.hooks));
  r.checks.push_back(make("hangtrace-version", Verdict::Ok, fmt::format("hangtrace {}", in.hangtrace_version),
                          "", {{"version", in.hangtrace_version}}));
  r.checks.push_back(in.libbpf_version.empty()
                         ? make("libbpf", Verdict::Skip, "libbpf version unknown")
                         : make("libbpf", Verdict::Ok, fmt::format("libbpf {}", in.libbpf_version), "",
                                {{"version", in.libbpf_version}}));
  if (torch_version)
    r.checks.push_back(make("torch-version", Verdict::Ok,
                            fmt::format("torch {} ({})", *torch_version, torch_where), "",
                            {{"version", *torch_version}, {"from", torch_where}}));
  else
    r.checks.push_back(make("torch-version", Verdict::Skip,
                            t ? "torch is not loaded in the target (no torch library mapped)"
                              : fmt::format("no --pid and no {}", in.default_torch_version_py)));
  std::string py_where;
  if (auto py = python_version_of(t, &py_where))
    r.checks.push_back(make("python-version", Verdict::Ok, fmt::format("python {} ({})", *py, py_where), "",
                            {{"version", *py}, {"from", py_where}}));
  else
    r.checks.push_back(make("python-version", Verdict::Skip,
                            t ? "the target is not a python process (no libpython mapped, exe not python*)"
                              : "no --pid: the job's python is unknown"));
  return r;
}

nlohmann::json report_to_json(const DoctorReport& r) {
  nlohmann::json checks = nlohmann::json::array();
  std::map<std::string, int> summary = {{"ok", 0}, {"warn", 0}, {"fail", 0}, {"skip", 0}};
  for (const auto& c : r.checks) {
    checks.push_back({{"id", c.id},
                      {"verdict", verdict_name(c.verdict)},
                      {"finding", c.finding},
                      {"fix", c.fix},
                      {"details", c.details}});
    summary[verdict_name(c.verdict)]++;
  }
  nlohmann::json j = {{"schema", "hangtrace.doctor/1"}, {"checks", checks}, {"summary", summary}};
  j["pid"] = r.pid ? nlohmann::json(r.pid) : nlohmann::json(nullptr);
  return j;
}

std::string render_text(const DoctorReport& r) {
  std::string out =
      r.pid ? fmt::format("hangtrace doctor: pid {}\n", r.pid) : "hangtrace doctor: this host\n";
  size_t width = 0;
  for (const auto& c : r.checks) width = std::max(width, c.id.size());
  int counts[4] = {0, 0, 0, 0};
  for (const auto& c : r.checks) {
    counts[static_cast<int>(c.verdict)]++;
    std::string verdict = verdict_name(c.verdict);
    for (auto& ch : verdict) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    out += fmt::format("{:<5} {:<{}}  {}\n", verdict, c.id, width, c.finding);
    if ((c.verdict == Verdict::Warn || c.verdict == Verdict::Fail) && !c.fix.empty())
      out += fmt::format("{:<5} {:<{}}  fix: {}\n", "", "", width, c.fix);
  }
  out += fmt::format("{} ok, {} warn, {} fail, {} skipped\n", counts[0], counts[1], counts[2], counts[3]);
  return out;
}

}  // namespace hangtrace::doctor
