// Which _Py_DebugOffsets layout a table gets, from the version it records,
// and what the walk takes from each (no process: a table in a buffer). The
// values are those CPython 3.14.7 writes (gdb on the hand builds of
// docs/python.md), the free-threaded build's where it differs.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "hangtrace/python_debug_offsets.h"
#include "procmem.h"
#include "python_offsets.h"

namespace hangtrace::testing {
namespace {

constexpr uint64_t kRuntime = 0x10000;

class BufferMemory final : public MemoryReader {
 public:
  explicit BufferMemory(std::vector<uint8_t> bytes) : bytes_(std::move(bytes)) {}
  Result<std::vector<uint8_t>> read(uint64_t address, size_t length) const override {
    if (address < kRuntime || address - kRuntime + length > bytes_.size()) return make_error("unmapped");
    return std::vector<uint8_t>(bytes_.begin() + (address - kRuntime),
                                bytes_.begin() + (address - kRuntime + length));
  }
  std::vector<uint8_t> read_prefix(uint64_t address, size_t length) const override {
    auto r = read(address, length);
    return r ? *r : std::vector<uint8_t>{};
  }

 private:
  std::vector<uint8_t> bytes_;
};

// A 3.14 table as 3.14.7 (x86_64, gcc 12) fills it, read from _PyRuntime of
// the hand builds: the default build's, and the free-threaded one's fields
// where they differ.
DebugOffsets314 table_314(uint64_t version, bool free_threaded) {
  DebugOffsets314 d{};
  std::memcpy(d.cookie, "xdebugpy", 8);
  d.version = version;
  d.free_threaded = free_threaded;
  d.runtime_state = {316616, 784, 808};
  d.interpreter_state = {225864, 7280, 7272, 7344, 7360, 7408, 7688, 7672,
                         7680,   16,   7784, 0,    7800, 7792, 7992, 0};
  d.thread_state = {832, 0, 8, 16, 72, 152, 160, 232, 32};
  d.interpreter_frame = {88, 8, 0, 56, 80, 74, 64, 0};
  d.code_object = {216, 112, 120, 128, 136, 68, 52, 96, 104, 208, 0};
  d.pyobject = {16, 8};
  d.type_object = {416, 24, 88, 168};
  d.tuple_object = {40, 32, 16};
  d.list_object = {40, 24, 16};
  d.set_object = {200, 24, 40, 32};
  d.dict_object = {48, 32, 40};
  d.float_object = {24, 16};
  d.long_object = {32, 16, 24};
  d.bytes_object = {40, 16, 32};
  d.unicode_object = {64, 32, 16, 40};
  d.gc = {264, 192};
  d.gen_object = {160, 24, 72, 67};
  d.llist_node = {0, 8};
  d.debugger_support = {24, 304, 8076, 0, 4, 512};
  if (free_threaded) {
    d.runtime_state = {362368, 784, 808};
    d.interpreter_state = {246720, 7280, 7272, 7344, 7360, 7408, 7712, 7696,
                           7704,   16,   7808, 0,    7832, 7824, 8024, 17628};
    d.interpreter_frame = {88, 8, 0, 56, 80, 78, 64, 72};
    d.code_object = {240, 128, 136, 144, 152, 84, 68, 112, 120, 232, 224};
    d.pyobject = {32, 24};
    d.type_object = {432, 40, 104, 184};
    d.tuple_object = {56, 48, 32};
    d.list_object = {56, 40, 32};
    d.set_object = {216, 40, 56, 48};
    d.dict_object = {64, 48, 56};
    d.float_object = {40, 32};
    d.long_object = {48, 32, 40};
    d.bytes_object = {56, 32, 48};
    d.unicode_object = {80, 48, 32, 56};
    d.gc = {288, 192};
    d.gen_object = {176, 40, 88, 83};
    d.debugger_support = {24, 304, 8108, 0, 4, 512};
  }
  return d;
}

template <class Table>
Result<python::PyOffsets> offsets_of(const Table& d) {
  // What follows the table in _PyRuntime: zeros, as far as a longer layout reads.
  std::vector<uint8_t> bytes(sizeof d + 256);
  std::memcpy(bytes.data(), &d, sizeof d);
  BufferMemory mem(std::move(bytes));
  return python::offsets_from_debug(mem, kRuntime, static_cast<int>(d.version >> 24),
                                    static_cast<int>((d.version >> 16) & 0xff));
}

TEST(PythonDebugOffsets, A314TableGivesStackRefsEntryFramesAndTheAsyncioFields) {
  auto o = offsets_of(table_314(0x030E07F0, false));
  ASSERT_TRUE(o.ok()) << o.error();
  EXPECT_EQ(o->version_hex, 0x030E07F0u);
  EXPECT_EQ(python::version_name(o->version_hex), "3.14.7");
  EXPECT_FALSE(o->free_threaded);
  EXPECT_TRUE(o->stack_refs);
  EXPECT_EQ(o->owner_entry, 3);
  EXPECT_EQ(o->frame_owner, 74u);
  EXPECT_EQ(o->frame_tlbc_index, 0u);  // default builds have no thread-local bytecode
  EXPECT_EQ(o->unicode_kind_shift, 2);
  EXPECT_EQ(o->gen_iframe, 72u);
  EXPECT_EQ(o->frame_stackpointer, 64u);
  EXPECT_EQ(o->frame_suspended_yield_from, -1);
  EXPECT_EQ(o->tstate_thread_id, 152u);
  EXPECT_EQ(o->interp_gil, 16u);
  EXPECT_EQ(o->gil_locked, 16u);  // _gil.locked - _gil
  EXPECT_EQ(o->gil_last_holder, 8u);
  EXPECT_FALSE(o->gil_switchable);
}

TEST(PythonDebugOffsets, AFreeThreaded314TableGivesItsHeaderStringBitsAndBytecodeCopies) {
  auto o = offsets_of(table_314(0x030E07F0, true));
  ASSERT_TRUE(o.ok()) << o.error();
  EXPECT_TRUE(o->free_threaded);
  EXPECT_EQ(o->object_type, 24u);
  EXPECT_EQ(o->object_size, 32u);
  EXPECT_EQ(o->unicode_kind_shift, 8);
  EXPECT_EQ(o->unicode_compact_shift, 11);
  EXPECT_EQ(o->unicode_ascii_shift, 12);
  EXPECT_EQ(o->frame_tlbc_index, 72u);
  EXPECT_EQ(o->code_tlbc, 224u);
  // _gil.enabled is the first field of the free-threaded GIL state.
  EXPECT_TRUE(o->gil_switchable);
  EXPECT_EQ(o->gil_enabled, 0u);
  EXPECT_EQ(o->gil_locked, 24u);
}

TEST(PythonDebugOffsets, PreReleasesWithOtherLayoutsAreRefusedByName) {
  auto alpha = offsets_of(table_314(0x030E00A7, false));
  ASSERT_FALSE(alpha.ok());
  EXPECT_EQ(alpha.error(), "the _Py_DebugOffsets of pre-release 3.14.0a7 differ from those of 3.14.0");
  EXPECT_TRUE(offsets_of(table_314(0x030E00B2, false)).ok());
  EXPECT_TRUE(offsets_of(table_314(0x030E00C1, false)).ok());
  // A 3.16 table: no layout known, whatever it holds.
  auto next = offsets_of(table_314(0x031000F0, false));
  ASSERT_FALSE(next.ok());
  EXPECT_EQ(next.error(), "the _Py_DebugOffsets layout of CPython 3.16 is not known (3.13 to 3.15 are)");
}

TEST(PythonDebugOffsets, ATableOfAnotherLayoutIsCaughtByItsCanaries) {
  // 3.14's table read as if it were 3.15's: everything after thread_state
  // shifts, and the checks catch it rather than walk with wrong offsets.
  DebugOffsets314 d = table_314(0x030F00B4, false);
  auto as_315 = offsets_of(d);
  ASSERT_FALSE(as_315.ok());
  EXPECT_NE(as_315.error().find("inconsistent"), std::string::npos) << as_315.error();
  // The debugger section's size is the layout's canary.
  d = table_314(0x030E07F0, false);
  d.debugger_support.debugger_script_path_size = 0;
  auto moved = offsets_of(d);
  ASSERT_FALSE(moved.ok());
  EXPECT_NE(moved.error().find("debugger section"), std::string::npos) << moved.error();
  // A header that says free-threaded over a default build's object header.
  d = table_314(0x030E07F0, false);
  d.free_threaded = 1;
  EXPECT_FALSE(offsets_of(d).ok());
}

// A 3.15.0b4 table: 3.14's, with the fields 3.15 added or moved.
DebugOffsets315 table_315() {
  DebugOffsets315 d{};
  DebugOffsets314 base = table_314(0x030F00B4, false);
  std::memcpy(d.cookie, base.cookie, 8);
  d.version = 0x030F00B4;
  d.runtime_state = base.runtime_state;
  d.interpreter_state = base.interpreter_state;
  d.thread_state = {560, 0, 8, 16, 80, 88, 96, 104, 200, 208, 224, 32, 36, 40, 240, 248};
  d.err_stackitem = {0};
  d.interpreter_frame = base.interpreter_frame;
  d.code_object = base.code_object;
  d.pyobject = base.pyobject;
  d.type_object = {928, 24, 88, 168, 32, 288};
  d.heap_type_object = {1000, 960};
  d.tuple_object = base.tuple_object;
  d.list_object = base.list_object;
  d.set_object = base.set_object;
  d.dict_object = base.dict_object;
  d.float_object = base.float_object;
  d.long_object = base.long_object;
  d.bytes_object = base.bytes_object;
  d.unicode_object = {72, 32, 16, 40, 56};
  d.gc = {600, 72, 80, 96, 104};
  d.gen_object = base.gen_object;
  d.llist_node = base.llist_node;
  d.debugger_support = base.debugger_support;
  return d;
}

TEST(PythonDebugOffsets, A315Beta4TableGivesTheThreadsOwnGilWord) {
  DebugOffsets315 d = table_315();
  auto o = offsets_of(d);
  ASSERT_TRUE(o.ok()) << o.error();
  EXPECT_EQ(o->tstate_native_thread_id, 208u);
  EXPECT_EQ(o->tstate_holds_gil, 36u);
  EXPECT_EQ(o->unicode_compact_data, 56u);
  EXPECT_EQ(o->frame_suspended_yield_from, 2);
  d.version = 0x030F00B3;
  auto beta3 = offsets_of(d);
  ASSERT_FALSE(beta3.ok());
  EXPECT_EQ(beta3.error(), "the _Py_DebugOffsets of pre-release 3.15.0b3 differ from those of 3.15.0");
}

// The size of a string's header is read from the target's table and then
// read from its memory: one larger than the string itself is refused as
// inconsistent (it was allocated as asked: 2^60 bytes, and hangtrace died of
// std::length_error).
TEST(PythonDebugOffsets, AStringHeaderLargerThanTheStringIsInconsistent) {
  for (uint64_t bad : {uint64_t{1} << 60, uint64_t{73}, uint64_t{16}}) {
    DebugOffsets315 d = table_315();
    d.unicode_object.compactunicodeobject_size = bad;
    auto o = offsets_of(d);
    ASSERT_FALSE(o.ok()) << bad;
    EXPECT_NE(o.error().find("inconsistent"), std::string::npos) << o.error();
  }
}

}  // namespace
}  // namespace hangtrace::testing
