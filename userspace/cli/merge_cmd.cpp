// hangtrace merge BUNDLE...: one job's ranks, from the bundles of its hosts
// (docs/merge.md). Each BUNDLE is a bundle directory (it has meta.json) or a
// directory holding bundles (the daemon's, or `hangtrace --bundle DIR`'s).
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "hangtrace/bundle.h"
#include "hangtrace/merge.h"
#include "subcommands.h"

namespace hangtrace::cli {

namespace {

namespace fs = std::filesystem;

struct MergeOptions {
  std::vector<std::string> bundles;
  std::string json_path;  // "-": stdout, no text
};

bool is_bundle_dir(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "meta.json", ec);
}

// The bundle directories an argument names: itself, or the bundles directly
// inside it (hidden ones, half-written, are skipped), sorted by name.
std::vector<std::string> bundle_dirs(const std::string& arg) {
  fs::path dir(arg);
  if (is_bundle_dir(dir)) return {arg};
  std::vector<std::string> out;
  std::error_code ec;
  if (fs::is_directory(dir, ec))
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      std::string name = e.path().filename().string();
      if (name.empty() || name[0] == '.') continue;
      if (e.is_directory(ec) && is_bundle_dir(e.path())) out.push_back(e.path().string());
    }
  std::sort(out.begin(), out.end());
  if (out.empty()) out.push_back(arg);  // read_bundle says why it is no bundle
  return out;
}

int run_merge(const MergeOptions& opt) {
  std::vector<LoadedBundle> loaded;
  for (const auto& arg : opt.bundles)
    for (const auto& dir : bundle_dirs(arg)) {
      auto b = read_bundle(dir);
      if (!b) {
        std::string why = b.error();
        // read_bundle's message already names the bundle; otherwise add it.
        return fail(why.rfind("failed to read bundle", 0) == 0
                        ? why
                        : fmt::format("failed to read bundle {}: {}", dir, why));
      }
      loaded.push_back(std::move(*b));
    }
  MergedReport report = merge_bundles(loaded);
  std::string error;
  if (!write_json_and_text(
          opt.json_path, [&] { return merged_report_to_json(report).dump(2) + "\n"; },
          [&] { return render_merged_text(report); }, &error))
    return fail(error);
  return merge_exit_status(report);
}

}  // namespace

Subcommand add_merge_subcommand(CLI::App& parent) {
  auto opt = std::make_shared<MergeOptions>();
  Subcommand s;
  s.app = parent.add_subcommand(
      "merge",
      "merge the bundles of one job's ranks (several hosts): which rank is missing from the collective, "
      "what it does instead, which rank stalled first. Exit status: 2 a rank is missing, 0 none, 1 error");
  s.app->add_option("bundles", opt->bundles, "bundle directories, or directories holding bundles")
      ->required()
      ->type_name("BUNDLE...");
  s.app->add_option("--json", opt->json_path,
                    "write the merged report as JSON to FILE ('-' = stdout, no text)");
  s.run = [opt] { return run_merge(*opt); };
  return s;
}

}  // namespace hangtrace::cli
