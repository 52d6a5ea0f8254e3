// Reading one CPython process's objects from outside: bounded, checked
// reads of pointers, strings, code objects and frames, with the code objects
// and type names it has decoded cached. python_stacks walks thread states
// with it, python_asyncio tasks, python_locks the locks threads park on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "hangtrace/model.h"
#include "hangtrace/result.h"
#include "python_offsets.h"

namespace hangtrace {

class MemoryReader;  // procmem.h

namespace python {

constexpr size_t kMaxFrames = 256;
constexpr size_t kMaxStringChars = 1024;
constexpr size_t kMaxLineTableBytes = 1 << 20;
// Frames stepped through in one stack, shim and entry frames included (a
// real stack has at most one such frame per Python frame).
constexpr size_t kMaxFrameHops = 4 * kMaxFrames;
// The decoded code objects a walker keeps, by their names' and line tables'
// bytes: many code objects of a target may share one 1 MiB line table, each
// decoded copy is ours.
constexpr size_t kMaxCodeCacheBytes = size_t{64} << 20;

// A code object as a frame shows it.
struct CodeInfo {
  bool ok = false;
  std::string error;
  std::string function, file;
  int first_line = 0;
  std::vector<uint8_t> linetable;
};
class Walker {
 public:
  Walker(const MemoryReader& mem, const PyOffsets& o) : mem_(mem), o_(o) {}

  Result<std::vector<uint8_t>> read(uint64_t addr, size_t n, const char* what);

  Result<uint64_t> read_ptr(uint64_t addr, const char* what);

  // tp_name of an object's type, cached by type address.
  std::string type_name(uint64_t object);

  // A str object as UTF-8 (compact strings only, which code objects' names are).
  Result<std::string> read_unicode(uint64_t addr, const char* what);

  const CodeInfo& code(uint64_t addr);

  CodeInfo decode_code(uint64_t addr);

  int line(const CodeInfo& c, int64_t byte_offset) const;

  // Where the instructions a frame of `code` runs start: the code's own
  // (co_code_adaptive), or on 3.14t the thread-local copy the frame's
  // tlbc_index names in co_tlbc, a _PyCodeArray {Py_ssize_t size; char
  // *entries[size]} whose entry 0 is the code's own. An index or array that
  // does not read back sends the line to the code's own copy (a wrong line,
  // never a wild read).
  uint64_t bytecode_of(uint64_t code_addr, const std::vector<uint8_t>& frame);

  // One _PyInterpreterFrame (3.11+) or frame object as read (frame_read_size
  // bytes): its function, file and line.
  Result<UserFrame> frame_of(const std::vector<uint8_t>& frame);

  // An object's reference count (-1: unreadable or implausible).
  int64_t refcount(uint64_t object);

  const PyOffsets& offsets() const { return o_; }
  const MemoryReader& memory() const { return mem_; }

  // The frames of one thread state, innermost first.
  //
  // python_entry: which frames a C-level _PyEval_EvalFrameDefault call began.
  // 3.8-3.10 run every frame in its own eval-loop call. 3.11 flags them
  // (is_entry). 3.12+ instead push a shim frame (FRAME_OWNED_BY_CSTACK; 3.14+
  // an entry frame, FRAME_OWNED_BY_INTERPRETER) below the frame the eval loop
  // was called with (the entry frame's `previous` is the shim, the shim's
  // `previous` the caller's frame), so the entry frame is the Python frame
  // just inner to each shim.
  Result<std::vector<UserFrame>> stack(const std::vector<uint8_t>& tstate);

 private:
  // Argument `position` of the frame at `frame` (a function's parameters are
  // its first locals) when it is a non-negative int; nullopt otherwise.
  std::optional<int64_t> int_argument(uint64_t frame, int position);

  const MemoryReader& mem_;
  const PyOffsets& o_;
  std::unordered_map<uint64_t, CodeInfo> codes_;
  size_t codes_bytes_ = 0;  // what codes_ holds, against kMaxCodeCacheBytes
  CodeInfo failed_;
  std::unordered_map<uint64_t, std::string> type_names_;
};

}  // namespace python
}  // namespace hangtrace
