#include "elf_symbols.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <unordered_set>

#include "hangtrace/text.h"

namespace hangtrace::elf {

Symbol Symbol::of(const GElf_Sym& sym) {
  Symbol s;
  s.value = sym.st_value;
  s.size = sym.st_size;
  s.type = static_cast<unsigned char>(GELF_ST_TYPE(sym.st_info));
  s.bind = static_cast<unsigned char>(GELF_ST_BIND(sym.st_info));
  s.section = sym.st_shndx;
  return s;
}

Result<ElfFile> ElfFile::open(const std::string& path) {
  if (elf_version(EV_CURRENT) == EV_NONE) return make_error("failed to read ELF files: libelf is unusable");
  // O_NONBLOCK: opening a FIFO planted at the path returns at once (and is
  // refused below) instead of waiting for a writer.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return make_error(fmt::format("failed to open {}: {}", path, errno_text(errno)));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return make_error(fmt::format("{} is not a regular file", path));
  }
  Elf* elf = elf_begin(fd, ELF_C_READ_MMAP, nullptr);
  if (!elf || elf_kind(elf) != ELF_K_ELF) {
    if (elf) elf_end(elf);
    close(fd);
    return make_error(fmt::format("{} is not an ELF file", path));
  }
  return ElfFile(fd, elf);
}

ElfFile::ElfFile(ElfFile&& other) noexcept : fd_(other.fd_), elf_(other.elf_) {
  other.fd_ = -1;
  other.elf_ = nullptr;
}

ElfFile& ElfFile::operator=(ElfFile&& other) noexcept {
  std::swap(fd_, other.fd_);
  std::swap(elf_, other.elf_);
  return *this;
}

ElfFile::~ElfFile() {
  if (elf_) elf_end(elf_);
  if (fd_ >= 0) close(fd_);
}

bool ElfFile::is_shared_object() const {
  GElf_Ehdr ehdr;
  return gelf_getehdr(elf_, &ehdr) && ehdr.e_type == ET_DYN;
}

std::vector<LoadSegment> ElfFile::load_segments() const {
  std::vector<LoadSegment> out;
  size_t phnum = 0;
  if (elf_getphdrnum(elf_, &phnum) != 0) return out;
  for (size_t i = 0; i < phnum && i < kMaxSegments; ++i) {
    GElf_Phdr ph;
    if (gelf_getphdr(elf_, static_cast<int>(i), &ph) && ph.p_type == PT_LOAD)
      out.push_back({ph.p_vaddr, ph.p_offset, ph.p_filesz, ph.p_flags});
  }
  return out;
}

std::string ElfFile::build_id() const {
  // From the section headers: present in every distribution ELF, and one
  // note needs no libdw.
  for (Elf_Scn* scn = elf_nextscn(elf_, nullptr); scn; scn = elf_nextscn(elf_, scn)) {
    GElf_Shdr shdr;
    if (!gelf_getshdr(scn, &shdr) || shdr.sh_type != SHT_NOTE) continue;
    Elf_Data* data = elf_getdata(scn, nullptr);
    GElf_Nhdr nh;
    size_t off = 0, name_off = 0, desc_off = 0;
    // gelf_getnote checks each note's name and descriptor against the data.
    while (data && (off = gelf_getnote(data, off, &nh, &name_off, &desc_off)) > 0) {
      if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 &&
          std::memcmp(static_cast<const char*>(data->d_buf) + name_off, "GNU", 4) == 0)
        return hex(static_cast<const unsigned char*>(data->d_buf) + desc_off, nh.n_descsz);
    }
  }
  return "";
}

uint64_t ElfFile::section_address(const char* name, uint32_t type) const {
  size_t shstrndx = 0;
  if (elf_getshdrstrndx(elf_, &shstrndx) != 0) return 0;
  for (Elf_Scn* scn = elf_nextscn(elf_, nullptr); scn; scn = elf_nextscn(elf_, scn)) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh) || sh.sh_type != type) continue;
    const char* n = elf_strptr(elf_, shstrndx, sh.sh_name);
    if (n && std::strcmp(n, name) == 0) return sh.sh_addr;
  }
  return 0;
}

int ElfFile::for_each_symbol(Tables tables,
                             const std::function<bool(const Symbol&, const char* name)>& visit) const {
  const size_t sym_size = gelf_fsize(elf_, ELF_T_SYM, 1, EV_CURRENT);
  int read = 0;
  // An object has at most one table of each type (the ELF spec); a file
  // whose section headers name many, all over the same bytes, would have
  // each walked in turn: the first of each is the table.
  bool seen_symtab = false, seen_dynsym = false;
  for (Elf_Scn* scn = elf_nextscn(elf_, nullptr); scn; scn = elf_nextscn(elf_, scn)) {
    GElf_Shdr shdr;
    if (!gelf_getshdr(scn, &shdr) || shdr.sh_entsize == 0) continue;
    bool wanted = tables == Tables::Symtab   ? shdr.sh_type == SHT_SYMTAB
                  : tables == Tables::Dynsym ? shdr.sh_type == SHT_DYNSYM
                                             : shdr.sh_type == SHT_SYMTAB || shdr.sh_type == SHT_DYNSYM;
    if (!wanted) continue;
    bool& seen = shdr.sh_type == SHT_SYMTAB ? seen_symtab : seen_dynsym;
    if (seen) continue;
    seen = true;
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (!data) continue;
    ++read;
    // As many as the header claims and the data (checked against the file
    // by libelf) holds.
    size_t count = shdr.sh_size / shdr.sh_entsize;
    if (sym_size) count = std::min(count, data->d_size / sym_size);
    count = std::min<size_t>(count, INT_MAX);
    for (size_t i = 0; i < count; ++i) {
      GElf_Sym sym;
      if (!gelf_getsym(data, static_cast<int>(i), &sym)) continue;
      const char* name = elf_strptr(elf_, shdr.sh_link, sym.st_name);
      if (!name) continue;
      if (!visit(Symbol::of(sym), name)) return read;
    }
  }
  return read;
}

std::unordered_map<std::string, Symbol> ElfFile::find_symbols(
    Tables tables, const std::vector<std::string>& names,
    const std::function<bool(const Symbol&)>& accept) const {
  std::unordered_map<std::string, Symbol> found;
  if (names.empty()) return found;
  std::unordered_set<std::string> wanted(names.begin(), names.end());
  for_each_symbol(tables, [&](const Symbol& sym, const char* name) {
    if (!wanted.count(name) || found.count(name) || !accept(sym)) return true;
    found.emplace(name, sym);
    return found.size() < wanted.size();
  });
  return found;
}

std::string hex(const unsigned char* bytes, size_t len) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(len * 2);
  for (size_t i = 0; i < len; ++i) {
    out.push_back(digits[bytes[i] >> 4]);
    out.push_back(digits[bytes[i] & 0xf]);
  }
  return out;
}

void SymbolIndex::add(const Symbol& sym, uint64_t start, const char* name) {
  if (!name || !*name || !sym.defined()) return;
  if (!sym.is_function() && sym.type != STT_NOTYPE) return;
  const size_t length = strnlen(name, kMaxSymbolNameBytes);
  if (entries_.size() >= kMaxIndexedSymbols || names_.size() + length + 1 > kMaxIndexedNameBytes) {
    ++left_out_;
    return;
  }
  uint8_t rank = sym.bind == STB_GLOBAL ? 2 : sym.bind == STB_WEAK ? 1 : 0;
  entries_.push_back({start, sym.size, static_cast<uint32_t>(names_.size()), rank});
  names_.append(name, length);
  names_.push_back('\0');
}

bool SymbolIndex::add_file(const ElfFile& file, Tables tables) {
  return file.for_each_symbol(tables, [this](const Symbol& sym, const char* name) {
    add(sym, sym.value, name);
    return true;
  }) > 0;
}

void SymbolIndex::finish() {
  auto& e = entries_;
  std::sort(e.begin(), e.end(), [](const Entry& a, const Entry& b) {
    if (a.start != b.start) return a.start < b.start;
    if (a.rank != b.rank) return a.rank > b.rank;
    return a.size > b.size;
  });
  // Aliases: keep the best-ranked name per address.
  e.erase(std::unique(e.begin(), e.end(), [](const Entry& a, const Entry& b) { return a.start == b.start; }),
          e.end());
  e.shrink_to_fit();
}

const char* SymbolIndex::find(uint64_t addr) const {
  auto it = std::upper_bound(entries_.begin(), entries_.end(), addr,
                             [](uint64_t a, const Entry& e) { return a < e.start; });
  if (it == entries_.begin()) return nullptr;
  auto nearest = std::prev(it);
  if (nearest->size == 0) return names_.data() + nearest->name;
  for (auto c = nearest;; --c) {
    if (c->size && addr < c->start + c->size) return names_.data() + c->name;
    if (c == entries_.begin() || nearest - c >= 8) break;
  }
  return nullptr;
}

}  // namespace hangtrace::elf
