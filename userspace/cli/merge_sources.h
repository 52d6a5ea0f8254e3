// Where `hangtrace merge` gets one job's bundles from (docs/merge.md): bundle
// directories and directories of bundles, bundle archives (what a daemon
// serves at /bundles/NAME), daemon URLs, and Prometheus, which is asked which
// daemons report the job hung. A source that fails is one line in `skipped`,
// and the rest are still merged.
#pragma once

#include <string>
#include <vector>

#include "hangtrace/bundle.h"

namespace hangtrace::cli {

struct MergeSources {
  std::vector<std::string> sources;  // directories, archives, http(s) URLs of daemons
  std::string prometheus_url;        // with job_id: the daemons reporting that job hung
  std::string job_id;                // "": every job's bundles; else only this job's
  std::string token;                 // sent to daemons as a bearer token
};

struct GatheredBundles {
  std::vector<LoadedBundle> bundles;
  std::vector<std::string> skipped;  // "SOURCE: why", one line each
};

GatheredBundles gather_bundles(const MergeSources& sources);

}  // namespace hangtrace::cli
