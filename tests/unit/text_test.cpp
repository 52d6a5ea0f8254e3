// hangtrace/text.h: the one rendering of sizes, durations, symbols and names.
#include <gtest/gtest.h>

#include "hangtrace/text.h"

namespace hangtrace {
namespace {

TEST(Text, Durations) {
  EXPECT_EQ(for_duration(std::nullopt), "for an unknown time");
  EXPECT_EQ(for_duration(12.34), "for 12.3 s");
  EXPECT_EQ(for_duration(150), "for 2.5 min");
  EXPECT_EQ(for_duration(4320), "for 1.2 h");
  EXPECT_EQ(format_seconds(42.3), "42.3 s");
  EXPECT_EQ(format_seconds(150), "150.0 s (2.5 min)");
  EXPECT_EQ(format_short_duration(0.25), "250 ms");
  EXPECT_EQ(format_short_duration(1.5), "1.5 s");
  EXPECT_EQ(format_short_duration(150), "150 s");
  EXPECT_EQ(format_ns(12'000), "12.0 µs");
  EXPECT_EQ(format_ns(3'500'000), "3.5 ms");
  EXPECT_EQ(format_ns(2'000'000'000), "2.0 s");
}

TEST(Text, ClockTimes) {
  EXPECT_EQ(format_utc(1714564800.7), "2024-05-01 12:00:00 UTC");
  EXPECT_EQ(format_utc_clock(1714564803.9), "12:00:03");
  EXPECT_EQ(format_utc_stamp(1714564800), "20240501T120000Z");
}

TEST(Text, Utf8AndXml) {
  EXPECT_EQ(xml_escape("a<b & \"c\"'"), "a&lt;b &amp; &quot;c&quot;&#39;");
  EXPECT_EQ(xml_escape("caf\xc3\xa9"), "caf\xc3\xa9");
  EXPECT_EQ(xml_escape("bad\xff\x01"), "bad? ") << "invalid UTF-8 and control characters are replaced";
  EXPECT_EQ(utf8_length("caf\xc3\xa9"), 4u);
  EXPECT_EQ(utf8_prefix("caf\xc3\xa9s", 4), "caf\xc3\xa9");
  EXPECT_EQ(utf8_sequence("\xe2\x82", 0), 0u) << "a cut sequence is not one";
}

TEST(Text, TerminalEscape) {
  EXPECT_EQ(terminal_escape("python3 train.py caf\xc3\xa9 \xe2\x82\xac"),
            "python3 train.py caf\xc3\xa9 \xe2\x82\xac");
  EXPECT_EQ(terminal_escape("w\x1b]0;owned\x07x"), "w\\x1b]0;owned\\x07x") << "ESC and BEL from a comm";
  EXPECT_EQ(terminal_escape("a\rb\nc\x7f"), "a\\x0db\\x0ac\\x7f");
  EXPECT_EQ(terminal_escape("\xc2\x9b"
                            "2J"),
            "\\xc2\\x9b2J")
      << "C1 CSI, UTF-8 encoded";
  EXPECT_EQ(terminal_escape("bad\xff\xc0\xaf"), "bad\\xff\\xc0\\xaf") << "invalid and overlong bytes";
  EXPECT_EQ(terminal_escape("\xed\xa0\x80"), "\\xed\\xa0\\x80") << "a UTF-16 surrogate";
  EXPECT_EQ(terminal_escape("cut\xe2\x82"), "cut\\xe2\\x82");
}

TEST(Text, BasenameOf) {
  EXPECT_EQ(basename_of("/usr/lib/x86_64-linux-gnu/libc.so.6"), "libc.so.6");
  EXPECT_EQ(basename_of("train.py"), "train.py");
  EXPECT_EQ(basename_of("/opt/venv/"), "");
}

TEST(Text, Demangle) {
  EXPECT_EQ(demangle("_ZN3foo3barEv"), "foo::bar()");
  EXPECT_EQ(demangle("__libc_start_main@@GLIBC_2.34"), "__libc_start_main");
  EXPECT_EQ(demangle("_ZN3foo3barEv@GLIBCXX_3.4"), "foo::bar()");
  EXPECT_EQ(demangle("cuLaunchKernel"), "cuLaunchKernel");
  EXPECT_EQ(demangle("_Znot_valid"), "_Znot_valid");
  EXPECT_EQ(demangle("_ZN3foo3barEv", 8), "foo::...");
}

// A symbol name is the target's: one nested past any real name (1 MiB of
// pointer-to) is shown cut, not handed to the recursive demangler; a long
// one under the bound (400 parameters; libstdc++'s demangler has its own
// bound near 512) is still demangled.
TEST(Text, DemangleLeavesANamePastTheBoundAsItIs) {
  const std::string nested = "_Z1fP" + std::string(size_t{1} << 20, 'P') + "v";
  EXPECT_EQ(demangle(nested, 200), nested.substr(0, 197) + "...");
  std::string wide = "_Z1f";
  for (int i = 0; i < 400; ++i) wide += "Pi";
  ASSERT_LT(wide.size(), kMaxDemangledBytes);
  EXPECT_EQ(demangle(wide, 12), "f(int*, i...");
}

TEST(Text, ErrnoAndSignals) {
  EXPECT_EQ(errno_text(2), "No such file or directory");
  EXPECT_EQ(errno_text(-2), "No such file or directory") << "libbpf's negated errno";
  EXPECT_STREQ(signal_name(7), "SIGBUS");
  EXPECT_EQ(signal_name(64), nullptr);
}

TEST(Text, EnumNames) {
  for (ProcessRole r : {ProcessRole::Target, ProcessRole::Descendant, ProcessRole::Peer})
    EXPECT_EQ(role_from_name(role_name(r)), r);
  EXPECT_EQ(tcp_state_name(2), "SYN_SENT");
  EXPECT_EQ(tcp_state_name(12), "NEW_SYN_RECV");
  EXPECT_EQ(tcp_state_name(0), "STATE_0");
}

TEST(Text, NumberRunsAreAscendingEachOnce) {
  EXPECT_EQ(number_runs({0, 1, 2, 4, 7, 6}), "0-2, 4, 6-7");
  EXPECT_EQ(number_runs({5, 5, 3}), "3, 5");
  EXPECT_EQ(number_runs({}), "");
  EXPECT_EQ(number_runs({2147483647, 2147483646, 7}), "7, 2147483646-2147483647");
}

TEST(Text, CommandWordsAreBoundedViewsWithoutEmptyOnes) {
  using V = std::vector<std::string_view>;
  EXPECT_EQ(command_words("python3 -m  torch.distributed.run --nnodes 2 ", 16),
            (V{"python3", "-m", "torch.distributed.run", "--nnodes", "2"}));
  EXPECT_EQ(command_words("a b c d", 2), (V{"a", "b"}));
  EXPECT_TRUE(command_words("", 8).empty());
  EXPECT_TRUE(command_words("   ", 8).empty());
  EXPECT_TRUE(command_words("x", 0).empty());
}

}  // namespace
}  // namespace hangtrace
