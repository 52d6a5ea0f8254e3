// Python stacks of a running CPython process, read from the outside with
// process_vm_readv: the target is never stopped, signalled or ptraced.
//
// _PyRuntime is found through the ELF symbol tables of the python binary or
// libpython mapped in the process; from there the interpreter's thread states
// and their frame chains are walked with a per-version table of struct
// offsets. The memory changes under us, so every read is checked, every walk
// is bounded and a thread whose stack does not read back consistently gets
// ThreadInfo::python_stack_error instead of a stack.
//
// Versions: CPython 3.11 (offsets measured on Debian's 3.11.2 x86_64 with its
// debug info). Others are reported as unsupported, with the version read from
// the binary (Py_Version) or its file name.
//
// The line-table decoder is header-only so that unit tests, which link only
// hangtrace_core, can exercise it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "hangtrace/model.h"

namespace hangtrace {

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

inline bool read_svarint(const uint8_t* data, size_t size, size_t& pos, int64_t& value) {
  uint64_t u = 0;
  if (!read_varint(data, size, pos, u)) return false;
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

}  // namespace python_linetable

// Fills python_stack / python_stack_error / holds_gil of the threads of `p`.
// `mem_pid` is the process (or a live thread of it) to read memory from and
// `proc_dir` its /proc directory (ROOT/PID). Returns a one-line description
// of a whole-process failure ("" when the stacks were read).
std::string collect_python_stacks(ProcessInfo& p, int mem_pid, const std::string& proc_dir);

}  // namespace hangtrace
