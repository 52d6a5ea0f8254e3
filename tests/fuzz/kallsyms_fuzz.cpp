// /proc/kallsyms (KernelSymbols::parse, userspace/core/kallsyms.cpp) and
// lookups in what it parsed: the first 8 bytes of the input are an address
// to symbolize (little-endian), besides each symbol's own address +-1 of
// the first few. Seeds: a few hundred lines of this machine's kallsyms (as
// root: real addresses), with modules ("[nvidia]") and __pfx_ padding.
#include <charconv>

#include "fuzz_support.h"
#include "hangtrace/kallsyms.h"

using namespace hangtrace;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  uint64_t probe = 0;
  if (size >= 8) {
    std::memcpy(&probe, data, 8);
    data += 8;
    size -= 8;
  }
  std::string_view text = fuzz::as_text(data, size);
  auto syms = KernelSymbols::parse(text);
  if (!syms) return 0;
  fuzz::check(syms->size() <= size / 4 + 1);
  fuzz::check(syms->symbolize(probe).size() <= size + 64);
  (void)syms->function(probe);
  // The addresses of the first lines, and around them.
  size_t pos = 0;
  for (int i = 0; i < 8 && pos < text.size(); ++i) {
    size_t nl = text.find('\n', pos);
    std::string_view line =
        text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    uint64_t addr = 0;
    std::from_chars(line.data(), line.data() + line.size(), addr, 16);
    for (uint64_t a : {addr - 1, addr, addr + 1}) fuzz::check(syms->symbolize(a).size() <= size + 64);
    if (nl == std::string_view::npos) break;
    pos = nl + 1;
  }
  return 0;
}
