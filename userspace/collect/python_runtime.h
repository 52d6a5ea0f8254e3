// Finding _PyRuntime in a CPython process: through the ELF symbol tables of
// the python binary or libpython it maps, else (a stripped or statically
// linked interpreter) the .PyRuntime section (3.12+), else by scanning the
// module's writable data for the _Py_DebugOffsets cookie (3.13+) or for a
// self-consistent interpreter list (3.8-3.12).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hangtrace/procfs.h"
#include "hangtrace/result.h"

namespace hangtrace::python {

struct RuntimeLocation {
  uint64_t runtime = 0;  // relocated address of _PyRuntime
  int major = 0, minor = 0, micro = 0;
  std::string binary;
};

// `pid`: the process (or a live thread of it) whose maps, files and memory
// are read through `fs`. `use_symbols` false: as for a stripped interpreter.
// `known_maps`: its mappings if the caller read them already, else read here.
Result<RuntimeLocation> find_runtime(const procfs::ProcFs& fs, int pid, bool use_symbols,
                                     const std::vector<Mapping>* known_maps = nullptr);

// The relocated address of the _asyncio module's debug offsets (the
// .AsyncioDebug section, 3.14+) in `pid`: in the _asyncio extension it maps,
// or in the python binary or libpython it is built into. An error when none
// is mapped (asyncio not imported: no tasks).
Result<uint64_t> find_asyncio_debug(const procfs::ProcFs& fs, int pid, const std::vector<Mapping>& maps);

}  // namespace hangtrace::python
