// The versioned JSON report (docs/json-schema.md): the verdict, the
// findings, every process and thread with its wait and stacks, the wait-for
// graph's objects, /dev/shm, and the live window.
#include <sys/wait.h>

#include <algorithm>
#include <functional>
#include <vector>

#include <fmt/format.h>

#include "hangtrace/report.h"
#include "hangtrace/stacks.h"
#include "hangtrace/text.h"
#include "report_parts.h"

namespace hangtrace {

namespace {

nlohmann::json user_frame_json(const UserFrame& f) {
  using nlohmann::json;
  json j = {{"kind", f.kind == UserFrame::Kind::Python ? "python" : "native"},
            {"function", f.function},
            {"file", f.file}};
  if (f.kind == UserFrame::Kind::Python) {
    j["line"] = f.line;
  } else {
    j["addr"] = fmt::format("0x{:x}", f.addr);
    j["module_offset"] = fmt::format("0x{:x}", f.module_offset);
    j["build_id"] = f.build_id.empty() ? json(nullptr) : json(f.build_id);
  }
  return j;
}

}  // namespace

nlohmann::json live_json(const LiveObservation* live) {
  using nlohmann::json;
  if (!live) return nullptr;
  json hooks = json::array();
  for (const auto& h : live->hooks)
    hooks.push_back({{"concern", h.concern},
                     {"program", h.program},
                     {"attach", h.attach},
                     {"active", h.active},
                     {"reason", h.reason}});
  json deaths = json::array();
  for (const auto& dth : live->deaths)
    deaths.push_back({{"pid", dth.pid},
                      {"comm", dth.comm},
                      {"exit_status", WEXITSTATUS(dth.exit_code)},
                      {"signal", dth.signal},
                      {"oom_victim", dth.oom_victim}});
  json rss = json::array();
  for (const auto& [pid, r] : live->rss)
    rss.push_back({{"pid", pid},
                   {"first_bytes", r.first_bytes},
                   {"last_bytes", r.last_bytes},
                   {"max_bytes", r.max_bytes},
                   {"samples", r.samples}});
  json wakers = json::array();
  for (const auto& [tid, w] : live->last_waker)
    wakers.push_back({{"tid", tid},
                      {"waker_pid", w.waker_tgid},
                      {"waker_tid", w.waker_tid},
                      {"waker_comm", w.waker_comm}});
  return {{"duration_s", live->duration_s},
          {"events", live->events},
          {"dropped", live->dropped},
          {"undecodable", live->undecodable},
          {"stacks_lost", live->stacks_lost},
          {"hooks", hooks},
          {"exits", deaths},
          {"rss", rss},
          {"last_wakers", wakers},
          {"forked", live->forked},
          {"cpu_samples",
           {{"hz", live->cpu_samples.hz},
            {"samples", live->cpu_samples.samples},
            {"unreadable", live->cpu_samples.unreadable}}},
          {"gpu", report::gpu_json(*live)}};
}

namespace {

// One process of the report's "processes", its threads with their waits and stacks.
nlohmann::json process_json(const ProcessInfo& p, const Diagnosis& d) {
  using nlohmann::json;
  json threads = json::array();
  for (const auto& t : p.threads) {
    json jt = {{"tid", t.tid}, {"comm", t.comm}, {"state", std::string(1, t.state)}};
    auto it = d.graph.threads.find(t.tid);
    if (it != d.graph.threads.end()) {
      const ThreadWait& w = it->second;
      jt["activity"] = activity_name(w.activity);
      jt["blocked_s"] = w.blocked_s ? json(*w.blocked_s) : json(nullptr);
      jt["syscall"] = w.syscall_text.empty() ? json(nullptr) : json(w.syscall_text);
      jt["wait"] = {{"kind", wait_class_name(w.wait_class)},
                    {"summary", w.summary},
                    {"objects", w.objects},
                    {"timeout_s", w.timeout_s ? json(*w.timeout_s) : json(nullptr)}};
      jt["kernel_stack"] = w.kernel_stack;
      jt["progressed"] = w.progressed;
      jt["woke"] = w.woke;
    }
    json py = json::array();
    for (const auto& f : t.python_stack)
      py.push_back({{"function", f.function}, {"file", f.file}, {"line", f.line}});
    jt["python_stack"] = std::move(py);
    jt["python_stack_error"] = t.python_stack_error.empty() ? json(nullptr) : json(t.python_stack_error);
    json native = json::array();
    for (const auto& f : t.native_stack) native.push_back(user_frame_json(f));
    jt["native_stack"] = std::move(native);
    // Kernel ; native ; Python interleaved, innermost first: the one stack.
    json merged = json::array();
    if (it != d.graph.threads.end())
      for (const auto& k : it->second.kernel_stack) merged.push_back({{"kind", "kernel"}, {"function", k}});
    for (const auto& f : merged_user_stack(t)) merged.push_back(user_frame_json(f));
    jt["stack"] = std::move(merged);
    jt["holds_gil"] = t.holds_gil;
    threads.push_back(std::move(jt));
  }
  json out = {{"pid", p.pid},
              {"ppid", p.ppid},
              {"comm", p.comm},
              {"cmdline", p.cmdline},
              {"exe", p.exe},
              {"role", role_name(p.role)},
              {"state", std::string(1, p.state)},
              {"is_python", p.is_python},
              {"children", p.children},
              {"threads", std::move(threads)}};
  if (p.rank) out["rank"] = *p.rank;
  if (p.world_size) out["world_size"] = *p.world_size;
  if (p.local_rank) out["local_rank"] = *p.local_rank;
  if (!p.rank_source.empty()) out["rank_source"] = p.rank_source;
  if (!p.job_id.empty()) {
    out["job_id"] = p.job_id;
    out["job_id_source"] = p.job_id_source;
  }
  out.update(report::process_identity_json(p));
  return out;
}

// Processes any live thread of which could end the wait, but those listed.
nlohmann::json releaser_processes_json(const WaitObject& o) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& rp : o.releaser_processes)
    out.push_back({{"pid", rp.pid}, {"threads", rp.threads}, {"except", rp.except}});
  return out;
}

// One object of the wait-for graph.
nlohmann::json object_json(const std::string& id, const WaitObject& o) {
  using nlohmann::json;
  return {{"id", id},
          {"kind", object_kind_name(o.kind)},
          {"label", o.label},
          {"waiters", o.waiters},
          {"releasers", o.releasers},
          {"releaser_processes", releaser_processes_json(o)},
          {"holder_pids", o.holder_pids},
          {"ready", o.ready},
          {"external", o.external},
          {"released_by_person", o.released_by_person},
          {"owner_tid", o.owner_tid ? json(*o.owner_tid) : json(nullptr)},
          {"notes", o.notes}};
}

// The report without its processes and objects (empty arrays).
nlohmann::json report_head(const Snapshot& snap, const Diagnosis& d, const LiveObservation* live) {
  using nlohmann::json;
  json j;
  j["schema"] = kReportSchema;
  j["hangtrace_version"] = snap.hangtrace_version;
  j["hostname"] = snap.hostname;
  j["kernel_release"] = snap.kernel_release;
  j["taken_at_unix"] = snap.taken_at_unix;
  j["sample_window_s"] = snap.sample_window_s;
  j["target_pid"] = snap.target_pid;
  j["job"] = report::job_json(snap);
  j["verdict"] = {{"status", d.verdict.status}, {"summary", d.verdict.summary}};
  j["progress_stopped"] = nullptr;
  if (const auto& ps = d.progress_stopped) {
    j["progress_stopped"] = {{"monotonic_ns", ps->monotonic_ns ? json(ps->monotonic_ns) : json(nullptr)},
                             {"unix_time", ps->unix_time},
                             {"utc", format_utc(ps->unix_time)},
                             {"ago_s", ps->ago_s},
                             {"basis", ps->basis},
                             {"at_the_latest", ps->at_the_latest},
                             {"tid", ps->tid},
                             {"pid", ps->pid},
                             {"comm", ps->comm},
                             {"thread", ps->thread},
                             {"waits_on", ps->waits_on},
                             {"tids", ps->tids},
                             {"timed_waits_not_counted", ps->timed_waits_not_counted},
                             {"live_note", ps->live_note.empty() ? json(nullptr) : json(ps->live_note)}};
  }
  j["sampled_at_unix"] = snap.sampled_at_unix > 0 ? json(snap.sampled_at_unix) : json(nullptr);
  j["sampled_at_monotonic_ns"] =
      snap.sampled_at_monotonic_ns ? json(snap.sampled_at_monotonic_ns) : json(nullptr);

  json findings = json::array();
  for (const auto& f : d.findings) {
    json chain = json::array();
    for (const auto& s : f.chain) chain.push_back({{"from", s.from}, {"edge", s.edge}, {"to", s.to}});
    findings.push_back({{"id", f.id},
                        {"kind", finding_kind_name(f.kind)},
                        {"severity", severity_name(f.severity)},
                        {"confidence", confidence_name(f.confidence)},
                        {"pids", f.pids},
                        {"tids", f.tids},
                        {"summary", f.summary},
                        {"chain", std::move(chain)},
                        {"evidence", f.evidence},
                        {"advice", f.advice},
                        {"details", f.details},
                        {"caused_by", f.caused_by.empty() ? json(nullptr) : json(f.caused_by)}});
  }
  j["findings"] = std::move(findings);

  j["processes"] = json::array();

  j["objects"] = json::array();

  json segs = json::array();
  for (const auto& s : snap.shm.largest)
    segs.push_back({{"name", s.name},
                    {"size_bytes", s.size_bytes},
                    {"allocated_bytes", s.allocated_bytes},
                    {"pids", s.mapped_by}});
  j["shm"] = {{"available", snap.shm.available},
              {"path", snap.shm.mount_path},
              {"size_bytes", snap.shm.size_bytes},
              {"used_bytes", snap.shm.used_bytes},
              {"unlinked_mapped_bytes", snap.shm.unlinked_mapped_bytes},
              {"largest", std::move(segs)}};
  j["deadlocked_tids"] = d.deadlocked_tids;
  j["probably_deadlocked_tids"] = d.probably_deadlocked_tids;
  j["live"] = live_json(live);
  if (live) j["live"]["timelines"] = report::timelines_json(snap, d, *live);
  if (live) j["profile"] = report::profile_json(d.profile);
  j["limitations"] = snap.limitations;
  return j;
}

}  // namespace

nlohmann::json render_json(const Snapshot& snap, const Diagnosis& d, const LiveObservation* live) {
  nlohmann::json j = report_head(snap, d, live);
  for (const auto& p : snap.processes) j["processes"].push_back(process_json(p, d));
  for (const auto& [id, o] : d.graph.objects) j["objects"].push_back(object_json(id, o));
  return j;
}

namespace {

// A top-level array of the report, written one element at a time.
struct StreamedArray {
  const char* key;
  size_t size;
  std::function<nlohmann::json(size_t)> element;
  std::string placeholder;  // its stand-in's text in the head
  size_t at = 0;            // where the stand-in starts in the head
};

}  // namespace

// The whole tree of a node-sized job (73 processes, 1,100 threads with their
// stacks and objects) takes ~100 MB as
// nlohmann::json; one process, one object at a time it is the text alone.
// dump(2) of an element of a top-level array is its own dump(2) with every
// line after the first indented by 4 more spaces (a JSON string holds no raw
// newline), so the text is exactly render_json(...).dump(2).
std::string render_json_text(const Snapshot& snap, const Diagnosis& d, const LiveObservation* live) {
  using nlohmann::json;
  std::vector<const std::pair<const std::string, WaitObject>*> objects;
  for (const auto& entry : d.graph.objects) objects.push_back(&entry);
  std::vector<StreamedArray> arrays = {
      {"processes", snap.processes.size(), [&](size_t i) { return process_json(snap.processes[i], d); }},
      {"objects", objects.size(),
       [&](size_t i) { return object_json(objects[i]->first, objects[i]->second); }},
  };
  // A comm, a command line or a Python name read from the target is raw
  // bytes: invalid UTF-8 is replaced, not thrown on.
  auto dump = [](const json& v) { return v.dump(2, ' ', false, json::error_handler_t::replace); };
  json j = report_head(snap, d, live);
  for (auto& a : arrays) {
    j[a.key] = fmt::format("\x01hangtrace: the {}\x01", a.key);
    a.placeholder = fmt::format("\n  \"{}\": {}", a.key, j[a.key].dump());
  }
  const std::string head = dump(j);
  for (auto& a : arrays) {
    a.at = head.find(a.placeholder);
    if (a.at == std::string::npos) return dump(render_json(snap, d, live)) + "\n";  // cannot happen
  }
  std::sort(arrays.begin(), arrays.end(), [](const auto& x, const auto& y) { return x.at < y.at; });
  std::string out;
  size_t from_head = 0;
  for (const auto& a : arrays) {
    out.append(head, from_head, a.at - from_head);
    out += fmt::format("\n  \"{}\": ", a.key);
    from_head = a.at + a.placeholder.size();
    if (a.size == 0) out += "[]";
    for (size_t i = 0; i < a.size; ++i) {
      out += i == 0 ? "[\n    " : ",\n    ";
      const std::string text = dump(a.element(i));
      for (size_t from = 0; from < text.size();) {
        size_t nl = std::min(text.find('\n', from), text.size());
        out.append(text, from, nl - from);
        if (nl < text.size()) out += "\n    ";
        from = nl + 1;
      }
    }
    if (a.size) out += "\n  ]";
  }
  out.append(head, from_head);
  out += '\n';
  return out;
}

}  // namespace hangtrace
