// The container and pod a process runs in, from its cgroup path (jobs.h).
//
// The runtimes name a container's cgroup after its 64-hex-digit id:
//   docker-<id>.scope, cri-containerd-<id>.scope, crio-<id>.scope,
//   libpod-<id>.scope (systemd cgroup driver), or /docker/<id>,
//   /kubepods/<qos>/pod<uid>/<id> (cgroupfs driver);
// Kubernetes puts a pod's containers under pod<uid> (cgroupfs) or
// kubepods-<qos>-pod<uid with '_' for '-'>.slice (systemd).
#include <algorithm>
#include <string_view>

#include "hangtrace/jobs.h"
#include "hangtrace/live.h"
#include "hangtrace/procfs.h"

namespace hangtrace::jobs {

namespace {

constexpr size_t kContainerIdLength = 64;
constexpr size_t kPodUidLength = 36;  // 8-4-4-4-12
constexpr size_t kMaxCgroupText = 64 * 1024;

bool is_hex(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

std::string_view strip_suffix(std::string_view s, std::string_view suffix) {
  return s.ends_with(suffix) ? s.substr(0, s.size() - suffix.size()) : s;
}

// "…pod<uid>" at the end of a path component, the uid's '-' possibly '_'.
std::string pod_uid_in(std::string_view component) {
  size_t at = component.rfind("pod");
  if (at == std::string_view::npos) return "";
  std::string uid(component.substr(at + 3));
  if (uid.size() != kPodUidLength) return "";
  std::replace(uid.begin(), uid.end(), '_', '-');
  for (size_t i = 0; i < uid.size(); ++i) {
    bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? uid[i] != '-' : !is_hex(std::string_view(&uid[i], 1))) return "";
  }
  return uid;
}

// A cgroup path as /proc/PID/cgroup gives it, safe to append to the cgroup
// root: absolute, no "." or ".." component (a cgroup outside this cgroup
// namespace reads "/../.."), bounded.
bool plain_cgroup_path(const std::string& path) {
  if (path.empty() || path[0] != '/' || path.size() > 4096) return false;
  for (size_t pos = 1; pos <= path.size();) {
    size_t slash = path.find('/', pos);
    std::string_view part(path.data() + pos, (slash == std::string::npos ? path.size() : slash) - pos);
    if (part == "." || part == "..") return false;
    if (slash == std::string::npos) break;
    pos = slash + 1;
  }
  return true;
}

}  // namespace

ContainerIdentity container_from_cgroup(std::string_view text) {
  static constexpr struct {
    std::string_view prefix, runtime;
  } kScopes[] = {
      {"docker-", "docker"}, {"cri-containerd-", "containerd"}, {"crio-", "cri-o"}, {"libpod-", "podman"}};
  ContainerIdentity out;
  text = text.substr(0, kMaxCgroupText);
  // "ID:CONTROLLERS:PATH" lines; the innermost container named wins.
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    size_t second = line.find(':', line.find(':') + 1);
    if (line.find(':') == std::string_view::npos || second == std::string_view::npos) continue;
    std::string_view path = line.substr(second + 1);
    std::string_view previous;
    while (!path.empty()) {
      size_t slash = path.find('/');
      std::string_view component = path.substr(0, slash);
      path = slash == std::string_view::npos ? std::string_view() : path.substr(slash + 1);
      if (component.empty()) continue;
      std::string_view name = strip_suffix(strip_suffix(component, ".scope"), ".slice");
      if (std::string uid = pod_uid_in(name); !uid.empty()) out.pod_uid = uid;
      for (const auto& scope : kScopes) {
        if (!name.starts_with(scope.prefix)) continue;
        std::string_view id = name.substr(scope.prefix.size());
        if (id.size() == kContainerIdLength && is_hex(id)) {
          out.runtime = std::string(scope.runtime);
          out.id = std::string(id);
        }
      }
      if (name.size() == kContainerIdLength && is_hex(name)) {
        out.id = std::string(name);
        out.runtime = previous == "docker" ? "docker" : "";
      }
      previous = name;
    }
  }
  return out;
}

std::string frozen_cgroup_of(const std::string& cgroup_text, const std::string& cgroup_root) {
  bool v2 = false;
  auto path = hangtrace::cgroup_controller_path(cgroup_text, "freezer", &v2);
  if (!path || !plain_cgroup_path(*path)) return "";
  if (!v2) {
    auto state = procfs::read_text_file(cgroup_root + "/freezer" + *path + "/freezer.state", nullptr, 64);
    return state && (state->rfind("FROZEN", 0) == 0 || state->rfind("FREEZING", 0) == 0) ? "freezer:" + *path
                                                                                         : "";
  }
  // v2: under a hybrid hierarchy's "unified" mount, or at the root.
  for (const std::string& base : {cgroup_root + "/unified", cgroup_root}) {
    auto events = procfs::read_text_file(base + *path + "/cgroup.events", nullptr, 4096);
    if (!events) continue;
    return events->find("frozen 1") != std::string::npos ? *path : "";
  }
  return "";
}

std::string memory_cgroup_of(std::string_view cgroup_text) {
  std::string v2;
  while (!cgroup_text.empty()) {
    const size_t end = cgroup_text.find('\n');
    std::string_view line = cgroup_text.substr(0, end);
    cgroup_text = end == std::string_view::npos ? std::string_view() : cgroup_text.substr(end + 1);
    // "ID:CONTROLLERS:PATH"; the path may itself hold ':'.
    const size_t a = line.find(':');
    const size_t b = a == std::string_view::npos ? a : line.find(':', a + 1);
    if (b == std::string_view::npos) continue;
    std::string_view controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (path.empty() || path.front() != '/') continue;
    for (size_t at = 0; at <= controllers.size();) {
      size_t comma = controllers.find(',', at);
      if (comma == std::string_view::npos) comma = controllers.size();
      if (controllers.substr(at, comma - at) == "memory") return std::string(path);
      at = comma + 1;
    }
    if (line.substr(0, a) == "0" && controllers.empty()) v2 = std::string(path);
  }
  return v2;
}

}  // namespace hangtrace::jobs
