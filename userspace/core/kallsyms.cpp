#include "hangtrace/kallsyms.h"

#include "hangtrace/procfs.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

namespace hangtrace {

namespace {

// Past the last symbol (or across a gap to the next one) an address is more
// likely to be outside any function than inside a megabyte-long one.
constexpr uint64_t kMaxFunctionSize = 1 << 20;

bool is_text_type(std::string_view type) {
  return type.size() == 1 && (type[0] == 't' || type[0] == 'T' || type[0] == 'w' || type[0] == 'W');
}

// "__pfx_" (and "__cfi_") symbols are the padding in front of each function;
// keeping them would make a return address just past a noreturn call read as
// "__pfx_next_function+0x0" instead of the function it is in.
bool is_padding(std::string_view name) { return name.starts_with("__pfx_") || name.starts_with("__cfi_"); }

std::string_view next_field(std::string_view& line) {
  size_t start = line.find_first_not_of(" \t");
  if (start == std::string_view::npos) {
    line = {};
    return {};
  }
  line.remove_prefix(start);
  size_t end = line.find_first_of(" \t");
  std::string_view field = line.substr(0, end);
  line.remove_prefix(end == std::string_view::npos ? line.size() : end);
  return field;
}

// The symbol an address falls in, and its size when the next symbol bounds it
// (0 for the last one). Symbol is private to KernelSymbols, hence the template.
template <class Sym>
struct Hit {
  const Sym* sym = nullptr;
  uint64_t size = 0;
};

template <class Sym>
Hit<Sym> containing(const std::vector<Sym>& symbols, uint64_t addr) {
  auto it = std::upper_bound(symbols.begin(), symbols.end(), addr,
                             [](uint64_t a, const Sym& s) { return a < s.addr; });
  if (it == symbols.begin()) return {};
  const Sym& sym = *std::prev(it);
  uint64_t offset = addr - sym.addr;
  uint64_t size = it != symbols.end() ? it->addr - sym.addr : 0;
  if (offset >= kMaxFunctionSize) return {};
  return {&sym, size <= kMaxFunctionSize ? size : 0};
}

}  // namespace

Result<KernelSymbols> KernelSymbols::parse(std::string_view text) {
  KernelSymbols out;
  bool any_nonzero = false;
  size_t lines = 0;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);

    std::string_view addr_s = next_field(line);
    std::string_view type = next_field(line);
    std::string_view name = next_field(line);
    if (addr_s.empty() || name.empty()) continue;
    uint64_t addr = 0;
    auto [ptr, ec] = std::from_chars(addr_s.data(), addr_s.data() + addr_s.size(), addr, 16);
    if (ec != std::errc() || ptr != addr_s.data() + addr_s.size()) continue;
    ++lines;
    if (addr != 0) any_nonzero = true;
    if (!is_text_type(type) || is_padding(name)) continue;
    // A trailing "[module]" is left off: callers match on function names.
    out.symbols_.push_back({addr, std::string(name)});
  }
  if (lines == 0) return make_error("failed to parse kallsyms: no symbols");
  if (!any_nonzero) {
    return make_error(
        "failed to parse kallsyms: all addresses are zero (they are shown only to CAP_SYSLOG, or to "
        "everyone with kernel.kptr_restrict=0 and kernel.perf_event_paranoid<=1)");
  }
  // Aliases share an address; stable sort keeps the first one kallsyms lists.
  std::stable_sort(out.symbols_.begin(), out.symbols_.end(),
                   [](const Symbol& a, const Symbol& b) { return a.addr < b.addr; });
  out.symbols_.erase(std::unique(out.symbols_.begin(), out.symbols_.end(),
                                 [](const Symbol& a, const Symbol& b) { return a.addr == b.addr; }),
                     out.symbols_.end());
  return out;
}

Result<KernelSymbols> KernelSymbols::load(const std::string& proc_root) {
  auto text = procfs::ProcFs(proc_root).kallsyms();
  if (!text) return make_error(text.error());
  return parse(*text);
}

std::string KernelSymbols::symbolize(uint64_t addr) const {
  auto hit = containing(symbols_, addr);
  if (!hit.sym) return fmt::format("{:#x}", addr);
  if (hit.size == 0) return fmt::format("{}+{:#x}", hit.sym->name, addr - hit.sym->addr);
  return fmt::format("{}+{:#x}/{:#x}", hit.sym->name, addr - hit.sym->addr, hit.size);
}

std::string KernelSymbols::function(uint64_t addr) const {
  auto hit = containing(symbols_, addr);
  return hit.sym ? hit.sym->name : std::string();
}

}  // namespace hangtrace
