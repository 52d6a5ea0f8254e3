// Naming native frames: the function that holds an address of a module,
// from the module's symbols (its separate debug file's .symtab when
// installed, else its own tables), each module's sorted once into an
// elf::SymbolIndex per build-id, and names cached by (build-id, offset in
// module). Serves NativeStackCache: unwound frames (a Dwfl module of a live
// process) and frames known only by file and file offset (live tracing).
#pragma once

#include <elfutils/libdwfl.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "elf_symbols.h"
#include "hangtrace/model.h"
#include "native_stacks.h"

namespace hangtrace {

class NativeSymbolizer {
 public:
  // The (demangled) function holding `lookup`, an address in `mod` whose
  // load bias is `bias`; "" when no symbol covers it.
  std::string name_in_module(Dwfl_Module* mod, Dwarf_Addr bias, const std::string& build_id,
                             Dwarf_Addr lookup, NativeStackStats& stats);
  // A native frame known by `file` and file offset (`module_offset`): the
  // offset becomes the ELF virtual address, and the frame gets the build-id
  // and the function. `innermost`: the current instruction, not a return
  // address. Frames of a file without a build-id stay unnamed.
  void name_file_frame(UserFrame& f, bool innermost, NativeStackStats& stats);

 private:
  struct SymbolKey {
    std::string build_id;
    uint64_t offset;
    bool operator==(const SymbolKey&) const = default;
  };
  struct SymbolKeyHash {
    size_t operator()(const SymbolKey& k) const;
  };
  // Per module file: its build-id and how file offsets map to ELF virtual
  // addresses (the executable PT_LOAD segments), read once.
  struct FileMeta {
    bool ok = false;
    std::string build_id;
    std::vector<std::array<uint64_t, 3>> segments;  // {p_offset, p_filesz, p_vaddr}
  };
  const FileMeta& file_meta(const std::string& path);
  const elf::SymbolIndex& index_for(const std::string& build_id,
                                    const std::function<std::shared_ptr<elf::SymbolIndex>()>& build);
  std::string cached_name(const SymbolKey& key, NativeStackStats& stats, bool& hit);
  void remember(SymbolKey key, const std::string& function);

  std::unordered_map<SymbolKey, std::string, SymbolKeyHash> symbols_;
  std::unordered_map<std::string, std::shared_ptr<elf::SymbolIndex>> indexes_;  // by build-id
  std::unordered_map<std::string, FileMeta> files_;                             // by path
};

}  // namespace hangtrace
