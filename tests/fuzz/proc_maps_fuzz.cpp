// /proc/PID/maps (parse_maps, parse_maps_line; userspace/core/procfs/maps.cpp).
// Seeds: maps of live processes (python3 with its libraries, a small C
// binary), cut below 64 KiB.
#include "fuzz_support.h"
#include "hangtrace/procfs.h"

using namespace hangtrace;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text = fuzz::as_text(data, size);
  if (auto maps = procfs::parse_maps(text)) {
    fuzz::check(maps->size() <= size / 10 + 1);  // a line is at least "0-0 r 0 0:0 0"
    for (const Mapping& m : *maps) {
      fuzz::check(m.path.size() <= size);
      (void)procfs::is_executable(m);
      (void)m.shared();
    }
  }
  size_t nl = text.find('\n');
  (void)procfs::parse_maps_line(text.substr(0, nl));
  return 0;
}
