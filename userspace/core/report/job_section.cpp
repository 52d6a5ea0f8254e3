// The job section of the reports: its root and launcher, ranks with their
// workers, what each pid the user named is in it, and its container.
#include <fmt/format.h>

#include <set>

#include "hangtrace/jobs.h"
#include "report_parts.h"

namespace hangtrace::report {

using nlohmann::json;

namespace {

// The processes whose pid inside their pid namespace differs from the host's.
std::vector<const ProcessInfo*> namespaced(const Snapshot& snap) {
  std::vector<const ProcessInfo*> out;
  for (const auto& p : snap.processes)
    if (p.role != ProcessRole::Peer && p.ns_pids.size() > 1) out.push_back(&p);
  return out;
}

std::string container_text(const ProcessInfo& p) {
  std::string s = p.container_runtime.empty() ? "container" : p.container_runtime + " container";
  if (!p.container_id.empty()) s += " " + p.container_id.substr(0, 12);
  if (!p.pod_uid.empty()) s += fmt::format(" (pod {})", p.pod_uid);
  return s;
}

}  // namespace

json process_identity_json(const ProcessInfo& p) {
  json j = json::object();
  j["ns_pids"] = p.ns_pids.empty() ? std::vector<int>{p.pid} : p.ns_pids;
  j["container_id"] = p.container_id.empty() ? json(nullptr) : json(p.container_id);
  j["container"] =
      p.container_id.empty() && p.pod_uid.empty()
          ? json(nullptr)
          : json{{"runtime", p.container_runtime.empty() ? json(nullptr) : json(p.container_runtime)},
                 {"id", p.container_id.empty() ? json(nullptr) : json(p.container_id)},
                 {"pod_uid", p.pod_uid.empty() ? json(nullptr) : json(p.pod_uid)}};
  j["frozen_cgroup"] = p.frozen_cgroup.empty() ? json(nullptr) : json(p.frozen_cgroup);
  return j;
}

json job_json(const Snapshot& snap) {
  jobs::JobShape shape = jobs::job_shape(snap);
  json ranks = json::array();
  for (const auto& r : shape.ranks)
    ranks.push_back({{"rank", r.rank},
                     {"local_rank", r.local_rank ? json(*r.local_rank) : json(nullptr)},
                     {"world_size", r.world_size ? json(*r.world_size) : json(nullptr)},
                     {"source", r.source.empty() ? json(nullptr) : json(r.source)},
                     {"backend", r.backend.empty() ? json(nullptr) : json(r.backend)},
                     {"pid", r.pid},
                     {"workers", r.workers}});
  json given = json::array();
  for (int pid : snap.given_pids) given.push_back({{"pid", pid}, {"role", jobs::member_role(snap, pid)}});
  return {{"root_pid", shape.root},
          {"launcher_pid", shape.launcher ? json(*shape.launcher) : json(nullptr)},
          {"root_parent", snap.root_parent.empty() ? json(nullptr) : json(snap.root_parent)},
          {"given", given},
          {"ranks", ranks}};
}

void render_job(const Snapshot& snap, const LineSink& line) {
  jobs::JobShape shape = jobs::job_shape(snap);
  std::vector<int> others;  // named pids other than the root
  for (int pid : snap.given_pids)
    if (pid != snap.target_pid) others.push_back(pid);
  const auto inside = namespaced(snap);
  if (shape.ranks.empty() && others.empty() && inside.empty() && snap.root_parent.empty()) return;
  line("");
  std::string head = fmt::format("JOB {}", snap.target_pid);
  if (const ProcessInfo* root = snap.process(snap.target_pid)) head += fmt::format(" ({})", root->comm);
  if (shape.launcher) head += ": a launcher";
  if (!shape.ranks.empty()) {
    head += fmt::format("{} {} rank{}", shape.launcher ? " of" : ":", shape.ranks.size(),
                        shape.ranks.size() > 1 ? "s" : "");
    if (shape.ranks.front().world_size)
      head += fmt::format(" (world size {})", *shape.ranks.front().world_size);
  }
  if (!snap.root_parent.empty()) head += fmt::format("; started by {}", snap.root_parent);
  line(head);
  for (const auto& r : shape.ranks) {
    std::string local = r.local_rank ? fmt::format(" local {}", *r.local_rank) : "";
    std::string how;  // what named it, when not torchrun's RANK; its backend
    if (!r.source.empty() && r.source != "RANK") how = r.source;
    if (!r.backend.empty()) how += (how.empty() ? "" : ", ") + r.backend;
    line(fmt::format(
        "  rank {}{}  pid {}  {}{}", r.rank, local, r.pid,
        r.workers.empty() ? std::string("no workers") : fmt::format("workers {}", fmt::join(r.workers, " ")),
        how.empty() ? "" : fmt::format("  ({})", how)));
  }
  for (int pid : others) line(fmt::format("  pid {} is {}", pid, jobs::member_role(snap, pid)));
  if (!inside.empty()) {
    std::set<std::string> containers;
    for (const auto* p : inside)
      if (!p->container_id.empty() || !p->pod_uid.empty()) containers.insert(container_text(*p));
    std::vector<std::string> pairs;
    for (const auto* p : inside) pairs.push_back(fmt::format("{}={}", p->pid, p->ns_pids.back()));
    line(fmt::format("  in its own pid namespace{}: host pid=pid inside: {}",
                     containers.empty() ? "" : fmt::format(" ({})", fmt::join(containers, ", ")),
                     fmt::join(pairs, " ")));
  } else if (const ProcessInfo* root = snap.process(snap.target_pid);
             root && (!root->container_id.empty() || !root->pod_uid.empty())) {
    line(fmt::format("  in {} (host pid namespace)", container_text(*root)));
  }
}

}  // namespace hangtrace::report
