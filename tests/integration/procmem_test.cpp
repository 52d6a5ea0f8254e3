// Reads of a process's memory: exact or a prefix, and bounded whatever
// length the target's own data asks for (procmem.h).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "procmem.h"

namespace hangtrace::testing {
namespace {

TEST(ProcessMemory, ReadsExactlyOrSaysWhy) {
  static const char kText[] = "hangtrace reads this";
  const auto address = reinterpret_cast<uint64_t>(kText);
  auto got = read_process_memory(getpid(), address, sizeof kText);
  ASSERT_TRUE(got) << got.error();
  EXPECT_EQ(std::memcmp(got->data(), kText, sizeof kText), 0);
  EXPECT_FALSE(read_process_memory(getpid(), 0, 8));
  EXPECT_FALSE(read_process_memory(getpid(), 8, 8));  // unmapped
}

// A length taken from the target (a string's size, a count) past the bound
// is refused before anything is allocated; a prefix read is cut to it.
TEST(ProcessMemory, ALengthPastTheBoundIsRefusedNotAllocated) {
  std::vector<uint8_t> big(kMaxProcessReadBytes + 4096, 0x5a);
  const auto address = reinterpret_cast<uint64_t>(big.data());
  for (size_t length : {kMaxProcessReadBytes + 1, size_t{1} << 60, ~size_t{0}}) {
    auto got = read_process_memory(getpid(), address, length);
    ASSERT_FALSE(got) << length;
    EXPECT_NE(got.error().find("more than the 16777216 one read takes"), std::string::npos) << got.error();
  }
  auto exact = read_process_memory(getpid(), address, kMaxProcessReadBytes);
  ASSERT_TRUE(exact) << exact.error();
  EXPECT_EQ(exact->size(), kMaxProcessReadBytes);
  EXPECT_EQ(read_process_memory_prefix(getpid(), address, size_t{1} << 60).size(), kMaxProcessReadBytes);
}

}  // namespace
}  // namespace hangtrace::testing
