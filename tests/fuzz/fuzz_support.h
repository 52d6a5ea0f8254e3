// Helpers shared by the fuzz targets (not the python_walker's image format).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace hangtrace::fuzz {

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Splits `text` on `sep` (a line of its own in the seeds, e.g. "\n--8<--\n"):
// how one input carries several files or several records.
inline std::vector<std::string_view> split(std::string_view text, std::string_view sep) {
  std::vector<std::string_view> out;
  size_t pos = 0;
  while (true) {
    size_t at = text.find(sep, pos);
    if (at == std::string_view::npos) {
      out.push_back(text.substr(pos));
      return out;
    }
    out.push_back(text.substr(pos, at - pos));
    pos = at + sep.size();
  }
}

// The fuzzer's own check of a promised bound: a violation is a crash libFuzzer keeps.
inline void check(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace hangtrace::fuzz
