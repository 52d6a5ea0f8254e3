// CPython's line tables (python_linetable in userspace/collect/python_stacks.h):
// the 3.11+ location table (line_for_offset, with its varints), 3.10's
// co_linetable (linetable310_line) and 3.8/3.9's co_lnotab (lnotab_line).
// Input: byte 0 picks the decoder (% 3: 0 lnotab, 1 3.10, 2 3.11+), bytes
// 1-4 co_firstlineno, 5-8 a byte offset (both little-endian int32), the rest
// the table; every even offset up to twice the table size is asked too.
// Seeds: co_lnotab / co_linetable of real code objects from pyenv's 3.8-3.13.
#include "fuzz_support.h"
#include "python_stacks.h"

using namespace hangtrace;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 9) return 0;
  int kind = data[0] % 3;
  int32_t first_line = 0, offset = 0;
  std::memcpy(&first_line, data + 1, 4);
  std::memcpy(&offset, data + 5, 4);
  const uint8_t* table = data + 9;
  size_t n = size - 9;
  auto line = [&](int64_t at) {
    switch (kind) {
      case 0:
        return python_linetable::lnotab_line(table, n, first_line, at);
      case 1:
        return python_linetable::linetable310_line(table, n, first_line, at);
      default:
        return python_linetable::line_for_offset(table, n, first_line, at);
    }
  };
  auto sane = [&](int l) { fuzz::check(l == first_line || (l >= 0 && l <= (1 << 30))); };
  sane(line(offset));
  sane(line(-1));
  for (int64_t at = 0; at <= static_cast<int64_t>(2 * n + 2) && at < 8192; at += 2) sane(line(at));
  return 0;
}
