// One bundle as a single archive: what the daemon serves at /bundles/NAME
// (daemon_http.cpp) and `hangtrace merge` unpacks. A POSIX ustar archive
// (`tar -x` reads it), the bundle's files under NAME/, written in pieces so a
// large bundle streams; and the index of a directory of bundles as JSON.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "hangtrace/bundle.h"
#include "hangtrace/result.h"

namespace hangtrace {

inline constexpr const char* kBundleIndexSchema = "hangtrace-bundles/1";

// What /bundles lists: each bundle's name, size on disk and the meta fields
// a fleet tool picks bundles by (job id, rank, host, trigger, cause, times),
// and the host's clock as it answers (`now_unix`), which a client fetching
// from several hosts measures their clocks' offsets by.
nlohmann::json bundle_index_json(const std::vector<BundleEntry>& bundles, const std::string& hostname,
                                 double now_unix);

// The regular files of bundle directory `dir` (no links, no subdirectories),
// as a ustar archive under `name`/, handed to `sink` in pieces of at most
// 64 KiB; `sink` returning false (the client went away) stops it. Returns
// the bytes written.
Result<size_t> write_bundle_tar(const std::string& dir, const std::string& name,
                                const std::function<bool(std::string_view)>& sink);

// The files of a ustar archive `tar` holds (as write_bundle_tar writes them:
// regular files under one directory), by name without that directory, and
// the directory's name. Bounded: at most 64 files and 256 MiB in all; any
// other entry, a path that leaves the directory, or a checksum that does not
// match is an error.
struct UnpackedBundle {
  std::string name;
  std::map<std::string, std::string> files;
};
Result<UnpackedBundle> read_bundle_tar(std::string_view tar);

}  // namespace hangtrace
