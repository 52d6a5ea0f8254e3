#include "python_offsets.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>

#include "hangtrace/python_debug_offsets.h"
#include "procmem.h"

namespace hangtrace::python {

namespace {

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
  o.owner_cstack = -1;  // 3.11 has no shim frames (is_entry marks C entry)
  o.frame_read_size = 72;
  o.code_filename = 112;
  o.code_name = 128;  // co_qualname
  o.code_firstlineno = 72;
  o.code_linetable = 136;
  o.code_adaptive = 184;
  o.code_read_size = 144;
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
  o.owner_cstack = 3;
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

// FRAME_OWNED_BY_CSTACK is not in the debug offsets; 3.13.0 (gdb: `p
// (int)FRAME_OWNED_BY_CSTACK`) has the 3.12 value.
constexpr int kOwnedByCstack313 = 3;

}  // namespace

Result<PyOffsets> offsets_from_debug(const MemoryReader& mem, uint64_t runtime, int major, int minor) {
  auto bytes = mem.read(runtime, sizeof(DebugOffsets313));
  if (!bytes) return make_error("cannot read _Py_DebugOffsets at the start of _PyRuntime");
  DebugOffsets313 d;
  std::memcpy(&d, bytes->data(), sizeof d);
  if (std::memcmp(d.cookie, "xdebugpy", 8) != 0)
    return make_error("_PyRuntime does not start with _Py_DebugOffsets");
  int dmajor = static_cast<int>((d.version >> 24) & 0xff),
      dminor = static_cast<int>((d.version >> 16) & 0xff);
  if (dmajor != major || dminor != minor)
    return make_error(
        fmt::format("_Py_DebugOffsets says {}.{}, the binary {}.{}", dmajor, dminor, major, minor));
  if (dmajor != 3 || dminor != 13)
    return make_error(
        fmt::format("the _Py_DebugOffsets layout of CPython {}.{} is not known (3.13's is)", dmajor, dminor));
  // A field outside its struct means the layout is not the one assumed.
  auto within = [](uint64_t size, std::initializer_list<uint64_t> fields) {
    if (size == 0 || size > (1 << 20)) return false;
    for (uint64_t f : fields)
      if (f + 8 > size) return false;
    return true;
  };
  const auto& is = d.interpreter_state;
  const auto& ts = d.thread_state;
  const auto& fr = d.interpreter_frame;
  const auto& co = d.code_object;
  const auto& un = d.unicode_object;
  if (!within(d.runtime_state.size, {d.runtime_state.interpreters_head}) ||
      !within(is.size, {is.next, is.threads_head}) ||
      !within(ts.size, {ts.next, ts.current_frame, ts.native_thread_id}) ||
      !within(fr.size, {fr.previous, fr.executable, fr.instr_ptr}) || fr.owner >= fr.size ||
      !within(co.size, {co.filename, co.qualname, co.linetable, co.co_code_adaptive}) ||
      co.firstlineno + 4 > co.size || !within(d.pyobject.size, {d.pyobject.ob_type}) ||
      !within(d.type_object.size, {d.type_object.tp_name}) ||
      !within(d.bytes_object.size, {d.bytes_object.ob_size}) ||
      d.bytes_object.ob_sval > d.bytes_object.size || !within(un.size, {un.length}) ||
      un.state + 4 > un.size || un.asciiobject_size > un.size)
    return make_error("_Py_DebugOffsets is inconsistent");
  PyOffsets o;
  o.major = major;
  o.minor = minor;
  o.runtime_interpreters_head = d.runtime_state.interpreters_head;
  o.interp_next = is.next;
  o.interp_threads_head = is.threads_head;
  // The GIL a thread waits on is the one interp->ceval.gil points at; the
  // table gives the fields of the interpreter's own _gil, whose distances from
  // _gil are the fields' offsets in any struct _gil_runtime_state. Free-threaded
  // builds may run without a GIL: no holder then.
  if (!d.free_threaded && is.ceval_gil && is.gil_runtime_state &&
      is.gil_runtime_state_holder > is.gil_runtime_state &&
      is.gil_runtime_state_locked > is.gil_runtime_state &&
      is.gil_runtime_state_holder - is.gil_runtime_state < 4096 &&
      is.gil_runtime_state_locked - is.gil_runtime_state < 4096 && is.ceval_gil + 8 <= is.size) {
    o.interp_gil = is.ceval_gil;
    o.gil_last_holder = is.gil_runtime_state_holder - is.gil_runtime_state;
    o.gil_locked = is.gil_runtime_state_locked - is.gil_runtime_state;
  }
  o.tstate_next = ts.next;
  o.tstate_native_thread_id = ts.native_thread_id;
  o.tstate_frame = ts.current_frame;
  o.tstate_read_size = std::max({ts.next, ts.current_frame, ts.native_thread_id}) + 8;
  o.frame_code = fr.executable;
  o.frame_previous = fr.previous;
  o.frame_prev_instr = fr.instr_ptr;  // the current instruction, not the previous one
  o.frame_owner = fr.owner;
  o.owner_cstack = kOwnedByCstack313;
  o.frame_read_size = std::max({fr.previous + 8, fr.executable + 8, fr.instr_ptr + 8, fr.owner + 1});
  o.code_filename = co.filename;
  o.code_name = co.qualname;
  o.code_linetable = co.linetable;
  o.code_firstlineno = co.firstlineno;
  o.code_adaptive = co.co_code_adaptive;
  o.code_read_size = std::max({co.filename, co.qualname, co.linetable, co.firstlineno}) + 8;
  o.object_type = d.pyobject.ob_type;
  o.type_name = d.type_object.tp_name;
  o.unicode_length = un.length;
  o.unicode_state = un.state;
  o.unicode_ascii_data = un.asciiobject_size;
  // PyCompactUnicodeObject adds utf8_length and utf8 to the ASCII header.
  o.unicode_compact_data = un.asciiobject_size + 16;
  o.bytes_size = d.bytes_object.ob_size;
  o.bytes_data = d.bytes_object.ob_sval;
  return o;
}

}  // namespace hangtrace::python
