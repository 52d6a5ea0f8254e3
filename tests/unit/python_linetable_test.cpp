// The CPython 3.11 location-table decoder (userspace/collect/python_stacks.h)
// against a real co_linetable, and the JSON round trip of Python stacks.
#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "../../userspace/collect/python_stacks.h"
#include "hangtrace/snapshot_json.h"

namespace hangtrace {
namespace {

// Generated with Debian's /usr/bin/python3 (3.11.2) from
//
//   def sample(items, limit):          # line 3
//       total = 0
//       for i, item in enumerate(items):
//           if item is None:
//               continue
//           total += item
//           if total > limit:
//               break
//       else:
//           total = -1
//       return total
//
// as sample.__code__.co_linetable, with co_firstlineno 3; kExpected is
// list(sample.__code__.co_lines()) (byte offsets [start, end) -> line).
const std::vector<uint8_t> kLineTable = {
    0x80, 0x00, 0xd8, 0x0c, 0x0d, 0x80, 0x45, 0xdd, 0x13, 0x1c, 0x98, 0x55, 0xd1, 0x13, 0x23, 0xd4, 0x13,
    0x23, 0xf0, 0x00, 0x07, 0x05, 0x13, 0xf0, 0x00, 0x07, 0x05, 0x13, 0x89, 0x07, 0x88, 0x01, 0x88, 0x34,
    0xd8, 0x0b, 0x0f, 0x88, 0x3c, 0xd8, 0x0c, 0x14, 0xd8, 0x08, 0x0d, 0x90, 0x14, 0x89, 0x0d, 0x88, 0x05,
    0xd8, 0x0b, 0x10, 0x90, 0x35, 0x8a, 0x3d, 0x88, 0x3d, 0xd8, 0x0c, 0x11, 0x88, 0x45, 0xf0, 0x03, 0x00,
    0x0c, 0x19, 0xf0, 0x06, 0x00, 0x11, 0x13, 0x88, 0x05, 0xd8, 0x0b, 0x10, 0x80, 0x4c};
constexpr int kFirstLine = 3;
const std::vector<std::tuple<int, int, int>> kExpected = {
    {0, 2, 3},    {2, 4, 4},   {4, 6, 4},    {6, 18, 5},   {18, 20, 5},  {20, 24, 5},
    {24, 34, 5},  {34, 36, 5}, {36, 38, 5},  {38, 42, 5},  {42, 44, 5},  {44, 46, 5},
    {46, 48, 6},  {48, 50, 6}, {50, 52, 7},  {52, 54, 8},  {54, 56, 8},  {56, 60, 8},
    {60, 62, 8},  {62, 64, 9}, {64, 66, 9},  {66, 72, 9},  {72, 74, 9},  {74, 76, 10},
    {76, 78, 10}, {78, 80, 9}, {80, 82, 12}, {82, 84, 12}, {84, 86, 13}, {86, 88, 13}};

TEST(PythonLineTable, EveryInstructionOfARealCodeObject) {
  for (const auto& [start, end, line] : kExpected) {
    for (int offset = start; offset < end; offset += 2)
      EXPECT_EQ(python_linetable::line_for_offset(kLineTable, kFirstLine, offset), line)
          << "offset " << offset;
  }
}

TEST(PythonLineTable, ConcreteLines) {
  EXPECT_EQ(python_linetable::line_for_offset(kLineTable, kFirstLine, 0), 3);    // RESUME: the def line
  EXPECT_EQ(python_linetable::line_for_offset(kLineTable, kFirstLine, 2), 4);    // total = 0
  EXPECT_EQ(python_linetable::line_for_offset(kLineTable, kFirstLine, 30), 5);   // the for loop (long form)
  EXPECT_EQ(python_linetable::line_for_offset(kLineTable, kFirstLine, 74), 10);  // break
  EXPECT_EQ(python_linetable::line_for_offset(kLineTable, kFirstLine, 78), 9);   // back to the if
  EXPECT_EQ(python_linetable::line_for_offset(kLineTable, kFirstLine, 80), 12);  // total = -1 (long form, +3)
  EXPECT_EQ(python_linetable::line_for_offset(kLineTable, kFirstLine, 86), 13);  // return total
}

TEST(PythonLineTable, OutOfRangeAndMalformed) {
  // A frame that has not started yet (prev_instr one before the code).
  EXPECT_EQ(python_linetable::line_for_offset(kLineTable, kFirstLine, -2), kFirstLine);
  EXPECT_EQ(python_linetable::line_for_offset(kLineTable, kFirstLine, 88), 0);  // past the end
  EXPECT_EQ(python_linetable::line_for_offset({}, kFirstLine, 0), 0);
  // An entry with no location (code 15) has no line.
  EXPECT_EQ(python_linetable::line_for_offset({0xf8}, kFirstLine, 0), 0);
  // Not an entry start, and a varint cut short: 0, never a read past the end.
  EXPECT_EQ(python_linetable::line_for_offset({0x00, 0x01}, kFirstLine, 0), 0);
  EXPECT_EQ(python_linetable::line_for_offset({0xf0, 0x40}, kFirstLine, 0), 0);
  EXPECT_EQ(python_linetable::line_for_offset({0xe8}, kFirstLine, 0), 0);
  // A line delta of 2^36 (varint 2^37: six empty 6-bit chunks, then 2) is
  // malformed, not summed (a few of them would pass int64).
  EXPECT_EQ(
      python_linetable::line_for_offset({0xe8, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40, 0x02}, kFirstLine, 0), 0);
  EXPECT_EQ(python_linetable::line_for_offset({0xe8, 0x04}, kFirstLine, 0), kFirstLine + 2);
  // Every prefix of the real table decodes without crashing.
  for (size_t n = 0; n <= kLineTable.size(); ++n)
    for (int offset = -2; offset < 90; offset += 2)
      (void)python_linetable::line_for_offset(kLineTable.data(), n, kFirstLine, offset);
}

TEST(PythonStacksJson, RoundTripAndOldSnapshots) {
  Snapshot s;
  s.target_pid = 10;
  ProcessInfo p;
  p.pid = 10;
  p.is_python = true;
  ThreadInfo a;
  a.tid = 10;
  a.holds_gil = true;
  a.python_stack = {{UserFrame::Kind::Python, "inner", "/x/blocked_threads.py", 48, 0},
                    {UserFrame::Kind::Python, "outer", "/x/blocked_threads.py", 52, 0}};
  ThreadInfo b;
  b.tid = 11;
  b.python_stack_error = "failed to read Python stack: frame chain loops";
  p.threads = {a, b};
  s.processes.push_back(p);
  auto back = snapshot_from_json(snapshot_to_json(s));
  ASSERT_TRUE(back.ok()) << back.error();
  const auto& threads = back->processes.at(0).threads;
  ASSERT_EQ(threads.size(), 2u);
  ASSERT_EQ(threads[0].python_stack.size(), 2u);
  EXPECT_EQ(threads[0].python_stack[0].function, "inner");
  EXPECT_EQ(threads[0].python_stack[0].file, "/x/blocked_threads.py");
  EXPECT_EQ(threads[0].python_stack[0].line, 48);
  EXPECT_EQ(threads[0].python_stack[1].function, "outer");
  EXPECT_EQ(threads[0].python_stack[0].kind, UserFrame::Kind::Python);
  EXPECT_TRUE(threads[0].holds_gil);
  EXPECT_TRUE(threads[1].python_stack.empty());
  EXPECT_EQ(threads[1].python_stack_error, "failed to read Python stack: frame chain loops");
  EXPECT_FALSE(threads[1].holds_gil);
  // A snapshot written before Python stacks existed has none of the keys.
  auto j = snapshot_to_json(s);
  for (auto& jt : j["processes"][0]["threads"]) {
    jt.erase("python_stack");
    jt.erase("python_stack_error");
    jt.erase("holds_gil");
  }
  auto old = snapshot_from_json(j);
  ASSERT_TRUE(old.ok()) << old.error();
  EXPECT_TRUE(old->processes.at(0).threads.at(0).python_stack.empty());
  EXPECT_FALSE(old->processes.at(0).threads.at(0).holds_gil);
}

}  // namespace
}  // namespace hangtrace
