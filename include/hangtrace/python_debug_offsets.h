// CPython's _Py_DebugOffsets as 3.13 lays it out: the table at the head of
// _PyRuntime that out-of-process tools read offsets from. One definition for
// the reader (userspace/collect/python_offsets.cpp) and for the fake
// interpreter the hostile-target test lays out with it
// (tests/integration/repro/repro_fake_cpython.cpp).
#pragma once

#include <cstdint>

namespace hangtrace {

// The head of _PyRuntime from 3.13 on: the offsets out-of-process tools need,
// written by the interpreter itself. This is the 3.13 layout (gdb: `ptype /o
// struct _Py_DebugOffsets` on 3.13.0); later versions insert fields, so the
// table is used only when its `version` says 3.13.
struct DebugOffsets313 {
  char cookie[8];
  uint64_t version;
  uint64_t free_threaded;
  struct {
    uint64_t size, finalizing, interpreters_head;
  } runtime_state;
  struct {
    uint64_t size, id, next, threads_head, gc, imports_modules, sysdict, builtins, ceval_gil,
        gil_runtime_state, gil_runtime_state_enabled, gil_runtime_state_locked, gil_runtime_state_holder;
  } interpreter_state;
  struct {
    uint64_t size, prev, next, interp, current_frame, thread_id, native_thread_id, datastack_chunk, status;
  } thread_state;
  struct {
    uint64_t size, previous, executable, instr_ptr, localsplus, owner;
  } interpreter_frame;
  struct {
    uint64_t size, filename, name, qualname, linetable, firstlineno, argcount, localsplusnames,
        localspluskinds, co_code_adaptive;
  } code_object;
  struct {
    uint64_t size, ob_type;
  } pyobject;
  struct {
    uint64_t size, tp_name, tp_repr, tp_flags;
  } type_object;
  uint64_t tuple_list_dict_float_long[14];
  struct {
    uint64_t size, ob_size, ob_sval;
  } bytes_object;
  struct {
    uint64_t size, state, length, asciiobject_size;
  } unicode_object;
  struct {
    uint64_t size, collecting;
  } gc;
};
static_assert(sizeof(DebugOffsets313) == 584);

}  // namespace hangtrace
