#include "hangtrace/bundle.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "hangtrace/exports.h"
#include "hangtrace/json_values.h"
#include "hangtrace/output_file.h"
#include "hangtrace/report.h"
#include "hangtrace/snapshot_json.h"
#include "hangtrace/text.h"

namespace hangtrace {

using nlohmann::json;

namespace {

constexpr const char* kTempPrefix = ".incomplete-";

// A comm or a command line is raw bytes: invalid UTF-8 is replaced, not thrown on.
std::string dump(const json& j, int indent) {
  return j.dump(indent, ' ', false, json::error_handler_t::replace) + "\n";
}

// Host names and triggers go into a path: anything but [A-Za-z0-9._-] becomes '_'.
std::string path_safe(const std::string& s) {
  std::string out;
  for (char c : s) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-') ? c : '_';
  return out.empty() ? "unknown" : out;
}

Result<json> parse_json_file(const std::string& name, std::string_view text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return make_error(fmt::format("{}: not valid JSON", name));
  return j;
}

Result<json> read_json_file(const std::string& path) {
  std::ifstream in(path);
  const std::string name = std::filesystem::path(path).filename().string();
  if (!in) return make_error(fmt::format("{}: {}", name, errno_text(errno)));
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_json_file(name, ss.str());
}

// The files read_bundle needs: the rest are for people and tools.
constexpr std::array<const char*, 4> kReadBack = {"meta.json", "snapshot.json", "report.json",
                                                  "recorder.json"};

json clock_json(const HostClock& c) {
  if (c.sampled_unix <= 0) return nullptr;
  return {{"sampled_unix", c.sampled_unix},
          {"synchronized", c.synchronized},
          {"max_error_s", json_values::nullable(c.max_error_s)},
          {"est_error_s", json_values::nullable(c.est_error_s)}};
}

// Another host's words: a bound that is no finite, non-negative number is none.
HostClock clock_from_json(const json& j) {
  HostClock c;
  if (!j.is_object()) return c;
  auto seconds = [&](const char* key) -> std::optional<double> {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number()) return std::nullopt;
    double v = it->get<double>();
    if (!std::isfinite(v) || v < 0) return std::nullopt;
    return v;
  };
  c.sampled_unix = seconds("sampled_unix").value_or(0);
  if (auto it = j.find("synchronized"); it != j.end() && it->is_boolean()) c.synchronized = it->get<bool>();
  c.max_error_s = seconds("max_error_s");
  c.est_error_s = seconds("est_error_s");
  return c;
}

}  // namespace

const std::vector<std::string>& bundle_file_names() {
  static const std::vector<std::string> names = {"report.txt",    "report.json",    "snapshot.json",
                                                 "stacks.folded", "flamegraph.svg", "trace.json",
                                                 "recorder.json", "meta.json"};
  return names;
}

const std::vector<std::string>& optional_bundle_file_names() {
  static const std::vector<std::string> names = {"wall.folded", "wall-flamegraph.svg"};
  return names;
}

BundleMeta bundle_meta_for(const Snapshot& snap, const Diagnosis& d, const std::string& trigger) {
  BundleMeta m;
  m.trigger = trigger;
  m.verdict = d.verdict.status;
  m.summary = d.verdict.summary;
  m.cause = d.findings.empty() ? trigger : finding_kind_name(d.findings.front().kind);
  m.job_pid = snap.target_pid;
  m.hostname = snap.hostname;
  m.hangtrace_version = snap.hangtrace_version;
  m.created_unix = static_cast<double>(std::time(nullptr));
  m.incident_unix = snap.taken_at_unix;
  if (d.progress_stopped) m.last_progress_unix = d.progress_stopped->unix_time;
  if (const ProcessInfo* p = snap.process(snap.target_pid)) {
    m.job_comm = p->comm;
    m.job_cmdline = p->cmdline;
    m.rank = p->rank;
    m.world_size = p->world_size;
    m.local_rank = p->local_rank;
    m.job_id = p->job_id;
    m.job_id_source = p->job_id_source;
  }
  for (const auto& p : snap.processes)
    if (p.role != ProcessRole::Peer) m.pids.push_back(p.pid);
  return m;
}

json bundle_meta_to_json(const BundleMeta& m) {
  return {{"schema", m.schema},
          {"trigger", m.trigger},
          {"cause", m.cause},
          {"verdict", m.verdict},
          {"summary", m.summary},
          {"job_pid", m.job_pid},
          {"job_start_ticks", m.job_start_ticks},
          {"note", m.note},
          {"job_comm", m.job_comm},
          {"job_cmdline", m.job_cmdline},
          {"hostname", m.hostname},
          {"created_unix", m.created_unix},
          {"incident_unix", m.incident_unix},
          {"last_progress_unix", m.last_progress_unix > 0 ? json(m.last_progress_unix) : json(nullptr)},
          {"rank", json_values::nullable(m.rank)},
          {"world_size", json_values::nullable(m.world_size)},
          {"local_rank", json_values::nullable(m.local_rank)},
          {"job_id", m.job_id},
          {"job_id_source", m.job_id_source},
          {"hangtrace_version", m.hangtrace_version},
          {"pids", m.pids},
          {"clock", clock_json(m.clock)}};
}

Result<BundleMeta> bundle_meta_from_json(const json& j) {
  if (!j.is_object()) return make_error("meta.json: not an object");
  BundleMeta m;
  auto str = [&](const char* key, std::string& out) {
    if (auto it = j.find(key); it != j.end() && it->is_string()) out = it->get<std::string>();
  };
  // The file is someone else's: a number that does not fit its field is no value.
  auto num = [&](const char* key, auto& out) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number()) return;
    try {
      out = json_values::as<std::decay_t<decltype(out)>>(*it);
    } catch (const std::exception&) {
    }
  };
  auto opt = [&](const char* key, std::optional<int>& out) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number_integer()) return;
    if (it->is_number_unsigned() ? it->get<uint64_t>() <= INT_MAX
                                 : it->get<int64_t>() >= INT_MIN && it->get<int64_t>() <= INT_MAX)
      out = static_cast<int>(it->get<int64_t>());
  };
  str("schema", m.schema);
  if (m.schema != kBundleSchema)
    return make_error(fmt::format("meta.json: schema '{}', expected '{}'", m.schema, kBundleSchema));
  str("trigger", m.trigger);
  str("cause", m.cause);
  str("verdict", m.verdict);
  str("summary", m.summary);
  num("job_pid", m.job_pid);
  num("job_start_ticks", m.job_start_ticks);
  str("note", m.note);
  str("job_comm", m.job_comm);
  str("job_cmdline", m.job_cmdline);
  str("hostname", m.hostname);
  num("created_unix", m.created_unix);
  num("incident_unix", m.incident_unix);
  num("last_progress_unix", m.last_progress_unix);
  opt("rank", m.rank);
  opt("world_size", m.world_size);
  opt("local_rank", m.local_rank);
  str("job_id", m.job_id);
  str("job_id_source", m.job_id_source);
  str("hangtrace_version", m.hangtrace_version);
  if (auto it = j.find("pids"); it != j.end() && it->is_array())
    for (const auto& p : *it)
      if (p.is_number_integer()) m.pids.push_back(p.get<int>());
  if (auto it = j.find("clock"); it != j.end()) m.clock = clock_from_json(*it);
  return m;
}

BundleContent render_bundle(const Snapshot& snap, const Diagnosis& d, const LiveObservation* live,
                            BundleMeta meta, const json& recorder) {
  BundleContent c;
  ReportOptions ro;
  ro.verbosity = 1;  // a postmortem wants every thread
  c.files["report.txt"] = render_text(snap, d, ro, live);
  c.files["report.json"] = dump(render_json(snap, d, live), 2);
  c.files["snapshot.json"] = dump(snapshot_to_json(snap), 1);
  FoldedProfile folded = build_folded(snap, &d, live);
  c.files["stacks.folded"] = render_folded(folded);
  FlameGraphOptions fo;
  fo.title =
      fmt::format("hangtrace: {} (pid {}) on {}: blocked time", meta.job_comm, meta.job_pid, meta.hostname);
  fo.subtitle = fmt::format("{}: {}", meta.trigger, d.verdict.summary);
  c.files["flamegraph.svg"] = render_flamegraph_svg(folded, fo);
  if (!d.profile.empty()) {  // a live window: wall time by cause (optional_bundle_file_names)
    FoldedProfile wall = build_wall_folded(d.profile);
    c.files["wall.folded"] = render_folded(wall);
    c.files["wall-flamegraph.svg"] = render_flamegraph_svg(
        wall, wall_flamegraph_options(
                  fmt::format("hangtrace: {} (pid {}) on {}", meta.job_comm, meta.job_pid, meta.hostname),
                  fo.subtitle));
  }
  c.files["trace.json"] = dump(render_chrome_trace(snap, &d, live), -1);
  c.files["recorder.json"] = dump(recorder, 1);
  c.files["meta.json"] = dump(bundle_meta_to_json(meta), 2);
  c.meta = std::move(meta);
  return c;
}

std::string bundle_dir_name(const BundleMeta& meta) {
  double when = meta.incident_unix > 0 ? meta.incident_unix : meta.created_unix;
  return fmt::format("{}-{}-{}-{}", format_utc_stamp(when), path_safe(meta.hostname), meta.job_pid,
                     path_safe(meta.trigger));
}

Result<std::string> write_bundle(const std::string& parent, const std::string& name,
                                 const BundleContent& content) {
  if (auto ok = check_directory_links(parent); !ok)
    return make_error(fmt::format("failed to write a bundle in {}: {}", parent, ok.error()));
  std::error_code ec;
  bool existed = std::filesystem::exists(parent, ec);
  std::filesystem::create_directories(parent, ec);
  if (ec) return make_error(fmt::format("failed to create {}: {}", parent, ec.message()));
  // Bundles hold command lines, stacks and addresses of other users' jobs:
  // like core dumps, for root (or the caller) only.
  if (!existed) chmod(parent.c_str(), 0700);
  std::string tmp_template = fmt::format("{}/{}{}.XXXXXX", parent, kTempPrefix, name);
  std::vector<char> buf(tmp_template.begin(), tmp_template.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data()))
    return make_error(fmt::format("failed to create a directory in {}: {}", parent, errno_text(errno)));
  std::string tmp = buf.data();  // mkdtemp made it 0700, and so it stays
  auto abandon = [&](const std::string& why) -> Result<std::string> {
    std::filesystem::remove_all(tmp, ec);
    return make_error(why);
  };
  // The optional files first, then the others; meta.json last: a directory
  // with a meta.json was written whole, even read in place by a tool that
  // ignores the rename.
  for (const std::string& file : optional_bundle_file_names())
    if (auto it = content.files.find(file); it != content.files.end())
      if (auto r = write_new_file(tmp + "/" + file, it->second); !r) return abandon(r.error());
  for (const std::string& file : bundle_file_names()) {
    auto it = content.files.find(file);
    if (it == content.files.end())
      return abandon(fmt::format("failed to write a bundle: {} is missing", file));
    if (auto r = write_new_file(tmp + "/" + file, it->second); !r) return abandon(r.error());
  }
  fsync_directory(tmp);
  // A name already taken (two incidents in one second) gets a counter.
  std::string final_path = fmt::format("{}/{}", parent, name);
  for (int i = 2; std::filesystem::exists(final_path, ec); ++i)
    final_path = fmt::format("{}/{}.{}", parent, name, i);
  if (rename(tmp.c_str(), final_path.c_str()) != 0)
    return abandon(fmt::format("failed to move the bundle into {}: {}", final_path, errno_text(errno)));
  fsync_directory(parent);
  return final_path;
}

Result<std::vector<BundleEntry>> list_bundles(const std::string& parent, size_t* removed_abandoned) {
  std::error_code ec;
  std::vector<BundleEntry> out;
  for (const auto& entry : std::filesystem::directory_iterator(parent, ec)) {
    // Only real directories this user made: a link or a directory another
    // user planted among the bundles is never listed, deleted or followed.
    struct stat st {};
    if (lstat(entry.path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) continue;
    std::string name = entry.path().filename().string();
    if (name.starts_with(kTempPrefix)) {
      // A writer that died mid-bundle; a live writer's directory is younger than a minute.
      auto age = std::filesystem::file_time_type::clock::now() - entry.last_write_time(ec);
      if (removed_abandoned && !ec && age > std::chrono::minutes(1)) {
        std::filesystem::remove_all(entry.path(), ec);
        ++*removed_abandoned;
      }
      continue;
    }
    if (!plain_bundle_name(name)) continue;
    auto meta = read_json_file(entry.path() / "meta.json");
    if (!meta) continue;  // not ours: never touch what we did not write
    auto m = bundle_meta_from_json(*meta);
    if (!m) continue;
    out.push_back({name, entry.path().string(), std::move(*m)});
  }
  if (ec) return make_error(fmt::format("failed to list {}: {}", parent, ec.message()));
  std::sort(out.begin(), out.end(), [](const BundleEntry& a, const BundleEntry& b) {
    return a.meta.created_unix != b.meta.created_unix ? a.meta.created_unix > b.meta.created_unix
                                                      : a.name > b.name;
  });
  return out;
}

bool plain_bundle_name(std::string_view name) {
  if (name.empty() || name.size() > 255 || name.front() == '.') return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) return false;
  return true;
}

Result<size_t> prune_bundles(const std::string& parent, size_t keep) {
  size_t removed = 0;
  auto bundles = list_bundles(parent, &removed);
  if (!bundles) return make_error(bundles.error());
  std::error_code ec;
  for (size_t i = keep; i < bundles->size(); ++i) {
    std::filesystem::remove_all((*bundles)[i].path, ec);
    if (!ec) ++removed;
  }
  return removed;
}

namespace {

// meta.json, snapshot.json, report.json and recorder.json, parsed, from
// `json_of(name)`; errors read "failed to read bundle ORIGIN: why".
template <typename JsonOf>
Result<LoadedBundle> load_bundle(const std::string& origin, JsonOf&& json_of) {
  auto failed = [&](const std::string& why) {
    return make_error(fmt::format("failed to read bundle {}: {}", origin, why));
  };
  std::map<std::string, json> parsed;
  for (const char* name : kReadBack) {
    auto j = json_of(std::string(name));
    if (!j) return failed(j.error());
    parsed[name] = std::move(*j);
  }
  LoadedBundle b;
  b.path = origin;
  auto m = bundle_meta_from_json(parsed["meta.json"]);
  if (!m) return failed(m.error());
  b.meta = std::move(*m);
  auto snap = snapshot_from_json(parsed["snapshot.json"]);
  if (!snap) return failed("snapshot.json: " + snap.error());
  b.snapshot = std::move(*snap);
  b.report = std::move(parsed["report.json"]);
  b.recorder = std::move(parsed["recorder.json"]);
  return b;
}

}  // namespace

Result<LoadedBundle> read_bundle(const std::string& dir) {
  return load_bundle(dir, [&](const std::string& name) { return read_json_file(dir + "/" + name); });
}

Result<LoadedBundle> read_bundle_files(const std::string& origin,
                                       const std::map<std::string, std::string>& files) {
  return load_bundle(origin, [&](const std::string& name) -> Result<json> {
    auto it = files.find(name);
    if (it == files.end()) return make_error(fmt::format("{}: not in the bundle", name));
    return parse_json_file(name, it->second);
  });
}

}  // namespace hangtrace
