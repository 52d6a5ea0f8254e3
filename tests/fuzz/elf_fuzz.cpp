// The ELF reader (userspace/collect/elf_symbols.cpp, on elfutils' libelf):
// ElfFile::open, build_id, load_segments, section_address, the symbol
// tables walked and looked up, and the SymbolIndex built from them as
// native_symbols builds it. The input is the file, written to a memfd and
// opened through /proc/self/fd (a regular file, as open() requires). Seeds:
// small real shared objects and executables from this machine (the test
// GPU stubs, libraries from /usr/lib), some cut short.
#include <sys/mman.h>
#include <unistd.h>

#include "elf_symbols.h"
#include "fuzz_support.h"

using namespace hangtrace;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int fd = memfd_create("hangtrace-fuzz-elf", 0);
  if (fd < 0) return 0;
  if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) return 0;
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  auto file = elf::ElfFile::open(path);
  if (!file) return 0;
  (void)file->is_shared_object();
  auto segments = file->load_segments();
  fuzz::check(segments.size() <= elf::kMaxSegments);
  fuzz::check(file->build_id().size() <= 2 * size);
  (void)file->section_address(".PyRuntime", SHT_PROGBITS);
  (void)file->section_address(".text", SHT_PROGBITS);
  size_t symbols = 0;
  file->for_each_symbol(elf::Tables::Both, [&](const elf::Symbol& s, const char* name) {
    fuzz::check(name != nullptr);
    (void)s.is_function();
    ++symbols;
    return true;
  });
  // At most one table of each type (.symtab, .dynsym), each within the file:
  // an Elf64_Sym is 24 bytes, an Elf32_Sym 16.
  fuzz::check(symbols <= 2 * (size / 16 + 1));
  (void)file->find_symbols(elf::Tables::Dynsym, {"_PyRuntime", "Py_Version", "cuLaunchKernel"},
                           [](const elf::Symbol& s) { return s.defined(); });
  elf::SymbolIndex index;
  if (index.add_file(*file, elf::Tables::Both)) {
    index.finish();
    for (const auto& seg : segments) {
      (void)index.find(seg.vaddr);
      (void)index.find(seg.vaddr + seg.filesz / 2);
    }
  }
  return 0;
}
