// ELF files read for their symbols, build-id, segments and sections, on
// elfutils' libelf: the one place that walks an ELF's tables. Its users:
// python_runtime (_PyRuntime, Py_Version, the .PyRuntime section), live_gpu
// (the CUDA / NCCL functions a library defines, for uprobes) and
// native_symbols (the sorted address index that names native frames).
//
// The files are the ones traced processes map, reached through their
// /proc/PID/root: hostile. Only a regular file is opened (a FIFO or device
// planted at the path would block or never end), and opened without
// blocking; libelf checks every header and table against the file's size,
// and every walk here counts from what it validated (at most
// kMaxSegments program headers, symbols as many as the table's data holds).
#pragma once

#include <gelf.h>
#include <libelf.h>

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "hangtrace/result.h"

namespace hangtrace::elf {

// Program headers read at most (real files have about ten).
constexpr size_t kMaxSegments = 256;

struct LoadSegment {  // one PT_LOAD program header
  uint64_t vaddr = 0, offset = 0, filesz = 0;
  uint32_t flags = 0;  // PF_X, PF_W, PF_R
};

struct Symbol {
  uint64_t value = 0;  // st_value: the ELF virtual address
  uint64_t size = 0;
  unsigned char type = STT_NOTYPE;  // STT_FUNC, STT_OBJECT, ...
  unsigned char bind = STB_LOCAL;   // STB_GLOBAL, STB_WEAK, STB_LOCAL
  uint16_t section = SHN_UNDEF;     // st_shndx; SHN_UNDEF: a reference, not a definition

  static Symbol of(const GElf_Sym& sym);
  bool defined() const { return section != SHN_UNDEF; }
  bool is_function() const { return type == STT_FUNC || type == STT_GNU_IFUNC; }
};

// Which symbol tables to read: .symtab (all symbols, gone from a stripped
// file), .dynsym (what the dynamic linker resolves), or both, in file order.
enum class Tables { Symtab, Dynsym, Both };

class ElfFile {
 public:
  // Errors: "failed to open PATH: reason", "PATH is not a regular file",
  // "PATH is not an ELF file".
  static Result<ElfFile> open(const std::string& path);
  ElfFile(ElfFile&& other) noexcept;
  ElfFile& operator=(ElfFile&& other) noexcept;
  ElfFile(const ElfFile&) = delete;
  ElfFile& operator=(const ElfFile&) = delete;
  ~ElfFile();

  // ET_DYN (a shared library or PIE): loaded at a bias.
  bool is_shared_object() const;
  // The PT_LOAD segments, in header order.
  std::vector<LoadSegment> load_segments() const;
  // The GNU build-id note from the section headers, in hex; "" when none.
  std::string build_id() const;
  // sh_addr of the first section of `type` named `name`; 0 when none.
  uint64_t section_address(const char* name, uint32_t type) const;
  // Calls `visit` for every named symbol of `tables`, in file order, until
  // it returns false. Returns how many tables were read.
  int for_each_symbol(Tables tables, const std::function<bool(const Symbol&, const char* name)>& visit) const;
  // The first symbol of each of `names` that `accept` takes (names not
  // found are absent); stops reading once all are found.
  std::unordered_map<std::string, Symbol> find_symbols(
      Tables tables, const std::vector<std::string>& names,
      const std::function<bool(const Symbol&)>& accept) const;

 private:
  ElfFile(int fd, Elf* elf) : fd_(fd), elf_(elf) {}
  int fd_ = -1;
  Elf* elf_ = nullptr;
};

// Bytes as lowercase hex (build-ids).
std::string hex(const unsigned char* bytes, size_t len);

// A module's function symbols sorted by address. A lookup is a binary search
// where dwfl_module_addrinfo scans the whole table each time (~1.5 ms for a
// static function of python3.11, far more in libtorch_cpu.so). Names are
// copied, so the index needs no file or Dwfl to stay open.
// A mapped file's symbols are as many and as long as its writer made them
// (every entry may name one long string): an index keeps at most
// kMaxIndexedSymbols, their names cut at kMaxSymbolNameBytes and together at
// most kMaxIndexedNameBytes. A real library (libtorch_cpu: ~10^6 symbols,
// ~200 MB of names) fits.
constexpr size_t kMaxIndexedSymbols = size_t{4} << 20;
constexpr size_t kMaxSymbolNameBytes = size_t{16} << 10;
constexpr size_t kMaxIndexedNameBytes = size_t{512} << 20;

class SymbolIndex {
 public:
  // A defined, named FUNC, GNU_IFUNC or NOTYPE symbol at `start` (its ELF
  // virtual address); anything else is left out.
  void add(const Symbol& sym, uint64_t start, const char* name);
  // The function symbols of `file`'s `tables`, by ELF virtual address;
  // false when it has none of those tables.
  bool add_file(const ElfFile& file, Tables tables);
  // Sorts, keeping one name per address: GLOBAL over WEAK over LOCAL, then
  // the larger. Call once, after the adds.
  void finish();
  // The name of the symbol covering `addr`: the nearest at or below it whose
  // size reaches it (a few back, for symbols nested in a larger one), else a
  // sized-0 symbol right below (hand-written assembly often has no size).
  // nullptr when none.
  const char* find(uint64_t addr) const;
  size_t size() const { return entries_.size(); }
  size_t name_bytes() const { return names_.size(); }
  // Symbols left out by the bounds above.
  size_t left_out() const { return left_out_; }

 private:
  struct Entry {
    uint64_t start;
    uint64_t size;
    uint32_t name;  // offset into names_
    uint8_t rank;   // GLOBAL 2, WEAK 1, LOCAL 0
  };
  std::vector<Entry> entries_;
  std::string names_;
  size_t left_out_ = 0;
};

}  // namespace hangtrace::elf
