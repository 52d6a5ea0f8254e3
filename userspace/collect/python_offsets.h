// Where CPython keeps what a Python stack walk reads, per version: the
// struct offsets of _PyRuntime, interpreter and thread states, frames, code
// and string objects. 3.8-3.12 from tables measured with gdb; 3.13 on from the
// _Py_DebugOffsets table the interpreter writes at the start of _PyRuntime
// (its layout chosen by the version it records: 3.13, 3.14, 3.15.0b4+).
// Used by python_runtime (finding _PyRuntime) and python_stacks (the walk).
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
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
// Where a type with Py_TPFLAGS_MANAGED_DICT keeps its instances' attributes
// (python_objects.cpp has the layouts).
enum class ManagedDict { None, Pointers311, Tagged312, Inline313 };

// Where the fields the walk needs live, for one CPython minor version on
// x86_64 (LP64). For the fields only some versions have (the GIL ones, the
// thread ids, tstate_frame/tstate_cframe, frame_lasti, frame_is_entry) 0
// means "this version has no such field"; the others are used as they are,
// 0 included.
struct PyOffsets {
  int major = 3, minor = 0;
  uint64_t version_hex = 0;    // PY_VERSION_HEX, where the table records it (3.13+)
  bool free_threaded = false;  // built without the GIL (3.13t+)
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
  // Free-threaded builds: _gil.enabled (an int; offset 0 is its place, the
  // struct's first field) says whether the GIL is on at all.
  bool gil_switchable = false;
  uint64_t gil_enabled = 0;
  // PyThreadState
  uint64_t tstate_next = 0;
  uint64_t tstate_native_thread_id = 0;  // 3.11+
  // pthread_t: how versions without native_thread_id name the thread, and
  // what an RLock records as its owner (3.13+ from the table)
  uint64_t tstate_thread_id = 0;
  uint64_t tstate_frame = 0;          // 3.8-3.10 frame, 3.13+ current_frame
  uint64_t tstate_cframe = 0;         // 3.11/3.12: tstate->cframe
  uint64_t cframe_current_frame = 0;  // _PyCFrame.current_frame
  uint64_t tstate_holds_gil = 0;      // 3.15: PyThreadState.holds_gil (int)
  uint64_t tstate_read_size = 0;
  // PyFrameObject (3.8-3.10) or _PyInterpreterFrame (3.11+)
  uint64_t frame_code = 0;        // f_code; 3.13+ f_executable
  uint64_t frame_previous = 0;    // previous; f_back for frame objects
  uint64_t frame_prev_instr = 0;  // 3.11/3.12 prev_instr, 3.13+ instr_ptr
  uint64_t frame_lasti = 0;       // frame objects: f_lasti (int)
  uint64_t frame_is_entry = 0;    // 3.11: is_entry
  uint64_t frame_owner = 0;
  // The owners from which on a frame is no Python function's but the eval
  // loop's own (3.12/3.13 FRAME_OWNED_BY_CSTACK, the shim of a C call into
  // Python; 3.14+ FRAME_OWNED_BY_INTERPRETER, the per-call entry frame, and
  // the never-set FRAME_OWNED_BY_CSTACK after it); -1 when none.
  int owner_entry = -1;
  uint64_t frame_tlbc_index = 0;  // 3.14t: int32 index of the thread-local bytecode copy (0: none)
  uint64_t frame_read_size = 0;
  // 3.14+: f_executable (and every object reference on a frame) is a
  // _PyStackRef: a pointer with tag bits in its low two bits.
  bool stack_refs = false;
  // PyCodeObject
  uint64_t code_filename = 0;
  uint64_t code_name = 0;  // co_qualname from 3.11, co_name before
  uint64_t code_firstlineno = 0;
  uint64_t code_linetable = 0;  // co_lnotab in 3.8/3.9
  uint64_t code_adaptive = 0;   // co_code_adaptive: the instructions, inline (3.11+)
  uint64_t code_tlbc = 0;       // 3.14t: co_tlbc, the _PyCodeArray of per-thread copies (0: none)
  uint64_t code_read_size = 0;
  // Objects
  uint64_t object_type = 8;            // ob_type
  uint64_t type_name = 24;             // PyTypeObject.tp_name
  uint64_t unicode_length = 16;        // PyASCIIObject.length
  uint64_t unicode_state = 32;         // PyASCIIObject.state
  uint64_t unicode_ascii_data = 48;    // sizeof(PyASCIIObject)
  uint64_t unicode_compact_data = 72;  // sizeof(PyCompactUnicodeObject)
  // PyASCIIObject.state bit fields: interned:2 then kind:3, compact, ascii;
  // 3.14t widens interned to a byte (atomic access), moving the others.
  int unicode_kind_shift = 2, unicode_compact_shift = 5, unicode_ascii_shift = 6;
  uint64_t bytes_size = 16;   // ob_size
  uint64_t bytes_data = 32;   // ob_sval
  uint64_t object_size = 16;  // sizeof(PyObject): what an object's own fields follow
  // 3.14+ (0: not in the table): what the asyncio task graph is read with.
  uint64_t frame_stackpointer = 0;     // _PyInterpreterFrame.stackpointer
  uint64_t frame_localsplus = 0;       // localsplus: locals, cells, then the value stack up to stackpointer
  uint64_t gen_iframe = 0;             // PyGenObject.gi_iframe: the coroutine's frame, embedded
  uint64_t gen_frame_state = 0;        // int8 gi_frame_state
  int frame_suspended_yield_from = 0;  // the gi_frame_state of a coroutine suspended in an await
  uint64_t set_used = 0, set_table = 0, set_mask = 0;
  uint64_t long_tag = 0, long_digit = 0;  // PyLongObject lv_tag, ob_digit (30-bit digits)
  bool long_tag_is_size = false;          // 3.11: long_tag is ob_size, the signed digit count
  uint64_t llist_next = 0;                // struct llist_node.next
  // 3.11-3.13 (0: not known): what the asyncio task registries are read
  // with where the _asyncio module publishes no table
  // (python_objects.cpp, python_asyncio_registry.cpp).
  uint64_t interp_modules = 0;  // sys.modules: interp->modules (3.11), interp->imports.modules (3.12+)
  uint64_t frame_stacktop = 0;  // int: the value stack's top as an index into localsplus
  // The opcode a suspended generator resumes at: RESUME with an oparg of 2
  // or more says it is suspended in an await / yield from (3.11, 3.12: what
  // _PyGen_yf checks; 3.13 has FRAME_SUSPENDED_YIELD_FROM). 0: not checked.
  uint8_t resume_opcode = 0, instrumented_resume_opcode = 0;
  uint64_t var_size = 16;        // PyVarObject.ob_size
  uint64_t sequence_items = 24;  // PyListObject.ob_item (a pointer), PyTupleObject.ob_item (inline)
  uint64_t weakref_object = 16;  // PyWeakReference.wr_object
  uint64_t module_dict = 16;     // PyModuleObject.md_dict
  uint64_t method_self = 24;     // PyMethodObject.im_self (a bound method's object)
  uint64_t dict_keys = 32, dict_values = 40;
  uint64_t dict_values_items = 0;  // PyDictValues.values (3.13: after a 4-byte header)
  uint64_t type_basicsize = 32, type_flags = 168, type_base = 256, type_dictoffset = 288;
  uint64_t heap_type_cached_keys = 0;  // PyHeapTypeObject.ht_cached_keys
  ManagedDict managed_dict = ManagedDict::None;
};

// The measured table of CPython major.minor (3.8 to 3.12), or none.
std::optional<PyOffsets> offsets_for(int major, int minor);

// 3.13+: the offsets from the _Py_DebugOffsets at `runtime` in process `pid`,
// its layout chosen by the version it records and checked for consistency;
// an error for a version whose layout is not known.
Result<PyOffsets> offsets_from_debug(const MemoryReader& mem, uint64_t runtime, int major, int minor);

// "3.14.0b1" for a PY_VERSION_HEX.
std::string version_name(uint64_t version_hex);

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

// The object a _PyStackRef (3.14+) refers to: the tag bits cleared; 0 for
// NULL (tagged as 1), a tagged small int (low bits 3) and the 3.15 error
// marker (2). Objects are at least 8-byte aligned, so clearing two bits of a
// plain pointer (3.13 and older) changes nothing.
inline uint64_t stack_ref_object(uint64_t bits) {
  if ((bits & 3) == 3 || (bits & 3) == 2) return 0;
  return bits & ~uint64_t{3};
}

}  // namespace hangtrace::python
