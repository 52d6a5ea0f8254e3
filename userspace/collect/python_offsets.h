// Where CPython keeps what a Python stack walk reads, per version: the
// struct offsets of _PyRuntime, interpreter and thread states, frames, code
// and string objects. 3.8-3.12 from tables measured with gdb; 3.13 from the
// _Py_DebugOffsets table the interpreter writes at the start of _PyRuntime.
// Used by python_runtime (finding _PyRuntime) and python_stacks (the walk).
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "hangtrace/result.h"

namespace hangtrace {
class MemoryReader;  // procmem.h
}

namespace hangtrace::python {

// How a version lays out its frames and encodes line numbers.
enum class FrameLayout {
  FrameObjects,       // 3.8-3.10: PyThreadState.frame -> PyFrameObject.f_back chain
  InterpreterFrames,  // 3.11+: _PyInterpreterFrame.previous chain
};
enum class LineTable { Lnotab, Linetable310, Locations };

// Where the fields the walk needs live, for one CPython minor version on
// x86_64 (LP64). For the fields only some versions have (the GIL ones, the
// thread ids, tstate_frame/tstate_cframe, frame_lasti, frame_is_entry) 0
// means "this version has no such field"; the others are used as they are,
// 0 included.
struct PyOffsets {
  int major = 3, minor = 0;
  FrameLayout layout = FrameLayout::InterpreterFrames;
  LineTable line_table = LineTable::Locations;
  int lasti_unit = 1;  // bytes per f_lasti step (FrameObjects): 1 before 3.10, 2 in 3.10
  // _PyRuntime
  uint64_t runtime_interpreters_head = 0;
  uint64_t runtime_gil_last_holder = 0;  // _PyRuntime.ceval.gil.last_holder (< 3.12)
  uint64_t runtime_gil_locked = 0;       // _PyRuntime.ceval.gil.locked (< 3.12)
  // PyInterpreterState
  uint64_t interp_next = 0;
  uint64_t interp_threads_head = 0;
  uint64_t interp_gil = 0;  // 3.12+: interp->ceval.gil, a struct _gil_runtime_state*
  // struct _gil_runtime_state, for interp_gil
  uint64_t gil_last_holder = 0;
  uint64_t gil_locked = 0;
  // PyThreadState
  uint64_t tstate_next = 0;
  uint64_t tstate_native_thread_id = 0;  // 3.11+
  uint64_t tstate_thread_id = 0;         // pthread_t, for versions without native_thread_id
  uint64_t tstate_frame = 0;             // 3.8-3.10 frame, 3.13+ current_frame
  uint64_t tstate_cframe = 0;            // 3.11/3.12: tstate->cframe
  uint64_t cframe_current_frame = 0;     // _PyCFrame.current_frame
  uint64_t tstate_read_size = 0;
  // PyFrameObject (3.8-3.10) or _PyInterpreterFrame (3.11+)
  uint64_t frame_code = 0;        // f_code; 3.13+ f_executable
  uint64_t frame_previous = 0;    // previous; f_back for frame objects
  uint64_t frame_prev_instr = 0;  // 3.11/3.12 prev_instr, 3.13+ instr_ptr
  uint64_t frame_lasti = 0;       // frame objects: f_lasti (int)
  uint64_t frame_is_entry = 0;    // 3.11: is_entry
  uint64_t frame_owner = 0;
  int owner_cstack = -1;  // FRAME_OWNED_BY_CSTACK (3.12+), -1 when none
  uint64_t frame_read_size = 0;
  // PyCodeObject
  uint64_t code_filename = 0;
  uint64_t code_name = 0;  // co_qualname from 3.11, co_name before
  uint64_t code_firstlineno = 0;
  uint64_t code_linetable = 0;  // co_lnotab in 3.8/3.9
  uint64_t code_adaptive = 0;   // co_code_adaptive: the instructions, inline (3.11+)
  uint64_t code_read_size = 0;
  // Objects
  uint64_t object_type = 8;            // ob_type
  uint64_t type_name = 24;             // PyTypeObject.tp_name
  uint64_t unicode_length = 16;        // PyASCIIObject.length
  uint64_t unicode_state = 32;         // PyASCIIObject.state
  uint64_t unicode_ascii_data = 48;    // sizeof(PyASCIIObject)
  uint64_t unicode_compact_data = 72;  // sizeof(PyCompactUnicodeObject)
  uint64_t bytes_size = 16;            // ob_size
  uint64_t bytes_data = 32;            // ob_sval
};

// The measured table of CPython major.minor (3.8 to 3.12), or none.
std::optional<PyOffsets> offsets_for(int major, int minor);

// 3.13: the offsets from the _Py_DebugOffsets at `runtime` in process `pid`,
// checked for consistency; an error for any other version or layout.
Result<PyOffsets> offsets_from_debug(const MemoryReader& mem, uint64_t runtime, int major, int minor);

// Little-endian fields of bytes read from the target: 0 past the end.
inline uint64_t load_u64(const std::vector<uint8_t>& b, uint64_t off) {
  uint64_t v = 0;
  if (off + 8 <= b.size()) std::memcpy(&v, b.data() + off, 8);
  return v;
}

inline uint32_t load_u32(const std::vector<uint8_t>& b, uint64_t off) {
  uint32_t v = 0;
  if (off + 4 <= b.size()) std::memcpy(&v, b.data() + off, 4);
  return v;
}

// A user-space pointer that could be an object: non-null, canonical, aligned.
inline bool plausible_pointer(uint64_t p) { return p >= 4096 && p < (uint64_t{1} << 47) && p % 8 == 0; }

}  // namespace hangtrace::python
