#include "merge_sources.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <set>

#include "hangtrace/bundle_archive.h"
#include "hangtrace/text.h"
#include "http_client.h"

namespace hangtrace::cli {

namespace {

namespace fs = std::filesystem;

// A bundle archive is at most what read_bundle_tar accepts, plus headers.
constexpr size_t kMaxArchiveBytes = (256u << 20) + (1u << 20);
constexpr size_t kMaxBundles = 4096;  // from all sources together
constexpr double kArchiveTimeoutS = 300;
// How far back Prometheus is asked for the job's hung series: a job killed
// since still has its bundles.
constexpr const char* kPrometheusLookback = "1h";

bool is_url(const std::string& s) { return s.starts_with("http://") || s.starts_with("https://"); }

std::string without_trailing_slashes(std::string s) {
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

class Gatherer {
 public:
  explicit Gatherer(const MergeSources& o) : o_(o) {}

  GatheredBundles run() {
    for (const auto& source : o_.sources) {
      if (is_url(source))
        daemon(source);
      else
        local(source);
    }
    if (!o_.prometheus_url.empty()) prometheus();
    return std::move(out_);
  }

 private:
  void skip(const std::string& source, const std::string& why) {
    // Errors already naming what failed are kept whole.
    if (why.starts_with("failed to "))
      out_.skipped.push_back(why);
    else
      out_.skipped.push_back(fmt::format("{}: {}", source, why));
  }

  void keep(LoadedBundle b) {
    if (!o_.job_id.empty() && b.meta.job_id != o_.job_id)
      return skip(b.path,
                  fmt::format("a bundle of {}, not of job {}",
                              b.meta.job_id.empty() ? "no known job" : "job " + b.meta.job_id, o_.job_id));
    if (out_.bundles.size() == kMaxBundles)
      return skip(b.path, fmt::format("more than {} bundles: left out", kMaxBundles));
    out_.bundles.push_back(std::move(b));
  }

  // A bundle directory, a directory of bundles, or an archive file.
  void local(const std::string& source) {
    std::error_code ec;
    const fs::file_status st = fs::status(source, ec);
    if (fs::is_regular_file(st)) return archive_file(source);
    if (!fs::is_directory(st)) return skip(source, "no bundle directory, archive or URL there");
    if (fs::is_regular_file(fs::path(source) / "meta.json", ec)) return directory(source);
    std::vector<std::string> dirs;
    for (const auto& e : fs::directory_iterator(source, ec)) {
      const std::string name = e.path().filename().string();
      if (name.empty() || name[0] == '.') continue;  // a writer's temporary
      if (e.is_directory(ec) && fs::is_regular_file(e.path() / "meta.json", ec))
        dirs.push_back(e.path().string());
    }
    if (dirs.empty()) return skip(source, "no bundle in that directory (no meta.json in it or below)");
    std::sort(dirs.begin(), dirs.end());
    for (const auto& d : dirs) directory(d);
  }

  void directory(const std::string& dir) {
    auto b = read_bundle(dir);
    if (!b) return skip(dir, b.error());
    keep(std::move(*b));
  }

  void archive_file(const std::string& path) {
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return skip(path, fmt::format("failed to read archive {}: {}", path, errno_text(errno)));
    struct stat st {};
    if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) > kMaxArchiveBytes) {
      close(fd);
      return skip(path,
                  fmt::format("failed to read archive {}: larger than {} MiB", path, kMaxArchiveBytes >> 20));
    }
    std::string tar(static_cast<size_t>(st.st_size), '\0');
    size_t got = 0;
    while (got < tar.size()) {
      ssize_t n = read(fd, tar.data() + got, tar.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    close(fd);
    tar.resize(got);
    unpack(path, tar, std::nullopt);
  }

  void unpack(const std::string& origin, std::string_view tar, std::optional<ClockOffset> offset) {
    auto files = read_bundle_tar(tar);
    if (!files) return skip(origin, fmt::format("failed to read archive {}: {}", origin, files.error()));
    auto b = read_bundle_files(origin, files->files);
    if (!b) return skip(origin, b.error());
    b->clock_offset = offset;
    keep(std::move(*b));
  }

  // A daemon: its /bundles index, then each bundle of the job as an archive.
  // The index carries the daemon's clock: its offset from ours is measured
  // against the request's round trip.
  void daemon(const std::string& url) {
    std::string base = without_trailing_slashes(url);
    std::string only;  // a URL of one bundle: /bundles/NAME
    if (size_t at = base.rfind("/bundles/"); at != std::string::npos) {
      only = base.substr(at + 9);
      base = base.substr(0, at);
    } else if (base.ends_with("/bundles")) {
      base = base.substr(0, base.size() - 8);
    }
    auto index = http_get({base + "/bundles", o_.token});
    if (!index) return skip(url, index.error());
    auto j = nlohmann::json::parse(index->body, nullptr, false);
    if (j.is_discarded() || !j.is_object() || j.value("schema", "") != kBundleIndexSchema ||
        !j.contains("bundles") || !j["bundles"].is_array())
      return skip(url,
                  fmt::format("failed to read the bundle index of {}: not a hangtrace bundle index", base));
    std::optional<ClockOffset> offset;
    if (auto now = j.find("now_unix"); now != j.end() && now->is_number()) {
      const double mid = (index->sent_unix + index->received_unix) / 2;
      offset = ClockOffset{now->get<double>() - mid, (index->received_unix - index->sent_unix) / 2};
    }
    std::vector<std::string> names;
    for (const auto& e : j["bundles"]) {
      if (!e.is_object() || !e.contains("name") || !e["name"].is_string()) continue;
      const std::string name = e["name"].get<std::string>();
      if (!plain_bundle_name(name)) continue;  // never put another host's words into a URL unchecked
      if (!only.empty() && name != only) continue;
      const std::string job =
          e.contains("job_id") && e["job_id"].is_string() ? e["job_id"].get<std::string>() : "";
      if (only.empty() && !o_.job_id.empty() && job != o_.job_id) continue;
      names.push_back(name);
    }
    if (names.empty())
      return skip(url, !only.empty()       ? fmt::format("no bundle {} there", only)
                       : o_.job_id.empty() ? std::string("no bundle there")
                                           : fmt::format("no bundle of job {} there", o_.job_id));
    for (const auto& name : names) {
      if (out_.bundles.size() == kMaxBundles)
        return skip(url, fmt::format("more than {} bundles: left out", kMaxBundles));
      const std::string at = base + "/bundles/" + name;
      auto tar = http_get({at, o_.token, kMaxArchiveBytes, kArchiveTimeoutS});
      if (!tar) {
        skip(at, tar.error());
        continue;
      }
      unpack(at, tar->body, offset);
    }
  }

  // Which daemons report the job hung (now or within the lookback), by the
  // scrape target Prometheus knows them as: their /bundles sits beside
  // /metrics there.
  void prometheus() {
    const std::string base = without_trailing_slashes(o_.prometheus_url);
    std::string id;
    for (char c : o_.job_id) {
      if (c == '\\' || c == '"') id += '\\';
      id += c;
    }
    const std::string query =
        fmt::format("last_over_time(hangtrace_job_hung{{job_id=\"{}\"}}[{}])", id, kPrometheusLookback);
    auto answer = http_get({base + "/api/v1/query?query=" + url_encode(query)});
    if (!answer) return skip(base, answer.error());
    auto j = nlohmann::json::parse(answer->body, nullptr, false);
    if (j.is_discarded() || !j.is_object() || j.value("status", "") != "success" || !j.contains("data") ||
        !j["data"].is_object() || !j["data"].contains("result") || !j["data"]["result"].is_array())
      return skip(base, "failed to ask Prometheus: not a Prometheus query answer");
    std::set<std::string> instances;
    for (const auto& r : j["data"]["result"]) {
      if (!r.is_object() || !r.contains("metric") || !r["metric"].is_object()) continue;
      const auto& m = r["metric"];
      if (!m.contains("instance") || !m["instance"].is_string()) continue;
      const std::string instance = m["instance"].get<std::string>();
      // host:port, as scrape targets are: nothing that would reshape the URL.
      if (instance.empty() || instance.size() > 255 ||
          instance.find_first_of("/?#@ \t\r\n\\") != std::string::npos)
        continue;
      instances.insert(instance);
    }
    if (instances.empty())
      return skip(base, fmt::format("no daemon reports job {} hung (hangtrace_job_hung within the last {})",
                                    o_.job_id, kPrometheusLookback));
    for (const auto& instance : instances) daemon("http://" + instance);
  }

  const MergeSources& o_;
  GatheredBundles out_;
};

}  // namespace

GatheredBundles gather_bundles(const MergeSources& sources) { return Gatherer(sources).run(); }

}  // namespace hangtrace::cli
