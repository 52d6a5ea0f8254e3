// Python stacks of a running CPython process, read from the outside with
// process_vm_readv: the target is never stopped, signalled or ptraced.
//
// _PyRuntime is found through the ELF symbol tables of the python binary or
// libpython mapped in the process, else (a stripped or statically linked
// interpreter) its .PyRuntime section (3.12+), else by scanning the module's
// writable data for the _Py_DebugOffsets cookie (3.13+) or for a
// self-consistent interpreter list (3.8-3.12); from there the interpreter's thread states
// and their frame chains are walked with a per-version table of struct
// offsets. The memory changes under us, so every read is checked, every walk
// is bounded and a thread whose stack does not read back consistently gets
// ThreadInfo::python_stack_error instead of a stack.
//
// Versions (x86_64): CPython 3.8-3.12 with offsets measured with gdb on
// builds with debug info (3.11 on Debian's 3.11.2, the others on pyenv
// builds); 3.13, 3.14 and 3.15 (default and free-threaded builds) from the
// _Py_DebugOffsets table CPython keeps at the start of _PyRuntime for
// out-of-process tools. Other versions get a one-line error. From 3.14 the
// same reads give the asyncio tasks (python_asyncio.cpp) and the PyMutex a
// thread parks on (python_locks.cpp).
//
// Where each part lives: python_runtime.cpp finds _PyRuntime (on
// elf_symbols), python_offsets.cpp holds the per-version layouts,
// python_walker.cpp reads objects, code and frames, python_stacks.cpp walks
// the thread states. The line-table
// decoders are header-only so that unit tests, which link only
// hangtrace_core, can exercise them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hangtrace/model.h"
#include "hangtrace/procfs.h"
#include "hangtrace/result.h"

namespace hangtrace {

class MemoryReader;  // procmem.h
namespace python {
struct PyOffsets;  // python_offsets.h
}

namespace python_linetable {

// Reads a 6-bit-chunk varint (CPython's location table encoding). Returns
// false when the table ends mid-number.
inline bool read_varint(const uint8_t* data, size_t size, size_t& pos, uint64_t& value) {
  value = 0;
  for (unsigned shift = 0; shift < 64; shift += 6) {
    if (pos >= size) return false;
    uint8_t b = data[pos++];
    value |= static_cast<uint64_t>(b & 63) << shift;
    if (!(b & 64)) return true;
  }
  return false;
}

// A signed varint that is a line delta: a real one is far below 2^31, so a
// larger one is malformed (and line numbers summed over a bounded table of
// them cannot overflow).
inline bool read_svarint(const uint8_t* data, size_t size, size_t& pos, int64_t& value) {
  uint64_t u = 0;
  if (!read_varint(data, size, pos, u)) return false;
  if ((u >> 1) >= (uint64_t{1} << 31)) return false;
  value = (u & 1) ? -static_cast<int64_t>(u >> 1) : static_cast<int64_t>(u >> 1);
  return true;
}

// The source line of the instruction at `byte_offset` (bytes from the start
// of the code, i.e. code units * 2) in a CPython 3.11/3.12 location table
// (co_linetable, Objects/locations.md). A negative offset (a frame that has
// not started) is the first line. Returns 0 when the instruction has no line
// or the table is truncated or malformed.
inline int line_for_offset(const uint8_t* table, size_t size, int first_line, int64_t byte_offset) {
  if (byte_offset < 0) return first_line;
  int64_t line = first_line;
  int64_t start = 0;
  size_t pos = 0;
  while (pos < size) {
    uint8_t first = table[pos++];
    if (!(first & 0x80)) return 0;  // not at an entry start: malformed
    int code = (first >> 3) & 15;
    int64_t end = start + (static_cast<int64_t>(first & 7) + 1) * 2;
    bool has_line = true;
    if (code == 15) {
      has_line = false;       // no location
    } else if (code == 14) {  // long form: line delta, end line, columns
      int64_t delta = 0;
      uint64_t skip = 0;
      if (!read_svarint(table, size, pos, delta)) return 0;
      line += delta;
      for (int i = 0; i < 3; ++i)
        if (!read_varint(table, size, pos, skip)) return 0;
    } else if (code == 13) {  // no column info
      int64_t delta = 0;
      if (!read_svarint(table, size, pos, delta)) return 0;
      line += delta;
    } else if (code >= 10) {  // one-line form: two column bytes
      line += code - 10;
      pos += 2;
    } else {  // short form: one column byte
      pos += 1;
    }
    if (pos > size) return 0;
    if (byte_offset >= start && byte_offset < end) {
      if (!has_line || line <= 0 || line > (1 << 30)) return 0;
      return static_cast<int>(line);
    }
    start = end;
  }
  return 0;
}

inline int line_for_offset(const std::vector<uint8_t>& table, int first_line, int64_t byte_offset) {
  return line_for_offset(table.data(), table.size(), first_line, byte_offset);
}

// The source line of the instruction at `byte_offset` in a CPython 3.8/3.9
// co_lnotab: (bytecode delta, signed line delta) byte pairs, each pair
// starting a new line at the accumulated offset (PyCode_Addr2Line). A
// negative offset (f_lasti -1: not started) is the first line.
inline int lnotab_line(const uint8_t* table, size_t size, int first_line, int64_t byte_offset) {
  int64_t line = first_line;
  int64_t addr = 0;
  for (size_t pos = 0; pos + 1 < size; pos += 2) {
    addr += table[pos];
    if (addr > byte_offset) break;
    line += static_cast<int8_t>(table[pos + 1]);
  }
  if (line <= 0 || line > (1 << 30)) return 0;
  return static_cast<int>(line);
}

// The source line of the instruction at `byte_offset` (f_lasti * 2: 3.10
// counts code units) in a CPython 3.10 co_linetable: (unsigned bytecode
// length, signed line delta) byte pairs, each covering the next `length`
// bytes; a delta of -128 means "no line" and leaves the running line as it
// is. Zero-length entries only move the line. Returns 0 when the instruction
// has no line or lies past the table.
inline int linetable310_line(const uint8_t* table, size_t size, int first_line, int64_t byte_offset) {
  if (byte_offset < 0) return first_line;
  int64_t line = first_line;
  int64_t start = 0;
  for (size_t pos = 0; pos + 1 < size; pos += 2) {
    int64_t end = start + table[pos];
    int8_t delta = static_cast<int8_t>(table[pos + 1]);
    bool has_line = delta != -128;
    if (has_line) line += delta;
    if (byte_offset >= start && byte_offset < end) {
      if (!has_line || line <= 0 || line > (1 << 30)) return 0;
      return static_cast<int>(line);
    }
    start = end;
  }
  return 0;
}

}  // namespace python_linetable

// Fills python_stack / python_stack_error / holds_gil of the threads of `p`.
// `pid` is the process (or a live thread of it) whose /proc files (through
// `fs`) and memory are read. Returns a one-line description
// of a whole-process failure ("" when the stacks were read).
// `use_symbols` false: find _PyRuntime without the ELF symbol tables or
// the .PyRuntime section, by scanning the interpreter's data, as for a
// stripped or statically linked interpreter (tests use it to exercise that
// path on ordinary ones). `maps`: the process's mappings when the caller has
// read them already (a PyTorch process has ~2,000), else they are read here.
std::string collect_python_stacks(ProcessInfo& p, const procfs::ProcFs& fs, int pid, bool use_symbols = true,
                                  const std::vector<Mapping>* maps = nullptr);

// The walk itself, once the layout `o` and _PyRuntime's address are known:
// the interpreters, their thread states and GILs, and each thread state's
// frames, read through `mem` (the process, or a memory image: tests/fuzz
// feeds it fuzzed ones). Fills `p` and returns as collect_python_stacks.
// `asyncio_debug`: the address of the _asyncio module's debug offsets (3.14+,
// 0: none), for the process's asyncio tasks.
std::string walk_python_threads(ProcessInfo& p, const MemoryReader& mem, const python::PyOffsets& o,
                                uint64_t runtime_addr, uint64_t asyncio_debug = 0);

// One process's Python stacks one thread at a time, for the on-CPU sampler
// (cpu_sampler.h): _PyRuntime and the layout are found once, each thread's
// PyThreadState is kept between calls and checked against the thread before
// use, the code objects' names and line tables are cached. A thread not in
// the kept list sends the walk back to the interpreters' thread lists at most
// every kRescanNs (threads that run no Python -- a BLAS pool, OpenMP -- have
// none and are answered from the last scan). The reads are those of
// collect_python_stacks: bounded, every pointer checked.
class PythonThreadStacks {
 public:
  static constexpr uint64_t kRescanNs = 1'000'000'000;
  // An error when `pid` runs no supported CPython.
  static Result<std::unique_ptr<PythonThreadStacks>> open(const procfs::ProcFs& fs, int pid,
                                                          const std::vector<Mapping>* maps = nullptr);
  ~PythonThreadStacks();
  PythonThreadStacks(const PythonThreadStacks&) = delete;
  PythonThreadStacks& operator=(const PythonThreadStacks&) = delete;
  // Thread `tid`'s Python frames, innermost first (empty: it runs no Python
  // code right now); an error when it has no thread state or the walk failed.
  // `now_ns`: a monotonic clock, for the rescan interval.
  Result<std::vector<UserFrame>> stack(int tid, uint64_t now_ns);

 private:
  PythonThreadStacks();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hangtrace
