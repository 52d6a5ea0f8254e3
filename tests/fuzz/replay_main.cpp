// A main() for a fuzz target built without libFuzzer: runs
// LLVMFuzzerTestOneInput once on every file named, or found (recursively) in a
// directory named, so the corpus and the regressions are replayed by ctest in
// any build. Arguments starting with '-' (libFuzzer's flags) are ignored.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

int replay(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "failed to read %s\n", file.c_str());
    return 1;
  }
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  size_t inputs = 0;
  int failures = 0;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.starts_with("-")) continue;
    std::error_code ec;
    if (std::filesystem::is_directory(arg, ec)) {
      for (const auto& entry : std::filesystem::recursive_directory_iterator(arg, ec)) {
        if (!entry.is_regular_file() || entry.path().filename().string().starts_with(".")) continue;
        failures += replay(entry.path());
        ++inputs;
      }
    } else {
      failures += replay(arg);
      ++inputs;
    }
  }
  std::printf("replayed %zu inputs\n", inputs);
  // No input at all is a missing corpus, not a pass.
  if (inputs == 0) std::fprintf(stderr, "failed to replay: no inputs found\n");
  return failures == 0 && inputs > 0 ? 0 : 1;
}
