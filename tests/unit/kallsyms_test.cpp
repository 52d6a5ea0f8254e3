#include "hangtrace/kallsyms.h"

#include <gtest/gtest.h>

namespace hangtrace {
namespace {

// Unsorted on purpose, with data symbols, an alias, padding and a module.
constexpr const char* kFixture =
    "ffffffff81100000 T futex_wait\n"
    "ffffffff810ffff0 t __pfx_futex_wait\n"
    "ffffffff81000000 T _stext\n"
    "ffffffff81000000 T _text\n"
    "ffffffff81100200 t futex_wait_queue\n"
    "ffffffff81100400 W weak_helper\n"
    "ffffffff82000000 D some_data\n"
    "ffffffff81200000 t anon_pipe_read\n"
    "ffffffff81200500 T vfs_read\n"
    "ffffffffc0001000 t nvidia_poll\t[nvidia]\n"
    "ffffffffc0001100 t nvidia_ioctl\t[nvidia]\n"
    "\n"
    "garbage line\n";

TEST(KernelSymbols, ParsesTextAndWeakSymbolsOnly) {
  auto syms = KernelSymbols::parse(kFixture);
  ASSERT_TRUE(syms.ok()) << syms.error();
  // _stext (alias _text dropped), futex_wait, futex_wait_queue, weak_helper,
  // anon_pipe_read, vfs_read, nvidia_poll, nvidia_ioctl.
  EXPECT_EQ(syms->size(), 8u);
}

TEST(KernelSymbols, SymbolizesWithOffsetAndSize) {
  auto syms = KernelSymbols::parse(kFixture);
  ASSERT_TRUE(syms.ok()) << syms.error();
  EXPECT_EQ(syms->symbolize(0xffffffff81100000), "futex_wait+0x0/0x200");
  EXPECT_EQ(syms->symbolize(0xffffffff8110025f), "futex_wait_queue+0x5f/0x200");
  EXPECT_EQ(syms->function(0xffffffff8110025f), "futex_wait_queue");
  EXPECT_EQ(syms->function(0xffffffff81200393), "anon_pipe_read");
  EXPECT_EQ(syms->function(0xffffffff81000010), "_stext");
  EXPECT_EQ(syms->function(0xffffffff81100410), "weak_helper");
}

TEST(KernelSymbols, PaddingBelongsToThePrecedingFunction) {
  auto syms = KernelSymbols::parse(kFixture);
  ASSERT_TRUE(syms.ok()) << syms.error();
  // A return address right after a noreturn call at the end of _stext.
  EXPECT_EQ(syms->function(0xffffffff810ffff4), "_stext");
}

TEST(KernelSymbols, ModuleSymbols) {
  auto syms = KernelSymbols::parse(kFixture);
  ASSERT_TRUE(syms.ok()) << syms.error();
  EXPECT_EQ(syms->function(0xffffffffc0001010), "nvidia_poll");
  EXPECT_EQ(syms->symbolize(0xffffffffc0001104), "nvidia_ioctl+0x4");
}

TEST(KernelSymbols, UnknownAddresses) {
  auto syms = KernelSymbols::parse(kFixture);
  ASSERT_TRUE(syms.ok()) << syms.error();
  EXPECT_EQ(syms->symbolize(0x1000), "0x1000");
  EXPECT_EQ(syms->function(0x1000), "");
  // Far past the last symbol.
  EXPECT_EQ(syms->function(0xffffffffc8000000), "");
  EXPECT_EQ(syms->symbolize(0xffffffffc8000000), "0xffffffffc8000000");
}

TEST(KernelSymbols, AllZeroAddressesIsAnError) {
  auto syms = KernelSymbols::parse(
      "0000000000000000 T _stext\n"
      "0000000000000000 T futex_wait\n"
      "0000000000000000 t anon_pipe_read\n");
  ASSERT_FALSE(syms.ok());
  EXPECT_NE(syms.error().find("all addresses are zero"), std::string::npos) << syms.error();
}

TEST(KernelSymbols, EmptyTextIsAnError) { EXPECT_FALSE(KernelSymbols::parse("").ok()); }

TEST(KernelSymbols, LoadMissingFileIsAnError) {
  auto syms = KernelSymbols::load("/nonexistent-proc-root");
  ASSERT_FALSE(syms.ok());
  EXPECT_EQ(syms.error().rfind("failed to read /nonexistent-proc-root/kallsyms", 0), 0u) << syms.error();
}

}  // namespace
}  // namespace hangtrace
