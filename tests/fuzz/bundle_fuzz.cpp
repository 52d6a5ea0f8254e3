// The bundle loader of `hangtrace merge` (read_bundle, userspace/core/bundle.cpp:
// meta.json, snapshot.json, report.json, recorder.json) and the merge of the
// bundles read (merge_bundles, render_merged_text, merged_report_to_json;
// userspace/core/merge.cpp). Input: bundles separated by "\n==8<==\n", each
// its four files in that order separated by "\n--8<--\n"; they are written
// into a temporary directory per bundle and read back with read_bundle, as
// merge reads a directory, or (every second bundle) read from memory with
// read_bundle_files, as merge reads an archive or a daemon's answer. Seeds: bundles written by `hangtrace
// --pid P --bundle DIR` of two "ranks" of a python3 job (tests/fuzz/README.md).
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "fuzz_support.h"
#include "hangtrace/bundle.h"
#include "hangtrace/merge.h"

using namespace hangtrace;

namespace {

// A directory of this process's own, removed when it exits.
struct Scratch {
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("hangtrace-fuzz-bundle-" + std::to_string(getpid()));
  Scratch() { std::filesystem::create_directories(dir); }
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

const std::filesystem::path& scratch() {
  static const Scratch s;
  return s.dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const char* const kFiles[] = {"meta.json", "snapshot.json", "report.json", "recorder.json"};
  std::vector<LoadedBundle> loaded;
  auto bundles = fuzz::split(fuzz::as_text(data, size), "\n==8<==\n");
  for (size_t b = 0; b < bundles.size() && b < 8; ++b) {
    auto files = fuzz::split(bundles[b], "\n--8<--\n");
    if (b % 2) {
      // As merge reads an archive or a download: from memory, its clock
      // offset measured (on a host 1.5 s per bundle ahead).
      std::map<std::string, std::string> in_memory;
      for (size_t f = 0; f < 4 && f < files.size(); ++f) in_memory[kFiles[f]] = std::string(files[f]);
      auto bundle = read_bundle_files("bundle-" + std::to_string(b), in_memory);
      if (!bundle) continue;
      bundle->clock_offset = ClockOffset{1.5 * static_cast<double>(b), 0.001};
      loaded.push_back(std::move(*bundle));
      continue;
    }
    auto dir = scratch() / std::to_string(b);
    std::filesystem::create_directories(dir);
    for (size_t f = 0; f < 4; ++f) {
      auto path = dir / kFiles[f];
      if (f < files.size()) {
        std::ofstream(path, std::ios::binary | std::ios::trunc) << files[f];
      } else {
        std::filesystem::remove(path);
      }
    }
    auto bundle = read_bundle(dir.string());
    if (bundle) loaded.push_back(std::move(*bundle));
  }
  if (loaded.empty()) return 0;
  MergedReport merged = merge_bundles(loaded);
  (void)render_merged_text(merged);
  (void)merged_report_to_json(merged).dump();
  (void)merge_exit_status(merged);
  return 0;
}
