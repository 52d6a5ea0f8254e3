// Who could end a wait, kept per process: the releasers of a lock any thread
// of its process may post are one entry, not a list of its threads, and the
// rules read them without listing them per object -- so a process with
// 10,000 threads parked on their own private futexes is diagnosed as three
// are, in time and memory linear in its threads.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "hangtrace/analysis.h"
#include "hangtrace/report.h"
#include "snapshot_builder.h"

namespace hangtrace {
namespace {

using testing::sem_bytes;
using testing::SnapshotBuilder;

// main 100 waits for its worker 200, whose main thread waits on a copy of
// a lock (a private semaphore with no owner) and whose `helpers` other
// threads are each parked on a private futex of their own: nothing in 200
// can move on, so nothing can post its lock.
SnapshotBuilder closed_worker(int helpers) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  b.proc(200, 100, ProcessRole::Descendant);
  ThreadInfo& main = b.thread(100, 100);
  testing::in_syscall(main, HT_NR_wait4, {200, 0, 0});
  b.futex_wait(200, 200, 0x4000, false, sem_bytes(1, 128));
  b.find(200)->threads.reserve(static_cast<size_t>(helpers) + 1);
  for (int i = 0; i < helpers; ++i) b.futex_wait(200, 1000 + i, 0x100000 + 0x40 * uint64_t(i), false);
  return b;
}

std::vector<std::string> kinds(const Diagnosis& d) {
  std::vector<std::string> out;
  for (const auto& f : d.findings) out.push_back(finding_kind_name(f.kind));
  return out;
}

TEST(Releasers, ProcessEntryStandsForItsLiveThreadsButTheWaiters) {
  SnapshotBuilder b = closed_worker(2);  // threads 200, 1000, 1001
  b.running(200, 1002);
  b.thread(200, 1003, 'Z');  // a zombie thread releases nothing
  WaitGraph g = build_wait_graph(b.s);
  EXPECT_EQ(g.live_threads.at(200), (std::vector<int>{200, 1000, 1001, 1002}));
  const WaitObject& own = g.objects.at(g.threads.at(1000).objects.at(0));
  EXPECT_TRUE(own.releasers.empty());
  ASSERT_EQ(own.releaser_processes.size(), 1u);
  EXPECT_EQ(own.releaser_processes[0].pid, 200);
  EXPECT_EQ(own.releaser_processes[0].except, (std::vector<int>{1000}));
  EXPECT_EQ(releaser_count(own), 3u);
  EXPECT_EQ(releasers_of(g, own), (std::vector<int>{200, 1001, 1002}));
  EXPECT_EQ(first_releaser(g, own), 200);
  EXPECT_TRUE(is_releaser(g, own, 1002));
  EXPECT_FALSE(is_releaser(g, own, 1000)) << "a waiter cannot release what it waits on";
  EXPECT_FALSE(is_releaser(g, own, 1003)) << "nor can a dead thread";
  EXPECT_FALSE(is_releaser(g, own, 100)) << "nor a thread of another process";
  EXPECT_EQ(g.depends_on(1000), (std::vector<int>{200, 1001, 1002}));
  EXPECT_EQ(g.depends_on(100), (std::vector<int>{200, 1000, 1001, 1002})) << "its child, by its exit";
}

TEST(Releasers, SingleThreadWaitingOnItsOwnFutexHasNone) {
  SnapshotBuilder b(300);
  b.proc(300, 1, ProcessRole::Target);
  b.futex_wait(300, 300, 0x4000, false);
  WaitGraph g = build_wait_graph(b.s);
  const WaitObject& o = g.objects.at(g.threads.at(300).objects.at(0));
  EXPECT_EQ(releaser_count(o), 0u);
  EXPECT_TRUE(o.releaser_processes.empty()) << "an entry standing for nobody is dropped";
  EXPECT_FALSE(first_releaser(g, o).has_value());
}

TEST(Releasers, WalkReachesEachThreadOnceAndHonoursTheFilter) {
  SnapshotBuilder b = closed_worker(3);  // 200, 1000, 1001, 1002
  WaitGraph g = build_wait_graph(b.s);
  const WaitObject& of_1000 = g.objects.at(g.threads.at(1000).objects.at(0));
  const WaitObject& of_1001 = g.objects.at(g.threads.at(1001).objects.at(0));
  ReleaserWalk walk(g, [](int tid) { return tid != 1002; });
  walk.mark(1000);
  EXPECT_EQ(walk.expand(of_1000), (std::vector<int>{200, 1001})) << "members only, each once";
  EXPECT_TRUE(walk.expand(of_1001).empty()) << "1000 reached before, 1002 not a member";
  ReleaserWalk other(g);
  EXPECT_TRUE(other.expand(of_1000, [](int pid) { return pid != 200; }).empty());
  EXPECT_EQ(other.expand(of_1000), (std::vector<int>{200, 1001, 1002}));

  ReleaserCursor both(g, {&of_1000, &of_1001}, 200);
  std::vector<int> seen;
  while (auto r = both.next()) seen.push_back(*r);
  EXPECT_EQ(seen, (std::vector<int>{1000, 1001, 1002})) << "the union, ascending, once each, 200 skipped";
}

TEST(Releasers, TenThousandParkedThreadsAreDiagnosedAsThree) {
  const Diagnosis small = diagnose(closed_worker(2).s);
  const int helpers = 9'999;
  const SnapshotBuilder big_job = closed_worker(helpers);
  const Diagnosis big = diagnose(big_job.s);
  EXPECT_EQ(kinds(big), kinds(small));
  for (const Diagnosis* d : {&small, &big}) {
    ASSERT_FALSE(d->findings.empty());
    const Finding& top = d->findings.front();
    EXPECT_EQ(finding_kind_name(top.kind), std::string("orphaned-lock"));
    EXPECT_EQ(top.confidence, Confidence::Certain) << "every thread that could post it is stuck for good";
    EXPECT_EQ(d->verdict.status, "hang");
  }
  EXPECT_EQ(big.findings.front().tids.size(), size_t(helpers) + 1)
      << "every stuck thread of the closed worker";

  // One entry per object: the graph holds O(threads) releaser ids, not n * n.
  size_t named = 0, entries = 0, excepted = 0;
  for (const auto& [id, o] : big.graph.objects) {
    named += o.releasers.size();
    entries += o.releaser_processes.size();
    for (const auto& rp : o.releaser_processes) excepted += rp.except.size();
  }
  EXPECT_EQ(named, 0u);
  EXPECT_EQ(entries, size_t(helpers) + 2) << "the locks, and the child main waits for";
  EXPECT_EQ(excepted, size_t(helpers) + 1) << "each lock's own waiter";
  const WaitObject& one = big.graph.objects.at(big.graph.threads.at(1500).objects.at(0));
  EXPECT_EQ(releaser_count(one), size_t(helpers)) << "the others all could post it";

  // And so does the report: ~1.2 KiB a thread, where listing every
  // releaser of every lock was 10,000 ids per object (~60 MB more here).
  const std::string text = render_json_text(big_job.s, big, nullptr);
  EXPECT_LT(text.size(), size_t(helpers) * 2048) << text.size() << " bytes";
}

}  // namespace
}  // namespace hangtrace
