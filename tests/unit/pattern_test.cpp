// User-supplied patterns (--match) on subjects another user's process
// controls: linear time, no recursion, bytes; refused with one line.
#include <gtest/gtest.h>

#include <string>

#include "hangtrace/pattern.h"

namespace hangtrace {
namespace {

Pattern compiled(const std::string& text) {
  auto p = Pattern::compile(text, "--match");
  EXPECT_TRUE(p) << p.error();
  return p ? *p : *Pattern::compile("x", "--match");
}

TEST(Pattern, SearchesAnywhereLikeGrep) {
  EXPECT_TRUE(compiled(R"(train\.py)").search("/usr/bin/python3 -u train.py --epochs 3"));
  EXPECT_FALSE(compiled(R"(train\.py)").search("/usr/bin/python3 -u trainXpy"));
  EXPECT_TRUE(compiled(R"(^/usr/bin/python3 )").search("/usr/bin/python3 x"));
  EXPECT_FALSE(compiled(R"(^python3)").search("/usr/bin/python3 x"));
  EXPECT_TRUE(compiled(R"(--rank[= ]\d+\b)").search("x --rank 3 y"));
  EXPECT_TRUE(compiled(R"(a|b)").search("zzb"));
}

// The command line that overflowed std::regex's recursion (issue 34): a few
// MiB with the match at its very end, and with none at all.
TEST(Pattern, DotStarOnSeveralMiBNeitherRecursesNorCrawls) {
  std::string subject = "/usr/bin/python3 x.py";
  for (int i = 0; i < 40; ++i) subject += " " + std::string(100 * 1000, 'a' + i % 26);
  const std::string unmatched = subject;
  subject += " train.py";
  for (const char* text :
       {R"(python.*train\.py)", R"(.*train\.py)", R"((.*)*train\.py$)", R"((a|aa)*train)"}) {
    const Pattern p = compiled(text);
    EXPECT_TRUE(p.search(subject)) << text;
    EXPECT_FALSE(p.search(unmatched)) << text;
  }
}

// Bytes, as /proc gives them: invalid UTF-8 is matched by `.` like any byte,
// and a UTF-8 pattern matches its bytes.
TEST(Pattern, MatchesBytesNotUtf8) {
  EXPECT_TRUE(
      compiled("a.b").search(std::string("a\xff"
                                         "b")));
  EXPECT_TRUE(compiled("x.*y").search(std::string("x\xc3\x28\xa0\xa1y")));
  EXPECT_TRUE(compiled("训练").search("python3 训练.py"));
  EXPECT_FALSE(compiled("a.b").search("a\nb"));
}

TEST(Pattern, WhatNeedsBacktrackingOrIsTooLargeIsRefusedInOneLine) {
  struct Case {
    std::string text, reason;
  };
  const Case cases[] = {
      {R"((a)\1)", "invalid escape sequence"},
      {R"(train(?=\.py))", "invalid perl operator"},
      {R"((?<!x)train)", "invalid perl operator"},
      {"train(", "missing )"},
      {"a{1001}", "invalid repetition size"},
      {"((((a{100}){100}){100}){100})", "invalid repetition size"},
      {"", "the pattern is empty"},
      {std::string(kMaxPatternBytes + 1, 'a'), "more than the 4096 allowed"},
  };
  for (const auto& c : cases) {
    auto p = Pattern::compile(c.text, "--match");
    ASSERT_FALSE(p) << c.text;
    EXPECT_EQ(p.error().rfind("failed to compile --match", 0), 0u) << p.error();
    EXPECT_NE(p.error().find(c.reason), std::string::npos) << p.error();
    EXPECT_EQ(p.error().find('\n'), std::string::npos) << p.error();
  }
}

// A pattern whose program outgrows kPatternMemoryBytes is refused, not
// given the memory.
TEST(Pattern, AProgramPastTheMemoryBoundIsRefused) {
  std::string big;  // 500 x 1,000 instructions, within kMaxPatternBytes
  while (big.size() + 8 <= kMaxPatternBytes) big += "\\w{1000}";
  auto p = Pattern::compile(big, "--match");
  ASSERT_FALSE(p);
  EXPECT_NE(p.error().find("pattern too large"), std::string::npos) << p.error();
}

// What came from the user is shown escaped: a pattern cannot write to the
// terminal through hangtrace's error.
TEST(Pattern, TheRefusedPatternIsShownEscaped) {
  auto p = Pattern::compile("x\x1b]0;owned\x07(", "--match");
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error().find('\x1b'), std::string::npos) << p.error();
  EXPECT_NE(p.error().find("\\x1b]0;owned\\x07("), std::string::npos) << p.error();
}

}  // namespace
}  // namespace hangtrace
