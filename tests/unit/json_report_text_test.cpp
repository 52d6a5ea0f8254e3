// render_json_text (the --json file, built one process at a time) is byte for
// byte render_json(...).dump(2) and a newline.
#include <gtest/gtest.h>

#include "hangtrace/analysis.h"
#include "hangtrace/report.h"
#include "frames.h"
#include "snapshot_builder.h"

namespace hangtrace {
namespace {

using testing::mutex_bytes;
using testing::sem_bytes;
using testing::SnapshotBuilder;

std::string whole_tree(const Snapshot& s, const Diagnosis& d, const LiveObservation* live = nullptr) {
  return render_json(s, d, live).dump(2) + "\n";
}

TEST(JsonReportText, SameTextAsTheWholeTree) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target).cmdline = "python3 train.py --note \"a\nb\" \xc3\xa9";
  b.proc(200, 100, ProcessRole::Descendant).rank = 0;
  b.proc(201, 100, ProcessRole::Descendant);
  b.futex_wait(100, 101, 0x9000, false, sem_bytes(1, 128));
  b.futex_wait(200, 200, 0x4000, false, mutex_bytes(2, 101));
  ThreadInfo& t = b.futex_wait(201, 201, 0x4000, false, mutex_bytes(2, 101));
  t.native_stack = {testing::native("__futex_abstimed_wait_common", "/usr/lib/x86_64-linux-gnu/libc.so.6",
                                    0x7f0000001234, 0x1234, "00ff")};
  t.python_stack = {testing::py("Dataset.__getitem__", "/tmp/train.py", 42)};
  b.s.limitations.push_back("a limitation with a tab\tand a newline\n");
  Diagnosis d = diagnose(b.s);
  EXPECT_EQ(render_json_text(b.s, d), whole_tree(b.s, d));
  LiveObservation live;
  live.duration_s = 1;
  EXPECT_EQ(render_json_text(b.s, d, &live), whole_tree(b.s, d, &live));
}

TEST(JsonReportText, NoProcesses) {
  Snapshot s;
  s.target_pid = 7;
  Diagnosis d = diagnose(s);
  EXPECT_EQ(render_json_text(s, d), whole_tree(s, d));
}

}  // namespace
}  // namespace hangtrace
