// The stopped rule on hand-built snapshots: a whole process stopped by a
// signal, one held in a ptrace stop by a debugger, and a single traced
// thread of a running process.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "hangtrace/analysis.h"
#include "hangtrace/jobs.h"
#include "snapshot_builder.h"
#include "temp_dir.h"

namespace hangtrace {
namespace {

using testing::of_kind;
using testing::SnapshotBuilder;

// A launcher with two ranks; rank 1's threads in `state`.
SnapshotBuilder two_ranks(char state, int tracer = 0) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target, "launcher");
  b.thread(100, 100);
  for (int r = 0; r < 2; ++r) {
    ProcessInfo& p = b.proc(101 + r, 100, ProcessRole::Descendant);
    p.rank = r;
    p.world_size = 2;
  }
  b.thread(101, 101);
  for (int tid : {102, 110, 111}) {
    ThreadInfo& t = b.thread(102, tid, state);
    if (tracer) {
      t.tracer_pid = tracer;
      t.tracer_comm = "gdb";
    }
  }
  return b;
}

TEST(StoppedRule, AWholeRankStoppedBySignalLeadsTheVerdict) {
  Diagnosis d = diagnose(two_ranks('T').s);
  auto found = of_kind(d, FindingKind::Stopped);
  ASSERT_EQ(found.size(), 1u);
  const Finding& f = *found.front();
  EXPECT_EQ(f.severity, Severity::Critical);
  EXPECT_EQ(f.pids, (std::vector<int>{102}));
  EXPECT_EQ(f.tids, (std::vector<int>{102, 110, 111}));
  EXPECT_NE(f.summary.find("rank 1 102"), std::string::npos) << f.summary;
  EXPECT_NE(f.summary.find("by a signal"), std::string::npos) << f.summary;
  EXPECT_NE(f.advice.front().find("kill -CONT 102"), std::string::npos);
  EXPECT_TRUE(f.details["whole_process"].get<bool>());
  EXPECT_TRUE(f.details["tracer_pid"].is_null());
  EXPECT_EQ(d.findings.front().kind, FindingKind::Stopped);
  EXPECT_EQ(exit_status_for(d), 2);
}

TEST(StoppedRule, APtraceStopNamesTheTracer) {
  Diagnosis d = diagnose(two_ranks('t', 4242).s);
  auto found = of_kind(d, FindingKind::Stopped);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_NE(found.front()->summary.find("in a ptrace stop by its tracer 4242 (gdb)"), std::string::npos)
      << found.front()->summary;
  EXPECT_EQ(found.front()->details["tracer_pid"], 4242);
  EXPECT_NE(found.front()->advice.front().find("detach"), std::string::npos);
}

TEST(StoppedRule, OneTracedThreadOfARunningProcessIsAWarning) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  b.thread(100, 100);
  ThreadInfo& t = b.thread(100, 101, 't');
  t.tracer_pid = 300;
  Diagnosis d = diagnose(b.s);
  auto found = of_kind(d, FindingKind::Stopped);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found.front()->severity, Severity::Warning);
  EXPECT_NE(found.front()->summary.find("1 of 2 threads"), std::string::npos) << found.front()->summary;
}

TEST(StoppedRule, NothingStoppedNothingSaid) {
  Diagnosis d = diagnose(two_ranks('S').s);
  EXPECT_TRUE(of_kind(d, FindingKind::Stopped).empty());
}

// A cgroup v1 freezer leaves its tasks in D (v2: S): only the cgroup says
// they are frozen.
TEST(StoppedRule, ARankFrozenByTheCgroupFreezerIsStoppedNotInIo) {
  SnapshotBuilder b = two_ranks('D');
  b.find(102)->frozen_cgroup = "freezer:/batch/job7";
  Diagnosis d = diagnose(b.s);
  auto found = of_kind(d, FindingKind::Stopped);
  ASSERT_EQ(found.size(), 1u);
  const Finding& f = *found.front();
  EXPECT_EQ(d.findings.front().kind, FindingKind::Stopped);
  EXPECT_EQ(f.tids, (std::vector<int>{102, 110, 111}));
  EXPECT_NE(f.summary.find("frozen by the cgroup freezer of /batch/job7"), std::string::npos) << f.summary;
  EXPECT_NE(f.advice.front().find("echo THAWED > /sys/fs/cgroup/freezer/batch/job7/freezer.state"),
            std::string::npos)
      << f.advice.front();
  EXPECT_EQ(f.details["frozen_cgroup"], "freezer:/batch/job7");
  EXPECT_EQ(d.graph.threads.at(110).activity, Activity::Stopped);
}

TEST(StoppedRule, FrozenCgroupFromTheFreezerFiles) {
  testing::TempDir root{"ht-cgroup"};
  namespace fs = std::filesystem;
  auto put = [&](const std::string& rel, const std::string& text) {
    fs::create_directories((root.path / rel).parent_path());
    std::ofstream(root.path / rel) << text;
  };
  put("freezer/job/a/freezer.state", "FROZEN\n");
  put("freezer/job/b/freezer.state", "THAWED\n");
  put("freezer/job/c/freezer.state", "FREEZING\n");
  put("unified/pod/x/cgroup.events", "populated 1\nfrozen 1\n");
  put("unified/pod/y/cgroup.events", "populated 1\nfrozen 0\n");
  const std::string r = root.path.string();
  using jobs::frozen_cgroup_of;
  EXPECT_EQ(frozen_cgroup_of("7:freezer:/job/a\n0::/user.slice\n", r), "freezer:/job/a");
  EXPECT_EQ(frozen_cgroup_of("7:freezer:/job/b\n", r), "");
  EXPECT_EQ(frozen_cgroup_of("7:freezer:/job/c\n", r), "freezer:/job/c");
  EXPECT_EQ(frozen_cgroup_of("0::/pod/x\n", r), "/pod/x");
  EXPECT_EQ(frozen_cgroup_of("0::/pod/y\n", r), "");
  // Hostile or foreign paths are not followed: outside this cgroup
  // namespace ("/../.."), relative, a missing cgroup, nothing at all.
  EXPECT_EQ(frozen_cgroup_of("7:freezer:/../freezer/job/a\n", r), "");
  EXPECT_EQ(frozen_cgroup_of("7:freezer:job/a\n", r), "");
  EXPECT_EQ(frozen_cgroup_of("7:freezer:/job/gone\n", r), "");
  EXPECT_EQ(frozen_cgroup_of("", r), "");
  EXPECT_EQ(frozen_cgroup_of("garbage without colons", r), "");
}

}  // namespace
}  // namespace hangtrace
