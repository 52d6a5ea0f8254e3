#include "kernel_log_json.h"

#include "hangtrace/json_values.h"
#include "hangtrace/kernel_log.h"

namespace hangtrace {

using json_values::get_if;
using json_values::get_opt;
using nlohmann::json;

json kernel_log_to_json(const Snapshot& s) {
  json events = json::array();
  for (const auto& e : s.kernel_events) {
    json je = {{"kind", kernel_log_event_name(e.kind)},
               {"ts_us", e.ts_us},
               {"pid", e.pid},
               {"comm", e.comm},
               {"message", e.message}};
    if (!e.memcg.empty()) je["memcg"] = e.memcg;
    if (!e.oom_memcg.empty()) je["oom_memcg"] = e.oom_memcg;
    if (e.limit_bytes) je["limit_bytes"] = *e.limit_bytes;
    if (e.xid) je["xid"] = e.xid;
    events.push_back(std::move(je));
  }
  return {{"read_at_s", s.kernel_log_read_at_s}, {"events", std::move(events)}};
}

void kernel_log_from_json(const json& j, Snapshot& s) {
  if (!j.is_object()) return;
  get_if(j, "read_at_s", s.kernel_log_read_at_s);
  auto events = j.find("events");
  if (events == j.end() || !events->is_array()) return;
  for (const auto& je : *events) {
    if (s.kernel_events.size() >= kMaxKernelLogEvents) break;
    std::string name;
    get_if(je, "kind", name);
    auto kind = kernel_log_event_kind(name);
    if (!kind) continue;
    KernelLogEvent e;
    e.kind = *kind;
    get_if(je, "ts_us", e.ts_us);
    get_if(je, "pid", e.pid);
    get_if(je, "comm", e.comm);
    get_if(je, "message", e.message);
    get_if(je, "memcg", e.memcg);
    get_if(je, "oom_memcg", e.oom_memcg);
    get_opt(je, "limit_bytes", e.limit_bytes);
    get_if(je, "xid", e.xid);
    s.kernel_events.push_back(std::move(e));
  }
}

}  // namespace hangtrace
