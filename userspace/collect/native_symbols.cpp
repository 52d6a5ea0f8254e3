#include "native_symbols.h"

#include <algorithm>
#include <functional>

#include "hangtrace/text.h"

namespace hangtrace {

namespace {

constexpr size_t kMaxSymbolCache = 1 << 16;
constexpr size_t kMaxSymbolIndexes = 64;
constexpr size_t kMaxFunctionChars = 200;

// The separate debug file's .symtab (installed -dbg packages) has the static
// functions a stripped library lacks. Read with libelf and closed again: the
// cached Dwfls never look for debug files, so they hold no fds.
bool add_debug_file(elf::SymbolIndex& index, const std::string& build_id) {
  if (build_id.size() < 4) return false;
  std::string path =
      "/usr/lib/debug/.build-id/" + build_id.substr(0, 2) + "/" + build_id.substr(2) + ".debug";
  auto file = elf::ElfFile::open(path);
  return file && index.add_file(*file, elf::Tables::Symtab);
}

// From a module of a live process: the debug file, else what libdwfl found
// for the module.
std::shared_ptr<elf::SymbolIndex> index_of_module(Dwfl_Module* mod, Dwarf_Addr bias,
                                                  const std::string& build_id) {
  auto index = std::make_shared<elf::SymbolIndex>();
  if (!add_debug_file(*index, build_id)) {
    int n = dwfl_module_getsymtab(mod);
    for (int i = 0; i < n; ++i) {
      GElf_Sym sym;
      GElf_Addr addr = 0;
      const char* name = dwfl_module_getsym_info(mod, i, &sym, &addr, nullptr, nullptr, nullptr);
      if (addr >= bias) index->add(elf::Symbol::of(sym), addr - bias, name);
    }
  }
  index->finish();
  return index;
}

// From the files alone (no process, no Dwfl): the debug file's .symtab when
// installed, else the ELF's own .symtab and .dynsym.
std::shared_ptr<elf::SymbolIndex> index_of_file(const std::string& path, const std::string& build_id) {
  auto index = std::make_shared<elf::SymbolIndex>();
  if (!add_debug_file(*index, build_id)) {
    if (auto file = elf::ElfFile::open(path)) index->add_file(*file, elf::Tables::Both);
  }
  index->finish();
  return index;
}

}  // namespace

size_t NativeSymbolizer::SymbolKeyHash::operator()(const SymbolKey& k) const {
  return std::hash<std::string>()(k.build_id) ^ (std::hash<uint64_t>()(k.offset) * 0x9e3779b97f4a7c15ull);
}

const NativeSymbolizer::FileMeta& NativeSymbolizer::file_meta(const std::string& path) {
  auto it = files_.find(path);
  if (it != files_.end()) return it->second;
  if (files_.size() >= kMaxSymbolIndexes * 4) files_.clear();
  FileMeta m;
  if (auto file = elf::ElfFile::open(path)) {
    for (const elf::LoadSegment& s : file->load_segments())
      if (s.flags & PF_X) m.segments.push_back({s.offset, s.filesz, s.vaddr});
    m.build_id = file->build_id();
    m.ok = !m.segments.empty();
  }
  return files_.emplace(path, std::move(m)).first->second;
}

const elf::SymbolIndex& NativeSymbolizer::index_for(
    const std::string& build_id, const std::function<std::shared_ptr<elf::SymbolIndex>()>& build) {
  auto it = indexes_.find(build_id);
  if (it == indexes_.end()) {
    if (indexes_.size() >= kMaxSymbolIndexes) indexes_.clear();
    it = indexes_.emplace(build_id, build()).first;
  }
  return *it->second;
}

std::string NativeSymbolizer::cached_name(const SymbolKey& key, NativeStackStats& stats, bool& hit) {
  auto it = symbols_.find(key);
  hit = it != symbols_.end();
  if (!hit) {
    ++stats.symbol_cache_misses;
    return "";
  }
  ++stats.symbol_cache_hits;
  return it->second;
}

void NativeSymbolizer::remember(SymbolKey key, const std::string& function) {
  if (symbols_.size() >= kMaxSymbolCache) symbols_.clear();
  symbols_.emplace(std::move(key), function);
}

std::string NativeSymbolizer::name_in_module(Dwfl_Module* mod, Dwarf_Addr bias, const std::string& build_id,
                                             Dwarf_Addr lookup, NativeStackStats& stats) {
  // Without a build-id nothing says two files are the same: look up, don't cache.
  if (build_id.empty()) {
    GElf_Off offset = 0;
    GElf_Sym sym;
    const char* name = dwfl_module_addrinfo(mod, lookup, &offset, &sym, nullptr, nullptr, nullptr);
    return name && *name ? demangle(name, kMaxFunctionChars) : std::string();
  }
  SymbolKey key{build_id, lookup - bias};
  bool hit = false;
  std::string function = cached_name(key, stats, hit);
  if (hit) return function;
  const elf::SymbolIndex& index = index_for(build_id, [&] { return index_of_module(mod, bias, build_id); });
  const char* name = index.find(lookup - bias);
  function = name && *name ? demangle(name, kMaxFunctionChars) : std::string();
  remember(std::move(key), function);
  return function;
}

void NativeSymbolizer::name_file_frame(UserFrame& f, bool innermost, NativeStackStats& stats) {
  const FileMeta& m = file_meta(f.file);
  if (!m.ok) return;
  uint64_t offset = f.module_offset;
  auto seg = std::find_if(m.segments.begin(), m.segments.end(),
                          [&](const auto& s) { return offset >= s[0] && offset < s[0] + s[1]; });
  if (seg == m.segments.end()) return;
  uint64_t vaddr = offset - (*seg)[0] + (*seg)[2];
  f.module_offset = vaddr;
  f.build_id = m.build_id;
  // A return address points after its call: look up the call (the
  // innermost frame is where the thread is, not a return address).
  uint64_t lookup = innermost ? vaddr : vaddr - 1;
  if (m.build_id.empty()) return;
  SymbolKey key{m.build_id, lookup};
  bool hit = false;
  std::string function = cached_name(key, stats, hit);
  if (!hit) {
    const elf::SymbolIndex& index = index_for(m.build_id, [&] { return index_of_file(f.file, m.build_id); });
    const char* name = index.find(lookup);
    function = name ? demangle(name, kMaxFunctionChars) : std::string();
    remember(std::move(key), function);
  }
  f.function = std::move(function);
}

}  // namespace hangtrace
