// CPython's _Py_DebugOffsets: the table at the head of _PyRuntime that
// out-of-process tools read offsets from, as each version lays it out. One
// definition for the reader (userspace/collect/python_offsets.cpp) and for
// the fake interpreter the hostile-target test lays out with it
// (tests/integration/repro/repro_fake_cpython.cpp).
//
// The table describes itself only by `version`: its groups carry the size of
// the C struct they describe, not their own, so a reader cannot skip a group
// it does not know and must pick the layout from the version. Every field is
// a uint64_t byte offset (or a size), whatever the target's pointer size.
#pragma once

#include <cstdint>

namespace hangtrace {

namespace debug_offsets {

struct RuntimeState {
  uint64_t size, finalizing, interpreters_head;
};
struct InterpreterState313 {
  uint64_t size, id, next, threads_head, gc, imports_modules, sysdict, builtins, ceval_gil, gil_runtime_state,
      gil_runtime_state_enabled, gil_runtime_state_locked, gil_runtime_state_holder;
};
// 3.14 adds threads_main after threads_head and two generation counters.
struct InterpreterState314 {
  uint64_t size, id, next, threads_head, threads_main, gc, imports_modules, sysdict, builtins, ceval_gil,
      gil_runtime_state, gil_runtime_state_enabled, gil_runtime_state_locked, gil_runtime_state_holder,
      code_object_generation, tlbc_generation;
};
struct ThreadState313 {
  uint64_t size, prev, next, interp, current_frame, thread_id, native_thread_id, datastack_chunk, status;
};
// 3.15.0b4 on: the sampling profiler's fields before thread_id, the GIL
// state and the exception after status.
struct ThreadState315 {
  uint64_t size, prev, next, interp, current_frame, base_frame, last_profiled_frame, last_profiled_frame_seq,
      thread_id, native_thread_id, datastack_chunk, status, holds_gil, gil_requested, current_exception,
      exc_state;
};
struct InterpreterFrame313 {
  uint64_t size, previous, executable, instr_ptr, localsplus, owner;
};
struct InterpreterFrame314 {
  uint64_t size, previous, executable, instr_ptr, localsplus, owner, stackpointer, tlbc_index;
};
struct CodeObject313 {
  uint64_t size, filename, name, qualname, linetable, firstlineno, argcount, localsplusnames, localspluskinds,
      co_code_adaptive;
};
struct CodeObject314 {
  uint64_t size, filename, name, qualname, linetable, firstlineno, argcount, localsplusnames, localspluskinds,
      co_code_adaptive, co_tlbc;
};
struct PyObject {
  uint64_t size, ob_type;
};
struct TypeObject313 {
  uint64_t size, tp_name, tp_repr, tp_flags;
};
struct TypeObject315 {
  uint64_t size, tp_name, tp_repr, tp_flags, tp_basicsize, tp_dictoffset;
};
struct HeapTypeObject {
  uint64_t size, ht_cached_keys;
};
struct SequenceObject {  // tuple, list
  uint64_t size, ob_item, ob_size;
};
struct SetObject {
  uint64_t size, used, table, mask;
};
struct DictObject {
  uint64_t size, ma_keys, ma_values;
};
struct FloatObject {
  uint64_t size, ob_fval;
};
struct LongObject {
  uint64_t size, lv_tag, ob_digit;
};
struct BytesObject {
  uint64_t size, ob_size, ob_sval;
};
struct UnicodeObject313 {
  uint64_t size, state, length, asciiobject_size;
};
struct UnicodeObject315 {
  uint64_t size, state, length, asciiobject_size, compactunicodeobject_size;
};
struct Gc313 {
  uint64_t size, collecting;
};
struct Gc315 {
  uint64_t size, collecting, frame, generation_stats_size, generation_stats;
};
struct GenObject {
  uint64_t size, gi_name, gi_iframe, gi_frame_state;
};
struct LlistNode {
  uint64_t next, prev;
};
struct DebuggerSupport {
  uint64_t eval_breaker, remote_debugger_support, remote_debugging_enabled, debugger_pending_call,
      debugger_script_path, debugger_script_path_size;  // the last a size: _Py_MAX_SCRIPT_PATH_SIZE, 512
};
struct ErrStackItem {
  uint64_t exc_value;
};

}  // namespace debug_offsets

// 3.13.0rc2 on (gdb: `ptype /o struct _Py_DebugOffsets` on 3.13.0).
struct DebugOffsets313 {
  char cookie[8];          // "xdebugpy", not NUL-terminated
  uint64_t version;        // PY_VERSION_HEX of the interpreter that wrote it
  uint64_t free_threaded;  // 1: built without the GIL (Py_GIL_DISABLED)
  debug_offsets::RuntimeState runtime_state;
  debug_offsets::InterpreterState313 interpreter_state;
  debug_offsets::ThreadState313 thread_state;
  debug_offsets::InterpreterFrame313 interpreter_frame;
  debug_offsets::CodeObject313 code_object;
  debug_offsets::PyObject pyobject;
  debug_offsets::TypeObject313 type_object;
  debug_offsets::SequenceObject tuple_object, list_object;
  debug_offsets::DictObject dict_object;
  debug_offsets::FloatObject float_object;
  debug_offsets::LongObject long_object;
  debug_offsets::BytesObject bytes_object;
  debug_offsets::UnicodeObject313 unicode_object;
  debug_offsets::Gc313 gc;
};
static_assert(sizeof(DebugOffsets313) == 584);

// 3.14 (Include/internal/pycore_debug_offsets.h of 3.14.7; the same from
// 3.14.0b2, the alphas differ).
struct DebugOffsets314 {
  char cookie[8];          // "xdebugpy", not NUL-terminated
  uint64_t version;        // PY_VERSION_HEX of the interpreter that wrote it
  uint64_t free_threaded;  // 1: built without the GIL (Py_GIL_DISABLED)
  debug_offsets::RuntimeState runtime_state;
  debug_offsets::InterpreterState314 interpreter_state;
  debug_offsets::ThreadState313 thread_state;
  debug_offsets::InterpreterFrame314 interpreter_frame;
  debug_offsets::CodeObject314 code_object;
  debug_offsets::PyObject pyobject;
  debug_offsets::TypeObject313 type_object;
  debug_offsets::SequenceObject tuple_object, list_object;
  debug_offsets::SetObject set_object;
  debug_offsets::DictObject dict_object;
  debug_offsets::FloatObject float_object;
  debug_offsets::LongObject long_object;
  debug_offsets::BytesObject bytes_object;
  debug_offsets::UnicodeObject313 unicode_object;
  debug_offsets::Gc313 gc;
  debug_offsets::GenObject gen_object;
  debug_offsets::LlistNode llist_node;
  debug_offsets::DebuggerSupport debugger_support;
};
static_assert(sizeof(DebugOffsets314) == 760);

// 3.15.0b4 on (b1-b3 lack thread_state.last_profiled_frame_seq; the alphas
// differ from one to the next). From CPython's sources, not yet checked
// against a built 3.15: docs/python.md says why.
struct DebugOffsets315 {
  char cookie[8];          // "xdebugpy", not NUL-terminated
  uint64_t version;        // PY_VERSION_HEX of the interpreter that wrote it
  uint64_t free_threaded;  // 1: built without the GIL (Py_GIL_DISABLED)
  debug_offsets::RuntimeState runtime_state;
  debug_offsets::InterpreterState314 interpreter_state;
  debug_offsets::ThreadState315 thread_state;
  debug_offsets::ErrStackItem err_stackitem;
  debug_offsets::InterpreterFrame314 interpreter_frame;
  debug_offsets::CodeObject314 code_object;
  debug_offsets::PyObject pyobject;
  debug_offsets::TypeObject315 type_object;
  debug_offsets::HeapTypeObject heap_type_object;
  debug_offsets::SequenceObject tuple_object, list_object;
  debug_offsets::SetObject set_object;
  debug_offsets::DictObject dict_object;
  debug_offsets::FloatObject float_object;
  debug_offsets::LongObject long_object;
  debug_offsets::BytesObject bytes_object;
  debug_offsets::UnicodeObject315 unicode_object;
  debug_offsets::Gc315 gc;
  debug_offsets::GenObject gen_object;
  debug_offsets::LlistNode llist_node;
  debug_offsets::DebuggerSupport debugger_support;
};
static_assert(sizeof(DebugOffsets315) == 888);

// The asyncio module's own table (3.14+): the `.AsyncioDebug` section of the
// _asyncio extension (or of the binary it is built into). Offsets into
// TaskObj, PyInterpreterState and the thread state.
struct AsyncioDebugOffsets {
  struct {
    uint64_t size, task_name, task_awaited_by, task_is_task, task_awaited_by_is_set, task_coro, task_node;
  } asyncio_task_object;
  struct {
    uint64_t size, asyncio_tasks_head;
  } asyncio_interpreter_state;
  struct {
    uint64_t size, asyncio_running_loop, asyncio_running_task, asyncio_tasks_head;
  } asyncio_thread_state;
};
static_assert(sizeof(AsyncioDebugOffsets) == 104);

}  // namespace hangtrace
