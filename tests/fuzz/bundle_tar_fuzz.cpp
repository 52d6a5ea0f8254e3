// The bundle archive reader of `hangtrace merge` (read_bundle_tar,
// userspace/core/bundle_archive.cpp): what a daemon anywhere in the fleet
// answers at /bundles/NAME. Every name it returns stays a plain name inside
// one bundle, and its files stay within the promised bounds. Seeds: archives
// written by write_bundle_tar of bundles `hangtrace --pid P --bundle DIR`
// wrote (tests/fuzz/README.md).
#include <string_view>

#include "fuzz_support.h"
#include "hangtrace/bundle_archive.h"

using namespace hangtrace;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto b = read_bundle_tar(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!b) return 0;
  fuzz::check(plain_bundle_name(b->name));
  fuzz::check(b->files.size() <= 64);
  size_t total = 0;
  for (const auto& [name, bytes] : b->files) {
    fuzz::check(plain_bundle_name(name));
    total += bytes.size();
  }
  fuzz::check(total <= size);
  return 0;
}
