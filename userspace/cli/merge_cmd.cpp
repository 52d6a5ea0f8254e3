// hangtrace merge SOURCE...: one job's ranks, from the bundles of its hosts
// (docs/merge.md). A SOURCE is a bundle directory, a directory holding
// bundles, a bundle archive, or a daemon's URL; --prometheus URL --job ID asks
// Prometheus which daemons report the job hung and fetches their bundles
// (merge_sources.cpp). A source that fails is one line on stderr and a
// warning in the report; the rest are merged.
#include <fmt/format.h>

#include <cstdio>
#include <memory>

#include "hangtrace/merge.h"
#include "merge_sources.h"
#include "subcommands.h"
#include "token_file.h"

namespace hangtrace::cli {

namespace {

struct MergeOptions {
  MergeSources sources;
  std::string token_file;
  std::string json_path;  // "-": stdout, no text
};

int run_merge(MergeOptions opt) {
  if (opt.sources.sources.empty() && opt.sources.prometheus_url.empty())
    return fail("failed to merge: name bundles, archives or daemon URLs, or --prometheus URL --job ID");
  if (!opt.sources.prometheus_url.empty() && opt.sources.job_id.empty())
    return fail("failed to merge: --prometheus needs --job ID (the job id the daemons report)");
  if (!opt.token_file.empty()) {
    auto token = read_token_file(opt.token_file);
    if (!token) return fail(token.error());
    opt.sources.token = std::move(*token);
  }
  GatheredBundles gathered = gather_bundles(opt.sources);
  for (const auto& line : gathered.skipped) std::fprintf(stderr, "hangtrace: skipped %s\n", line.c_str());
  if (gathered.bundles.empty())
    return fail(fmt::format("failed to merge: no bundle could be read ({} source{} skipped)",
                            gathered.skipped.size(), gathered.skipped.size() == 1 ? "" : "s"));
  MergedReport report = merge_bundles(gathered.bundles);
  for (const auto& line : gathered.skipped) report.warnings.push_back("skipped " + line);
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
      "what it does instead, which rank stalled first, which ranks' stacks stand out. Exit status: 2 a rank "
      "is missing, 0 none, 1 no bundle could be read");
  s.app
      ->add_option("sources", opt->sources.sources,
                   "bundle directories, directories holding bundles, bundle archives (.tar), or daemon URLs "
                   "(http://HOST:PORT, whose /bundles are fetched)")
      ->type_name("SOURCE...");
  s.app
      ->add_option("--prometheus", opt->sources.prometheus_url,
                   "ask this Prometheus (http://HOST:9090) which daemons report --job hung "
                   "(hangtrace_job_hung, within the last hour) and fetch their bundles")
      ->type_name("URL");
  s.app
      ->add_option("--job", opt->sources.job_id,
                   "merge only the bundles of this job id (the job_id label and bundle field)")
      ->type_name("ID");
  s.app
      ->add_option("--token-file", opt->token_file,
                   "send the token in FILE (mode 600) to daemons, as their --bundle-token-file")
      ->type_name("FILE");
  s.app->add_option("--json", opt->json_path,
                    "write the merged report as JSON to FILE ('-' = stdout, no text)");
  s.run = [opt] { return run_merge(*opt); };
  return s;
}

}  // namespace hangtrace::cli
