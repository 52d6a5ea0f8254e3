// Finding _PyRuntime in a CPython process: through the ELF symbol tables of
// the python binary or libpython it maps, else (a stripped or statically
// linked interpreter) the .PyRuntime section (3.12+), else by scanning the
// module's writable data for the _Py_DebugOffsets cookie (3.13+) or for a
// self-consistent interpreter list (3.8-3.12).
#pragma once

#include <cstdint>
#include <string>

#include "hangtrace/result.h"

namespace hangtrace::python {

struct RuntimeLocation {
  uint64_t runtime = 0;  // relocated address of _PyRuntime
  int major = 0, minor = 0, micro = 0;
  std::string binary;
};

// `proc_dir`: the process's /proc directory (ROOT/PID); `mem_pid` the id to
// read memory from. `use_symbols` false: as for a stripped interpreter.
Result<RuntimeLocation> find_runtime(int mem_pid, const std::string& proc_dir, bool use_symbols);

}  // namespace hangtrace::python
