#include "python_offsets.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <string>

#include "hangtrace/python_debug_offsets.h"
#include "procmem.h"

namespace hangtrace::python {

namespace {

// PySetObject {PyObject_HEAD; fill; used; mask; table; ...} in 3.11-3.13
// (default builds; 3.14+ from the table).
void set_object_offsets(PyOffsets& o) {
  o.set_used = o.object_size + 8;
  o.set_mask = o.object_size + 16;
  o.set_table = o.object_size + 24;
}

// CPython 3.8-3.10, measured with gdb on pyenv's 3.8.18, 3.9.18 and 3.10.13
// (libpython with DWARF): `ptype /o struct _ts`, `ptype /o struct _frame`,
// `p &((PyCodeObject*)0)->co_name`, `p &((struct pyruntimestate*)0)->ceval.gil`.
// These have no native_thread_id: the Linux TID comes from the pthread_t in
// thread_id (see pthread_tids).
PyOffsets offsets_frame_objects(int minor) {
  PyOffsets o;
  o.minor = minor;
  o.layout = FrameLayout::FrameObjects;
  o.line_table = minor == 10 ? LineTable::Linetable310 : LineTable::Lnotab;
  o.lasti_unit = minor == 10 ? 2 : 1;
  o.runtime_interpreters_head = 32;
  // 3.9 moved the pending calls from _PyRuntime.ceval into the interpreter,
  // so the GIL sits earlier.
  o.runtime_gil_last_holder = minor == 8 ? 0x488 : 0x168;
  o.runtime_gil_locked = minor == 8 ? 0x490 : 0x170;
  o.interp_next = 0;
  o.interp_threads_head = 8;  // tstate_head
  o.tstate_next = 8;
  o.tstate_frame = 24;
  o.tstate_thread_id = 176;
  o.tstate_read_size = 184;
  o.frame_previous = 24;  // f_back
  o.frame_code = 32;
  o.frame_lasti = minor == 10 ? 96 : 104;
  o.frame_read_size = o.frame_lasti + 4;
  // f_localsplus follows f_blockstack[CO_MAXBLOCKS] (20 PyTryBlocks of 12
  // bytes) after f_iblock and f_executing (3.8/3.9) or f_state (3.10).
  o.frame_localsplus = minor == 10 ? 352 : 360;
  // PyLongObject: PyObject_VAR_HEAD (ob_size the signed digit count), digits.
  o.long_tag = 16;
  o.long_tag_is_size = true;
  o.long_digit = 24;
  o.code_firstlineno = 40;
  o.code_filename = 104;
  o.code_name = 112;
  o.code_linetable = 120;  // co_lnotab (3.8/3.9), co_linetable (3.10)
  o.code_read_size = 128;
  // PyASCIIObject still has wstr, PyCompactUnicodeObject utf8 + wstr_length.
  o.unicode_ascii_data = 48;
  o.unicode_compact_data = 72;
  return o;
}

// CPython 3.11, measured with gdb on Debian's python3.11 3.11.2 (python3.11-dbg
// symbols): `p &((struct _ts*)0)->native_thread_id` etc.
PyOffsets offsets_311() {
  PyOffsets o;
  o.minor = 11;
  o.runtime_interpreters_head = 40;
  o.runtime_gil_last_holder = 368;
  o.runtime_gil_locked = 376;
  o.interp_next = 0;
  o.interp_threads_head = 16;
  o.tstate_next = 8;
  o.tstate_native_thread_id = 160;
  o.tstate_cframe = 56;
  o.cframe_current_frame = 8;
  o.tstate_read_size = 168;
  o.frame_code = 32;
  o.frame_previous = 48;
  o.frame_prev_instr = 56;
  o.frame_is_entry = 68;
  o.frame_owner = 69;
  o.owner_entry = -1;  // 3.11 has no shim frames (is_entry marks C entry)
  o.frame_read_size = 72;
  o.code_filename = 112;
  o.code_name = 128;  // co_qualname
  o.code_firstlineno = 72;
  o.code_linetable = 136;
  o.code_adaptive = 184;
  o.code_read_size = 144;
  // asyncio's task registry (gdb on pyenv's 3.11.7: `p &((PyInterpreterState
  // *)0)->modules`, `ptype /o PyGenObject`, `p (int)FRAME_SUSPENDED`, ...).
  o.interp_modules = 888;
  o.tstate_thread_id = 152;
  o.frame_stacktop = 64;
  o.frame_localsplus = 72;
  o.gen_iframe = 80;
  o.gen_frame_state = 75;
  o.frame_suspended_yield_from = -1;  // FRAME_SUSPENDED, then RESUME says whether in an await
  o.resume_opcode = 151;
  o.long_tag = 16;  // ob_size
  o.long_tag_is_size = true;
  o.long_digit = 24;
  o.heap_type_cached_keys = 872;
  o.managed_dict = ManagedDict::Pointers311;
  set_object_offsets(o);
  return o;
}

// CPython 3.12, measured with gdb on pyenv's 3.12.1: `ptype /o struct
// _PyInterpreterFrame`, `p &((struct _is*)0)->ceval.gil`, `ptype /o struct
// _gil_runtime_state`, `p (int)FRAME_OWNED_BY_CSTACK`.
PyOffsets offsets_312() {
  PyOffsets o;
  o.minor = 12;
  o.runtime_interpreters_head = 40;
  o.interp_next = 0;
  o.interp_threads_head = 72;
  // Each interpreter may have its own GIL from 3.12 on; ceval.gil points at
  // the one it uses (its own _gil or the main interpreter's).
  o.interp_gil = 384;
  o.gil_last_holder = 8;
  o.gil_locked = 16;
  o.tstate_next = 8;
  o.tstate_native_thread_id = 144;
  o.tstate_cframe = 56;
  o.cframe_current_frame = 0;
  o.tstate_read_size = 152;
  o.frame_code = 0;
  o.frame_previous = 8;
  o.frame_prev_instr = 56;
  o.frame_owner = 70;
  o.owner_entry = 3;  // FRAME_OWNED_BY_CSTACK
  o.frame_read_size = 72;
  o.code_firstlineno = 68;
  o.code_filename = 112;
  o.code_name = 128;  // co_qualname
  o.code_linetable = 136;
  o.code_adaptive = 192;
  o.code_read_size = 144;
  // 3.12 dropped wstr: the ascii data follows a 40-byte header.
  o.unicode_ascii_data = 40;
  o.unicode_compact_data = 56;
  // asyncio's task registry (gdb on pyenv's 3.12.1, as for 3.11).
  o.interp_modules = 944;
  o.tstate_thread_id = 136;
  o.frame_stacktop = 64;
  o.frame_localsplus = 72;
  o.gen_iframe = 72;
  o.gen_frame_state = 67;
  o.frame_suspended_yield_from = -1;
  o.resume_opcode = 151;
  o.instrumented_resume_opcode = 240;
  o.long_tag = 16;  // lv_tag
  o.long_digit = 24;
  o.heap_type_cached_keys = 880;
  o.managed_dict = ManagedDict::Tagged312;
  set_object_offsets(o);
  return o;
}

}  // namespace

std::optional<PyOffsets> offsets_for(int major, int minor) {
  if (major != 3) return std::nullopt;
  if (minor >= 8 && minor <= 10) return offsets_frame_objects(minor);
  if (minor == 11) return offsets_311();
  if (minor == 12) return offsets_312();
  return std::nullopt;
}

// ---- 3.13+: _Py_DebugOffsets --------------------------------------------------

namespace {

using hangtrace::DebugOffsets313;
using hangtrace::DebugOffsets314;
using hangtrace::DebugOffsets315;

// PY_VERSION_HEX fields.
int version_minor(uint64_t v) { return static_cast<int>((v >> 16) & 0xff); }
int version_micro(uint64_t v) { return static_cast<int>((v >> 8) & 0xff); }
int release_level(uint64_t v) { return static_cast<int>((v >> 4) & 0xf); }  // 0xA alpha .. 0xF final
int release_serial(uint64_t v) { return static_cast<int>(v & 0xf); }

// The owner values that are not a Python function's frame are not in the
// table. 3.12/3.13 (gdb: `p (int)FRAME_OWNED_BY_CSTACK` on 3.13.0): 3, the
// C stack shim. 3.14 (Include/internal/pycore_interpframe_structs.h):
// FRAME_OWNED_BY_INTERPRETER 3 (the entry frame of each C call into the
// eval loop, f_executable None) and FRAME_OWNED_BY_CSTACK 4; 3.15 drops the
// latter. Either way everything from 3 on.
constexpr int kFirstEntryOwner = 3;

// _Py_MAX_SCRIPT_PATH_SIZE (Include/cpython/pystate.h, 3.14): a value, not an
// offset, at a fixed place in the 3.14 and 3.15 tables, so a canary for the
// layout having been chosen right.
constexpr uint64_t kMaxScriptPathSize = 512;

// Which layout a table of `version` has (313, 314, 315), or why none fits.
// Pre-releases reshaped the table from one to the next; each layout holds
// from the pre-release named here (3.13.0rc2 added fields, pystack #207;
// 3.14.0b2 is the earliest shown to match 3.14.0; 3.15.0b4 added
// last_profiled_frame_seq, pystack #337).
Result<int> layout_of(uint64_t version) {
  struct First {
    int minor, level, serial;
  };
  static constexpr First kFirst[] = {{13, 0xC, 2}, {14, 0xB, 2}, {15, 0xB, 4}};
  const int minor = version_minor(version);
  for (const First& f : kFirst) {
    if (f.minor != minor) continue;
    const int level = release_level(version), serial = release_serial(version);
    if (version_micro(version) == 0 && (level < f.level || (level == f.level && serial < f.serial)))
      return make_error(fmt::format("the _Py_DebugOffsets of pre-release {} differ from those of 3.{}.0",
                                    version_name(version), minor));
    return 300 + minor;
  }
  return make_error(
      fmt::format("the _Py_DebugOffsets layout of CPython 3.{} is not known (3.13 to 3.15 are)", minor));
}

// A field outside its struct means the layout is not the one assumed.
bool within(uint64_t size, std::initializer_list<uint64_t> fields) {
  if (size == 0 || size > (1 << 20)) return false;
  for (uint64_t f : fields)
    if (f + 8 > size) return false;
  return true;
}

template <class Table>
Result<PyOffsets> offsets_from_table(const Table& d, int major, int minor) {
  const auto& is = d.interpreter_state;
  const auto& ts = d.thread_state;
  const auto& fr = d.interpreter_frame;
  const auto& co = d.code_object;
  const auto& un = d.unicode_object;
  if (d.free_threaded > 1 || !within(d.runtime_state.size, {d.runtime_state.interpreters_head}) ||
      !within(is.size, {is.next, is.threads_head}) ||
      !within(ts.size, {ts.next, ts.current_frame, ts.native_thread_id}) ||
      !within(fr.size, {fr.previous, fr.executable, fr.instr_ptr}) || fr.owner >= fr.size ||
      !within(co.size, {co.filename, co.qualname, co.linetable, co.co_code_adaptive}) ||
      co.firstlineno + 4 > co.size || !within(d.pyobject.size, {d.pyobject.ob_type}) ||
      d.pyobject.size != (d.free_threaded ? 32u : 16u) ||
      !within(d.type_object.size, {d.type_object.tp_name}) ||
      !within(d.bytes_object.size, {d.bytes_object.ob_size}) ||
      d.bytes_object.ob_sval > d.bytes_object.size || !within(un.size, {un.length}) ||
      un.state + 4 > un.size || un.asciiobject_size > un.size)
    return make_error("_Py_DebugOffsets is inconsistent");
  PyOffsets o;
  o.major = major;
  o.minor = minor;
  o.version_hex = d.version;
  o.free_threaded = d.free_threaded == 1;
  o.runtime_interpreters_head = d.runtime_state.interpreters_head;
  o.interp_next = is.next;
  o.interp_threads_head = is.threads_head;
  // The GIL a thread waits on is the one interp->ceval.gil points at; the
  // table gives the fields of the interpreter's own _gil, whose distances from
  // _gil are the fields' offsets in any struct _gil_runtime_state. A
  // free-threaded build has one too, used only when something turned it back
  // on (an extension without Py_mod_gil, PYTHON_GIL=1): its `enabled` says.
  if (is.ceval_gil && is.gil_runtime_state && is.gil_runtime_state_holder > is.gil_runtime_state &&
      is.gil_runtime_state_locked > is.gil_runtime_state &&
      is.gil_runtime_state_holder - is.gil_runtime_state < 4096 &&
      is.gil_runtime_state_locked - is.gil_runtime_state < 4096 && is.ceval_gil + 8 <= is.size &&
      is.gil_runtime_state_enabled < 4096) {
    o.interp_gil = is.ceval_gil;
    o.gil_last_holder = is.gil_runtime_state_holder - is.gil_runtime_state;
    o.gil_locked = is.gil_runtime_state_locked - is.gil_runtime_state;
    if (o.free_threaded) {
      o.gil_switchable = true;
      o.gil_enabled = is.gil_runtime_state_enabled;
    }
  }
  o.tstate_next = ts.next;
  o.tstate_native_thread_id = ts.native_thread_id;
  o.tstate_frame = ts.current_frame;
  o.tstate_read_size = std::max({ts.next, ts.current_frame, ts.native_thread_id}) + 8;
  if constexpr (requires { ts.holds_gil; }) {
    if (ts.holds_gil + 4 <= ts.size) {
      o.tstate_holds_gil = ts.holds_gil;
      o.tstate_read_size = std::max(o.tstate_read_size, ts.holds_gil + 4);
    }
  }
  o.frame_code = fr.executable;
  o.frame_previous = fr.previous;
  o.frame_prev_instr = fr.instr_ptr;  // the current instruction, not the previous one
  o.frame_owner = fr.owner;
  o.owner_entry = kFirstEntryOwner;
  o.frame_read_size = std::max({fr.previous + 8, fr.executable + 8, fr.instr_ptr + 8, fr.owner + 1});
  o.code_filename = co.filename;
  o.code_name = co.qualname;
  o.code_linetable = co.linetable;
  o.code_firstlineno = co.firstlineno;
  o.code_adaptive = co.co_code_adaptive;
  o.code_read_size = std::max({co.filename, co.qualname, co.linetable, co.firstlineno}) + 8;
  if constexpr (requires { fr.stackpointer; }) {
    o.stack_refs = true;
    // Thread-local bytecode (3.14t): a frame runs the copy its tlbc_index
    // names in the code's co_tlbc array.
    if (fr.tlbc_index && co.co_tlbc && fr.tlbc_index + 4 <= fr.size && co.co_tlbc + 8 <= co.size) {
      o.frame_tlbc_index = fr.tlbc_index;
      o.code_tlbc = co.co_tlbc;
      o.frame_read_size = std::max(o.frame_read_size, fr.tlbc_index + 4);
      o.code_read_size = std::max(o.code_read_size, co.co_tlbc + 8);
    }
    if (d.debugger_support.debugger_script_path_size != kMaxScriptPathSize)
      return make_error("_Py_DebugOffsets is inconsistent (its debugger section is not where 3.14's is)");
  }
  o.object_type = d.pyobject.ob_type;
  o.type_name = d.type_object.tp_name;
  o.unicode_length = un.length;
  o.unicode_state = un.state;
  o.unicode_ascii_data = un.asciiobject_size;
  // PyCompactUnicodeObject adds utf8_length and utf8 to the ASCII header.
  o.unicode_compact_data = un.asciiobject_size + 16;
  if constexpr (requires { un.compactunicodeobject_size; }) {
    // Read as a string's header: inside the object it describes.
    if (un.compactunicodeobject_size < un.asciiobject_size || un.compactunicodeobject_size > un.size)
      return make_error(
          "_Py_DebugOffsets is inconsistent (its compact string header is larger than the string)");
    o.unicode_compact_data = un.compactunicodeobject_size;
  }
  if (o.free_threaded && minor >= 14) {
    // Include/cpython/unicodeobject.h, Py_GIL_DISABLED: `unsigned char
    // interned; unsigned int kind:3, compact:1, ascii:1, ...`.
    o.unicode_kind_shift = 8;
    o.unicode_compact_shift = 11;
    o.unicode_ascii_shift = 12;
  }
  o.bytes_size = d.bytes_object.ob_size;
  o.bytes_data = d.bytes_object.ob_sval;
  o.object_size = d.pyobject.size;
  if (ts.thread_id + 8 <= ts.size) {
    o.tstate_thread_id = ts.thread_id;
    o.tstate_read_size = std::max(o.tstate_read_size, ts.thread_id + 8);
  }
  // Containers and types, for the objects asyncio's registries are read from.
  if (within(is.size, {is.imports_modules})) o.interp_modules = is.imports_modules;
  if (within(d.dict_object.size, {d.dict_object.ma_keys, d.dict_object.ma_values})) {
    o.dict_keys = d.dict_object.ma_keys;
    o.dict_values = d.dict_object.ma_values;
  }
  if (within(d.list_object.size, {d.list_object.ob_item, d.list_object.ob_size})) {
    o.sequence_items = d.list_object.ob_item;
    o.var_size = d.list_object.ob_size;
  }
  if (within(d.type_object.size, {d.type_object.tp_flags})) o.type_flags = d.type_object.tp_flags;
  if (within(d.long_object.size, {d.long_object.lv_tag}) &&
      d.long_object.ob_digit + 4 <= d.long_object.size) {
    o.long_tag = d.long_object.lv_tag;
    o.long_digit = d.long_object.ob_digit;
  }
  if (minor == 13 && !o.free_threaded) {
    // What the 3.13 table leaves out, measured with gdb on pyenv's 3.13.0
    // (`ptype /o PyGenObject`, `ptype /o struct _PyInterpreterFrame`,
    // `p (int)FRAME_SUSPENDED_YIELD_FROM`, `ptype /o struct _dictvalues`);
    // a free-threaded 3.13 lays these out otherwise and is not read.
    o.frame_stacktop = 64;
    o.frame_localsplus = fr.localsplus;
    o.frame_read_size = std::max(o.frame_read_size, o.frame_stacktop + 4);
    o.gen_iframe = 72;
    o.gen_frame_state = 67;
    o.frame_suspended_yield_from = -1;
    o.dict_values_items = 8;
    o.heap_type_cached_keys = 880;
    o.managed_dict = ManagedDict::Inline313;
    set_object_offsets(o);
  }
  if constexpr (requires { d.gen_object; }) {
    const auto& gen = d.gen_object;
    const auto& set = d.set_object;
    if (within(fr.size, {fr.stackpointer}) && within(gen.size, {gen.gi_iframe}) &&
        gen.gi_frame_state < gen.size && within(set.size, {set.used, set.table, set.mask}) &&
        within(d.long_object.size, {d.long_object.lv_tag}) &&
        d.long_object.ob_digit + 4 <= d.long_object.size && d.llist_node.next < 64) {
      o.frame_stackpointer = fr.stackpointer;
      o.frame_localsplus = fr.localsplus;
      o.frame_read_size = std::max(o.frame_read_size, fr.stackpointer + 8);
      o.gen_iframe = gen.gi_iframe;
      o.gen_frame_state = gen.gi_frame_state;
      // Include/internal/pycore_frame.h: 3.14 numbers the states from
      // FRAME_CREATED -3 (FRAME_SUSPENDED_YIELD_FROM -1); 3.15 from 0 (it 2).
      o.frame_suspended_yield_from = minor >= 15 ? 2 : -1;
      o.set_used = set.used;
      o.set_table = set.table;
      o.set_mask = set.mask;
      o.long_tag = d.long_object.lv_tag;
      o.long_digit = d.long_object.ob_digit;
      o.llist_next = d.llist_node.next;
    }
  }
  return o;
}

template <class Table>
Result<PyOffsets> read_table(const MemoryReader& mem, uint64_t runtime, int major, int minor) {
  auto bytes = mem.read(runtime, sizeof(Table));
  if (!bytes || bytes->size() < sizeof(Table))
    return make_error("cannot read _Py_DebugOffsets at the start of _PyRuntime");
  Table d;
  std::memcpy(&d, bytes->data(), sizeof d);
  return offsets_from_table(d, major, minor);
}

}  // namespace

std::string version_name(uint64_t v) {
  std::string out = fmt::format("{}.{}.{}", (v >> 24) & 0xff, version_minor(v), version_micro(v));
  static constexpr const char* kLevels[] = {"a", "b", "rc"};
  if (int level = release_level(v); level >= 0xA && level <= 0xC)
    out += fmt::format("{}{}", kLevels[level - 0xA], release_serial(v));
  return out;
}

Result<PyOffsets> offsets_from_debug(const MemoryReader& mem, uint64_t runtime, int major, int minor) {
  // The header is the same in every layout: read it first to choose one.
  auto head = mem.read(runtime, 24);
  if (!head || head->size() < 24)
    return make_error("cannot read _Py_DebugOffsets at the start of _PyRuntime");
  if (std::memcmp(head->data(), "xdebugpy", 8) != 0)
    return make_error("_PyRuntime does not start with _Py_DebugOffsets");
  const uint64_t version = load_u64(*head, 8);
  int dmajor = static_cast<int>((version >> 24) & 0xff), dminor = static_cast<int>((version >> 16) & 0xff);
  if (dmajor != major || dminor != minor)
    return make_error(
        fmt::format("_Py_DebugOffsets says {}.{}, the binary {}.{}", dmajor, dminor, major, minor));
  if (dmajor != 3) return make_error(fmt::format("_Py_DebugOffsets says CPython {}.{}", dmajor, dminor));
  auto layout = layout_of(version);
  if (!layout) return make_error(layout.error());
  switch (*layout) {
    case 313:
      return read_table<DebugOffsets313>(mem, runtime, major, minor);
    case 314:
      return read_table<DebugOffsets314>(mem, runtime, major, minor);
    default:
      return read_table<DebugOffsets315>(mem, runtime, major, minor);
  }
}

}  // namespace hangtrace::python
