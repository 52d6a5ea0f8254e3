// The on-CPU samples' keys and bounds (hangtrace/cpu_samples.h).
#include "hangtrace/cpu_samples.h"

#include <gtest/gtest.h>

#include "frames.h"

namespace hangtrace {
namespace {

using testing::py;

TEST(CpuSamples, PythonFramesAreFileLineFunctionWithTheBasename) {
  EXPECT_EQ(sample_frame(py("Dataset.decode", "/srv/job/dataset.py", 88)), "dataset.py:88 Dataset.decode");
  EXPECT_EQ(sample_frame(py("f", "dataset.py", 0)), "dataset.py f");
  EXPECT_EQ(sample_frame(py("", "", 3)), "?:3 ?");
}

TEST(CpuSamples, NativeFramesAreTheFunctionElseModuleOffsetElseAddress) {
  UserFrame f;
  f.addr = 0x7f0000001234;
  EXPECT_EQ(sample_frame(f), "0x7f0000001234");
  f.file = "/usr/lib/x86_64-linux-gnu/libc.so.6";
  f.module_offset = 0x1234;
  EXPECT_EQ(sample_frame(f), "libc.so.6+0x1234");
  f.function = "memcpy";
  EXPECT_EQ(sample_frame(f), "memcpy");
  EXPECT_EQ(kernel_sample_frame("copy_user_generic", 1), "copy_user_generic_[k]");
  EXPECT_EQ(kernel_sample_frame("", 0xffffffff81000000ull), "0xffffffff81000000_[k]");
}

TEST(CpuSamples, HostileNamesCannotSplitOrBreakTheKey) {
  UserFrame f;
  f.function = "a;b\nc\td";
  EXPECT_EQ(sample_frame(f), "a:b c d");
  EXPECT_EQ(sample_frame(py("f;g", "x;y.py", 1)), "x:y.py:1 f:g");
}

TEST(CpuSamples, KeysAreOutermostFirst) {
  EXPECT_EQ(sample_key({"leaf", "mid", "root"}), "root;mid;leaf");
  EXPECT_EQ(sample_key({"only"}), "only");
  EXPECT_EQ(sample_key({}), "[unknown]");
}

TEST(CpuSamples, CountsAreBoundedPerThreadAndInThreads) {
  CpuSamples s;
  add_cpu_sample(s, 7, "a", 2);
  add_cpu_sample(s, 7, "a");
  EXPECT_EQ(s.by_tid[7]["a"], 3u);
  for (size_t i = 0; i < kMaxSampleStacksPerThread + 10; ++i) add_cpu_sample(s, 8, "s" + std::to_string(i));
  EXPECT_EQ(s.by_tid[8].size(), kMaxSampleStacksPerThread + 1);  // the kept ones and [other]
  EXPECT_EQ(s.by_tid[8][kOtherStack], 10u);
  add_cpu_sample(s, 8, "s0");  // a kept stack still counts as itself
  EXPECT_EQ(s.by_tid[8]["s0"], 2u);
  for (int tid = 100; s.by_tid.size() < kMaxSampledThreads; ++tid) add_cpu_sample(s, tid, "x");
  add_cpu_sample(s, 1'000'000, "x");
  EXPECT_EQ(s.by_tid.size(), kMaxSampledThreads);
  EXPECT_FALSE(s.by_tid.count(1'000'000));
}

TEST(CpuSamples, ParsesTheOnlineCpuList) {
  EXPECT_EQ(parse_cpu_list("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(parse_cpu_list("0\n"), (std::vector<int>{0}));
  EXPECT_TRUE(parse_cpu_list("").empty());
  EXPECT_TRUE(parse_cpu_list("3-1").empty());
  EXPECT_TRUE(parse_cpu_list("a-b").empty());
  EXPECT_TRUE(parse_cpu_list("0,,1").empty());
  EXPECT_TRUE(parse_cpu_list("0-99999").empty());
}

}  // namespace
}  // namespace hangtrace
