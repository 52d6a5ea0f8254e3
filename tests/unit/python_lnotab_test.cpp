// The CPython 3.8/3.9 co_lnotab and 3.10 co_linetable decoders
// (userspace/collect/python_stacks.h) against tables of real interpreters.
#include <gtest/gtest.h>

#include <cstdint>
#include <tuple>
#include <vector>

#include "../../userspace/collect/python_stacks.h"

namespace hangtrace {
namespace {

// The tables below were generated from
//
//   def sample(items, limit):          # line 2
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
// and from a function with a 300-line gap (line deltas over 127, split into
// several entries) and a backward jump (negative deltas):
//
//   def f(a):                          # line 1
//       x = a
//       <300 empty lines>
//       while x:                       # line 303
//           x -= 1
//       return [
//           x,
//           a]
//
// as __code__.co_lnotab (pyenv 3.8.18; 3.9.18 gives the same bytes) with the
// expected line of each instruction from dis.findlinestarts, and as
// __code__.co_linetable (pyenv 3.10.13) with list(co_lines()).
constexpr int kSampleFirstLine = 2;
constexpr int kGapFirstLine = 1;

const std::vector<uint8_t> kSampleLnotab38 = {0x00, 0x01, 0x04, 0x01, 0x10, 0x01, 0x08, 0x01, 0x02,
                                              0x01, 0x08, 0x01, 0x08, 0x01, 0x06, 0x02, 0x04, 0x01};
// (instruction byte offset, line)
const std::vector<std::pair<int, int>> kSampleLines38 = {
    {0, 3},  {2, 3},  {4, 4},  {6, 4},  {8, 4},  {10, 4}, {12, 4},  {14, 4},  {16, 4},  {18, 4},
    {20, 5}, {22, 5}, {24, 5}, {26, 5}, {28, 6}, {30, 7}, {32, 7},  {34, 7},  {36, 7},  {38, 8},
    {40, 8}, {42, 8}, {44, 8}, {46, 9}, {48, 9}, {50, 9}, {52, 11}, {54, 11}, {56, 12}, {58, 12}};

const std::vector<uint8_t> kGapLnotab38 = {0x00, 0x01, 0x04, 0x7f, 0x00, 0x7f, 0x00, 0x2f,
                                           0x04, 0x01, 0x0a, 0x02, 0x02, 0x01, 0x02, 0xfe};
const std::vector<std::pair<int, int>> kGapLines38 = {{0, 2},    {2, 2},    {4, 303},  {6, 303},  {8, 304},
                                                      {10, 304}, {12, 304}, {14, 304}, {16, 304}, {18, 306},
                                                      {20, 307}, {22, 305}, {24, 305}};

const std::vector<uint8_t> kSampleLinetable310 = {0x04, 0x01, 0x10, 0x01, 0x08, 0x01, 0x02, 0x01,
                                                  0x08, 0x01, 0x08, 0x01, 0x02, 0x01, 0x04, 0x03,
                                                  0x02, 0xfc, 0x04, 0x03, 0x04, 0x01};
// [start, end) in bytes -> line
const std::vector<std::tuple<int, int, int>> kSampleRanges310 = {
    {0, 4, 3},   {4, 20, 4},   {20, 28, 5}, {28, 30, 6},  {30, 38, 7}, {38, 46, 8},
    {46, 48, 9}, {48, 52, 12}, {52, 54, 8}, {54, 58, 11}, {58, 62, 12}};

const std::vector<uint8_t> kGapLinetable310 = {0x04, 0x01, 0x00, 0x7f, 0x00, 0x7f, 0x04, 0x2f, 0x08,
                                               0x01, 0x04, 0xff, 0x02, 0x03, 0x02, 0x01, 0x04, 0xfe};
const std::vector<std::tuple<int, int, int>> kGapRanges310 = {
    {0, 4, 2}, {4, 8, 303}, {8, 16, 304}, {16, 20, 303}, {20, 22, 306}, {22, 24, 307}, {24, 28, 305}};

int lnotab(const std::vector<uint8_t>& t, int first, int64_t offset) {
  return python_linetable::lnotab_line(t.data(), t.size(), first, offset);
}

int linetable310(const std::vector<uint8_t>& t, int first, int64_t offset) {
  return python_linetable::linetable310_line(t.data(), t.size(), first, offset);
}

TEST(PythonLnotab, EveryInstructionOfRealTables) {
  for (auto [offset, line] : kSampleLines38)
    EXPECT_EQ(lnotab(kSampleLnotab38, kSampleFirstLine, offset), line) << "offset " << offset;
  for (auto [offset, line] : kGapLines38)
    EXPECT_EQ(lnotab(kGapLnotab38, kGapFirstLine, offset), line) << "offset " << offset;
}

TEST(PythonLnotab, NotStartedIsTheFirstLine) {
  // f_lasti is -1 in a frame that has not run an instruction yet.
  EXPECT_EQ(lnotab(kSampleLnotab38, kSampleFirstLine, -1), kSampleFirstLine);
}

TEST(PythonLnotab, EmptyOrOddTables) {
  // No table: everything is on the first line, as CPython says.
  EXPECT_EQ(lnotab({}, 7, 10), 7);
  // A trailing half pair is ignored, not read past.
  EXPECT_EQ(lnotab({0x00, 0x01, 0x04}, 7, 10), 8);
  // Garbage that would put the line at or below 0 is "unknown".
  EXPECT_EQ(lnotab({0x00, 0x80}, 1, 0), 0);
}

TEST(PythonLinetable310, EveryByteOfRealTables) {
  for (const auto& [table, first, ranges] :
       {std::tie(kSampleLinetable310, kSampleFirstLine, kSampleRanges310),
        std::tie(kGapLinetable310, kGapFirstLine, kGapRanges310)}) {
    for (auto [start, end, line] : ranges)
      for (int offset = start; offset < end; offset += 2)
        EXPECT_EQ(linetable310(table, first, offset), line) << "offset " << offset;
    // Past the end of the code.
    EXPECT_EQ(linetable310(table, first, std::get<1>(ranges.back())), 0);
  }
}

TEST(PythonLinetable310, NoLineEntriesKeepTheRunningLine) {
  // [0,2) line 11, [2,4) no line (-128), [4,6) line 12: the -128 entry does
  // not move the line the next delta applies to.
  const std::vector<uint8_t> t = {0x02, 0x01, 0x02, 0x80, 0x02, 0x01};
  EXPECT_EQ(linetable310(t, 10, 0), 11);
  EXPECT_EQ(linetable310(t, 10, 2), 0);
  EXPECT_EQ(linetable310(t, 10, 4), 12);
}

TEST(PythonLinetable310, NotStartedAndTruncated) {
  EXPECT_EQ(linetable310(kSampleLinetable310, kSampleFirstLine, -2), kSampleFirstLine);
  EXPECT_EQ(linetable310({}, 5, 0), 0);
  EXPECT_EQ(linetable310({0x04}, 5, 0), 0);  // half an entry
}

}  // namespace
}  // namespace hangtrace
