// The ELF module (userspace/collect/elf_symbols) against files this build
// makes: the stub libcuda / libnccl (tests/integration/gpu_stubs) and a
// reproducer binary; and against what a hostile path may hold instead of an
// ELF. Needs no root.
#include "elf_symbols.h"

#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "support.h"

namespace hangtrace::testing {
namespace {

using elf::ElfFile;
using elf::Symbol;
using elf::SymbolIndex;
using elf::Tables;

ElfFile open_or_fail(const std::string& path) {
  auto file = ElfFile::open(path);
  if (!file) throw std::runtime_error(file.error());
  return std::move(*file);
}

bool any(const Symbol&) { return true; }
bool defined_function(const Symbol& s) { return s.defined() && s.is_function(); }

TEST(ElfSymbols, StubLibcudaIsASharedObjectWithABuildIdAndItsFunctions) {
  ElfFile cuda = open_or_fail(HT_STUB_CUDA_LIBRARY);
  EXPECT_TRUE(cuda.is_shared_object());
  std::string id = cuda.build_id();
  EXPECT_EQ(id.size(), 40u) << id;  // SHA-1, the linker's default
  EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;

  auto found = cuda.find_symbols(
      Tables::Dynsym, {"cuLaunchKernel", "cuStreamSynchronize", "no_such_function"}, defined_function);
  ASSERT_EQ(found.size(), 2u);
  EXPECT_TRUE(found.count("cuLaunchKernel"));
  EXPECT_TRUE(found.count("cuStreamSynchronize"));
  EXPECT_EQ(found["cuLaunchKernel"].type, STT_FUNC);
  EXPECT_EQ(found["cuLaunchKernel"].bind, STB_GLOBAL);
  EXPECT_NE(found["cuLaunchKernel"].value, 0u);
  EXPECT_GT(found["cuLaunchKernel"].size, 0u);
}

// libnccl calls cuLaunchKernel: its .dynsym names it, undefined.
TEST(ElfSymbols, ReferencesAreNotDefinitions) {
  ElfFile nccl = open_or_fail(HT_STUB_NCCL_LIBRARY);
  auto defined = nccl.find_symbols(Tables::Dynsym, {"ncclAllReduce", "cuLaunchKernel"}, defined_function);
  EXPECT_TRUE(defined.count("ncclAllReduce"));
  EXPECT_FALSE(defined.count("cuLaunchKernel"));
  auto all = nccl.find_symbols(Tables::Dynsym, {"cuLaunchKernel"}, any);
  ASSERT_TRUE(all.count("cuLaunchKernel"));
  EXPECT_FALSE(all["cuLaunchKernel"].defined());
}

TEST(ElfSymbols, WalksStopWhenTheVisitorSaysSo) {
  ElfFile cuda = open_or_fail(HT_STUB_CUDA_LIBRARY);
  int all = 0, one = 0;
  EXPECT_EQ(cuda.for_each_symbol(Tables::Both,
                                 [&](const Symbol&, const char*) {
                                   ++all;
                                   return true;
                                 }),
            2);  // an unstripped library: .symtab and .dynsym
  cuda.for_each_symbol(Tables::Both, [&](const Symbol&, const char*) {
    ++one;
    return false;
  });
  EXPECT_GT(all, 10);
  EXPECT_EQ(one, 1);
  EXPECT_EQ(cuda.for_each_symbol(Tables::Dynsym, [](const Symbol&, const char*) { return true; }), 1);
}

TEST(ElfSymbols, SegmentsAndSectionsOfAnExecutable) {
  ElfFile exe = open_or_fail(repro_path("repro_native_nofp"));
  uint64_t text = exe.section_address(".text", SHT_PROGBITS);
  ASSERT_NE(text, 0u);
  EXPECT_EQ(exe.section_address(".text", SHT_NOBITS), 0u);
  EXPECT_EQ(exe.section_address(".PyRuntime", SHT_PROGBITS), 0u);
  bool text_in_code = false;
  for (const elf::LoadSegment& s : exe.load_segments())
    text_in_code = text_in_code || ((s.flags & PF_X) && text >= s.vaddr && text < s.vaddr + s.filesz);
  EXPECT_TRUE(text_in_code) << ".text at " << text << " is in no executable PT_LOAD";
  EXPECT_EQ(exe.build_id().size(), 40u);
}

// The index names every address of a function by that function, and
// nothing past its end.
TEST(ElfSymbols, IndexNamesTheAddressesOfEachFunction) {
  ElfFile exe = open_or_fail(repro_path("repro_native_nofp"));
  const std::string middle = "_ZN4nofp6middleEi", outer = "_ZN4nofp5outerEi";
  auto found = exe.find_symbols(Tables::Symtab, {middle, outer}, defined_function);
  ASSERT_EQ(found.size(), 2u);
  SymbolIndex index;
  ASSERT_TRUE(index.add_file(exe, Tables::Both));
  index.finish();
  EXPECT_GT(index.size(), 3u);
  for (const std::string& name : {middle, outer}) {
    const Symbol& s = found[name];
    ASSERT_GT(s.size, 0u) << name;
    for (uint64_t addr : {s.value, s.value + s.size / 2, s.value + s.size - 1}) {
      const char* got = index.find(addr);
      ASSERT_NE(got, nullptr) << name << " +" << addr - s.value;
      EXPECT_EQ(std::string(got), name) << "+" << addr - s.value;
    }
  }
  EXPECT_EQ(index.find(0), nullptr);
}

TEST(ElfSymbols, IndexPrefersGlobalAliasesAndKeepsSizelessSymbols) {
  auto sym = [](unsigned char bind, uint64_t size, unsigned char type = STT_FUNC) {
    Symbol s;
    s.bind = bind;
    s.size = size;
    s.type = type;
    s.section = 1;
    return s;
  };
  SymbolIndex index;
  index.add(sym(STB_LOCAL, 0x40), 0x1000, "local_alias");
  index.add(sym(STB_GLOBAL, 0x40), 0x1000, "global_name");
  index.add(sym(STB_WEAK, 0x40), 0x1000, "weak_alias");
  index.add(sym(STB_GLOBAL, 0x100), 0x2000, "outer");
  index.add(sym(STB_LOCAL, 0x10), 0x2010, "nested");
  index.add(sym(STB_GLOBAL, 0, STT_NOTYPE), 0x3000, "asm_no_size");
  index.add(sym(STB_GLOBAL, 0x10, STT_OBJECT), 0x4000, "data");  // not a function: left out
  Symbol undefined = sym(STB_GLOBAL, 0x10);
  undefined.section = SHN_UNDEF;
  index.add(undefined, 0x5000, "undefined");     // a reference: left out
  index.add(sym(STB_GLOBAL, 0x10), 0x6000, "");  // unnamed: left out
  index.finish();

  EXPECT_EQ(index.size(), 4u);
  EXPECT_EQ(index.find(0xfff), nullptr);
  EXPECT_STREQ(index.find(0x1000), "global_name");
  EXPECT_STREQ(index.find(0x103f), "global_name");
  EXPECT_EQ(index.find(0x1040), nullptr);  // past its end, before the next
  EXPECT_STREQ(index.find(0x2018), "nested");
  EXPECT_STREQ(index.find(0x2080), "outer");  // past the nested one, inside the outer one
  EXPECT_STREQ(index.find(0x3abc), "asm_no_size");
  EXPECT_STREQ(index.find(0x4008), "asm_no_size");
  EXPECT_STREQ(index.find(0x5008), "asm_no_size");
}

// A mapped file's symbols are the target's: a name past kMaxSymbolNameBytes
// is kept cut, and past kMaxIndexedSymbols the rest are counted, not kept.
TEST(ElfSymbols, AnIndexKeepsBoundedNamesAndCountsWhatItLeavesOut) {
  Symbol s;
  s.bind = STB_GLOBAL;
  s.size = 1;
  s.type = STT_FUNC;
  s.section = 1;
  SymbolIndex index;
  const std::string long_name(elf::kMaxSymbolNameBytes * 4, 'n');
  index.add(s, 0, long_name.c_str());
  for (uint64_t i = 1; i < elf::kMaxIndexedSymbols + 10; ++i) index.add(s, i, "f");
  EXPECT_EQ(index.size(), elf::kMaxIndexedSymbols);
  EXPECT_EQ(index.left_out(), 10u);
  EXPECT_LE(index.name_bytes(), elf::kMaxSymbolNameBytes + 1 + 2 * elf::kMaxIndexedSymbols);
  index.finish();
  ASSERT_NE(index.find(0), nullptr);
  EXPECT_EQ(std::string(index.find(0)), long_name.substr(0, elf::kMaxSymbolNameBytes));
  EXPECT_STREQ(index.find(elf::kMaxIndexedSymbols - 1), "f");
}

// A traced process controls what its paths hold: a FIFO must not block the
// open, and nothing but a regular ELF file is read.
TEST(ElfSymbols, WhatIsNotARegularElfFileIsRefused) {
  TempDir dir{"hangtrace-elf-test"};
  ASSERT_EQ(mkfifo(dir.file("fifo").c_str(), 0600), 0);
  std::ofstream(dir.file("text")) << "not an ELF file\n";

  auto started = std::chrono::steady_clock::now();
  auto fifo = ElfFile::open(dir.file("fifo"));
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
  ASSERT_FALSE(fifo.ok());
  EXPECT_EQ(fifo.error(), dir.file("fifo") + " is not a regular file");

  auto directory = ElfFile::open(dir.path.string());
  ASSERT_FALSE(directory.ok());
  EXPECT_EQ(directory.error(), dir.path.string() + " is not a regular file");

  auto text = ElfFile::open(dir.file("text"));
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.error(), dir.file("text") + " is not an ELF file");

  auto missing = ElfFile::open(dir.file("missing"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().rfind("failed to open " + dir.file("missing") + ": ", 0), 0u) << missing.error();
}

}  // namespace
}  // namespace hangtrace::testing
