// hangtrace merge on hand-built bundles: one per rank, as if from several
// hosts, with the frames a real torch 1.13 rank shows.
#include "frames.h"
#include "hangtrace/merge.h"
#include "hangtrace/text.h"
#include "snapshot_builder.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>

namespace hangtrace {
namespace {

constexpr const char* kC10d = "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py";
constexpr const char* kTrain = "/job/train.py";
constexpr const char* kCmd = "/usr/bin/python3 -u /job/train.py --epochs 3";
constexpr double kSampled = 1'700'000'000.0;  // 2023-11-14 22:13:20 UTC
constexpr int64_t kFutex = HT_NR_futex;
constexpr int64_t kClockNanosleep = HT_NR_clock_nanosleep;

using testing::py;

ThreadInfo blocked_thread(int tid, double blocked_s, int64_t nr) {
  if (nr == kFutex)  // FUTEX_WAIT_BITSET_PRIVATE, no timeout
    return testing::thread_in_syscall(tid, "python3", blocked_s, nr,
                                      {0x7f0000001000ull, testing::kFutexWaitBitsetPrivate});
  return testing::thread_in_syscall(tid, "python3", blocked_s, nr, {});
}

// A rank's main thread inside all_reduce, blocked for `blocked_s`.
ThreadInfo in_all_reduce(int tid, double blocked_s, const std::string& op = "all_reduce") {
  ThreadInfo t = blocked_thread(tid, blocked_s, kFutex);
  t.python_stack = {py(op, kC10d, 1536), py("train_step", kTrain, 30), py("<module>", kTrain, 90)};
  return t;
}

// A rank that left the loop: asleep in wait_for_checkpoint_upload.
ThreadInfo uploading(int tid, double blocked_s) {
  ThreadInfo t = blocked_thread(tid, blocked_s, kClockNanosleep);
  t.python_stack = {py("wait_for_checkpoint_upload", kTrain, 64), py("<module>", kTrain, 92)};
  return t;
}

LoadedBundle rank_bundle(int rank, int world_size, const std::string& host, int pid, ThreadInfo main,
                         double last_progress = 0, const std::string& cmdline = kCmd) {
  ProcessInfo p;
  p.pid = pid;
  p.ppid = 1;
  p.comm = "python3";
  p.cmdline = cmdline;
  p.state = 'S';
  p.is_python = true;
  p.role = ProcessRole::Target;
  p.rank = rank;
  p.world_size = world_size;
  p.local_rank = 0;
  main.tid = pid;
  p.threads = {main};
  LoadedBundle b;
  b.path = fmt::format("/bundles/{}-{}", host, pid);
  b.snapshot.hostname = host;
  b.snapshot.target_pid = pid;
  b.snapshot.taken_at_unix = kSampled;
  b.snapshot.sampled_at_unix = kSampled;
  b.snapshot.processes = {p};
  b.meta.hostname = host;
  b.meta.job_pid = pid;
  b.meta.job_cmdline = cmdline;
  b.meta.rank = rank;
  b.meta.world_size = world_size;
  b.meta.last_progress_unix = last_progress;
  return b;
}

const MergedRank* find_rank(const MergedJob& job, int rank) {
  for (const auto& r : job.ranks)
    if (r.rank == rank) return &r;
  return nullptr;
}

TEST(Merge, NamesTheRankAbsentFromTheCollective) {
  MergedReport m = merge_bundles({rank_bundle(0, 2, "node-a", 200, in_all_reduce(0, 40)),
                                  rank_bundle(1, 2, "node-b", 300, uploading(0, 41))});
  ASSERT_EQ(m.jobs.size(), 1u);
  const MergedJob& job = m.jobs[0];
  EXPECT_TRUE(m.hang);
  EXPECT_EQ(merge_exit_status(m), 2);
  EXPECT_EQ(job.collective, "all_reduce");
  ASSERT_EQ(job.waiting.size(), 1u);
  EXPECT_EQ(job.ranks[job.waiting[0]].rank, 0);
  ASSERT_EQ(job.absent.size(), 1u);
  EXPECT_EQ(job.absent[0].rank, 1);
  EXPECT_TRUE(job.absent[0].has_bundle);
  EXPECT_EQ(job.absent[0].reason, "not in any collective");
  EXPECT_NE(job.absent[0].doing.find("wait_for_checkpoint_upload (/job/train.py:64)"), std::string::npos)
      << job.absent[0].doing;
  EXPECT_TRUE(m.warnings.empty());

  const MergedRank* r0 = find_rank(job, 0);
  ASSERT_NE(r0, nullptr);
  EXPECT_TRUE(r0->in_collective);
  EXPECT_EQ(r0->host, "node-a");
  ASSERT_TRUE(r0->collective_blocked_s);
  EXPECT_DOUBLE_EQ(*r0->collective_blocked_s, 40);
  EXPECT_DOUBLE_EQ(r0->collective_since_unix, kSampled - 40);

  // rank 1 (host node-b, pid 300) never joined all_reduce that rank 0 waits in since 22:12:40 UTC; it is in
  // wait_for_checkpoint_upload (/job/train.py:64), sleeps
  EXPECT_EQ(
      m.verdict.rfind("rank 1 (host node-b, pid 300) never joined all_reduce that rank 0 waits in since "
                      "22:12:40 UTC; it is in wait_for_checkpoint_upload (/job/train.py:64)",
                      0),
      0u)
      << m.verdict;

  nlohmann::json j = merged_report_to_json(m);
  EXPECT_EQ(j["schema"], kMergeSchema);
  EXPECT_EQ(j["verdict"]["status"], "hang");
  EXPECT_EQ(j["jobs"][0]["collective"], "all_reduce");
  EXPECT_EQ(j["jobs"][0]["waiting"], nlohmann::json::array({0}));
  EXPECT_EQ(j["jobs"][0]["absent"][0]["rank"], 1);
  EXPECT_EQ(j["jobs"][0]["absent"][0]["host"], "node-b");
  EXPECT_EQ(j["jobs"][0]["absent"][0]["pid"], 300);
  EXPECT_EQ(j["jobs"][0]["absent"][0]["where"], "wait_for_checkpoint_upload (/job/train.py:64)");
  EXPECT_EQ(j["jobs"][0]["ranks"][0]["collective"]["op"], "all_reduce");
  EXPECT_TRUE(j["jobs"][0]["ranks"][1]["collective"].is_null());

  std::string text = render_merged_text(m);
  EXPECT_NE(text.find("missing from all_reduce:"), std::string::npos) << text;
  EXPECT_NE(text.find("verdict: HANG: rank 1 (host node-b, pid 300)"), std::string::npos) << text;
}

TEST(Merge, ARankWithoutABundleIsAbsent) {
  MergedReport m = merge_bundles({rank_bundle(0, 4, "a", 200, in_all_reduce(0, 30)),
                                  rank_bundle(1, 4, "b", 300, in_all_reduce(0, 31)),
                                  rank_bundle(2, 4, "c", 400, in_all_reduce(0, 29))});
  ASSERT_EQ(m.jobs.size(), 1u);
  const MergedJob& job = m.jobs[0];
  EXPECT_EQ(job.world_size, 4);
  EXPECT_EQ(job.missing, std::vector<int>{3});
  ASSERT_EQ(job.absent.size(), 1u);
  EXPECT_EQ(job.absent[0].rank, 3);
  EXPECT_FALSE(job.absent[0].has_bundle);
  EXPECT_EQ(job.absent[0].reason, "no bundle from rank 3 (of 4)");
  EXPECT_EQ(job.waiting.size(), 3u);
  EXPECT_TRUE(m.hang);
  EXPECT_NE(m.verdict.find("rank 3 (no bundle) never joined all_reduce that ranks 0, 1, 2 wait in since"),
            std::string::npos)
      << m.verdict;
  EXPECT_NE(m.verdict.find("no bundle from rank 3 (of 4)"), std::string::npos) << m.verdict;
  // Since the earliest: rank 1 blocked 31 s.
  EXPECT_DOUBLE_EQ(job.waiting_since_unix, kSampled - 31);
}

TEST(Merge, NoHangWhenEveryRankIsInTheCollective) {
  MergedReport m = merge_bundles(
      {rank_bundle(0, 2, "a", 200, in_all_reduce(0, 30)), rank_bundle(1, 2, "b", 300, in_all_reduce(0, 31))});
  EXPECT_FALSE(m.hang);
  EXPECT_EQ(merge_exit_status(m), 0);
  EXPECT_TRUE(m.jobs[0].absent.empty());
  EXPECT_NE(m.verdict.find("none is missing"), std::string::npos) << m.verdict;
}

TEST(Merge, ARankInAnotherCollectiveIsAbsentFromTheOneTheOthersAreIn) {
  MergedReport m = merge_bundles({rank_bundle(0, 3, "a", 200, in_all_reduce(0, 30)),
                                  rank_bundle(1, 3, "b", 300, in_all_reduce(0, 30)),
                                  rank_bundle(2, 3, "c", 400, in_all_reduce(0, 20, "barrier"))});
  const MergedJob& job = m.jobs[0];
  EXPECT_EQ(job.collective, "all_reduce");
  ASSERT_EQ(job.absent.size(), 1u);
  EXPECT_EQ(job.absent[0].rank, 2);
  EXPECT_EQ(job.absent[0].reason, "in barrier, not all_reduce");
  EXPECT_TRUE(m.hang);
}

TEST(Merge, FirstToStallIsTheEarliestLastProgress) {
  // Rank 1's bundle knows when its job stopped progressing; rank 0's does not,
  // so its main thread's blocked time says when it stalled.
  MergedReport m = merge_bundles({rank_bundle(0, 2, "a", 200, in_all_reduce(0, 40)),
                                  rank_bundle(1, 2, "b", 300, uploading(0, 10), kSampled - 100)});
  const MergedJob& job = m.jobs[0];
  ASSERT_TRUE(job.first_stall);
  const MergedRank& first = job.ranks[job.first_stall->index];
  EXPECT_EQ(first.rank, 1);
  EXPECT_DOUBLE_EQ(job.first_stall->unix_time, kSampled - 100);
  EXPECT_EQ(job.first_stall->basis, "last progress (bundle meta)");
  ASSERT_EQ(job.first_stall->evidence.size(), 2u);
  EXPECT_NE(job.first_stall->evidence[0].find("rank 1"), std::string::npos);
  EXPECT_NE(
      job.first_stall->evidence[1].find("rank 0 (host a, pid 200) stalled at 22:12:40 UTC, 60.000 s later "
                                        "(main thread blocked; in all_reduce)"),
      std::string::npos)
      << job.first_stall->evidence[1];

  nlohmann::json j = merged_report_to_json(m);
  EXPECT_EQ(j["jobs"][0]["first_stall"]["rank"], 1);
  EXPECT_EQ(j["jobs"][0]["first_stall"]["host"], "b");
}

TEST(Merge, FirstToStallFromBlockedTimesWithoutMeta) {
  MergedReport m = merge_bundles(
      {rank_bundle(0, 2, "a", 200, in_all_reduce(0, 40)), rank_bundle(1, 2, "b", 300, uploading(0, 75))});
  const MergedJob& job = m.jobs[0];
  ASSERT_TRUE(job.first_stall);
  EXPECT_EQ(job.ranks[job.first_stall->index].rank, 1);
  EXPECT_DOUBLE_EQ(job.first_stall->unix_time, kSampled - 75);
  EXPECT_EQ(job.first_stall->basis, "main thread blocked");
}

TEST(Merge, WarnsWhenBundlesMixJobs) {
  MergedReport m = merge_bundles({rank_bundle(0, 2, "a", 200, in_all_reduce(0, 40)),
                                  rank_bundle(1, 2, "b", 300, uploading(0, 41)),
                                  rank_bundle(0, 8, "c", 400, in_all_reduce(0, 5))});
  ASSERT_EQ(m.jobs.size(), 2u);
  EXPECT_EQ(m.jobs[0].world_size, 2);  // the job with the most ranks first
  EXPECT_EQ(m.jobs[1].world_size, 8);
  ASSERT_FALSE(m.warnings.empty());
  bool mixed = false;
  for (const auto& w : m.warnings) mixed |= w.find("the bundles mix 2 jobs (different world sizes)") == 0;
  EXPECT_TRUE(mixed) << nlohmann::json(m.warnings).dump(1);
  // The 2-rank job's verdict stands; the other job lacks 7 ranks.
  EXPECT_TRUE(m.hang);
  EXPECT_EQ(m.verdict, m.jobs[0].verdict);
  EXPECT_EQ(m.jobs[1].missing.size(), 7u);
}

// Ranks of one job id (job_identity.h) are one job whatever their command
// lines; two jobs of the same script and world size are two by their ids.
TEST(Merge, TheJobIdGroupsRanks) {
  auto with_id = [](LoadedBundle b, const std::string& id) {
    b.snapshot.processes[0].job_id = id;
    b.meta.job_id = id;
    return b;
  };
  MergedReport same = merge_bundles(
      {with_id(rank_bundle(0, 2, "a", 200, in_all_reduce(0, 40)), "llama-run-1"),
       with_id(rank_bundle(1, 2, "b", 300, uploading(0, 41), 0, "/usr/bin/python3 -u /job/train.py --resume"),
               "llama-run-1")});
  ASSERT_EQ(same.jobs.size(), 1u) << nlohmann::json(same.warnings).dump(1);
  EXPECT_EQ(same.jobs[0].job_id, "llama-run-1");
  EXPECT_TRUE(same.hang);
  EXPECT_NE(render_merged_text(same).find("job: llama-run-1, world size 2"), std::string::npos)
      << render_merged_text(same);
  EXPECT_EQ(merged_report_to_json(same)["jobs"][0]["job_id"], "llama-run-1");

  MergedReport two = merge_bundles({with_id(rank_bundle(0, 2, "a", 200, in_all_reduce(0, 40)), "run-a"),
                                    with_id(rank_bundle(1, 2, "b", 300, uploading(0, 41)), "run-b")});
  ASSERT_EQ(two.jobs.size(), 2u);
  bool mixed = false;
  for (const auto& w : two.warnings) mixed |= w.find("the bundles mix 2 jobs (different job ids)") == 0;
  EXPECT_TRUE(mixed) << nlohmann::json(two.warnings).dump(1);
}

TEST(Merge, WarnsOnDuplicateRanks) {
  MergedReport m = merge_bundles({rank_bundle(0, 2, "a", 200, in_all_reduce(0, 40)),
                                  rank_bundle(0, 2, "a2", 250, in_all_reduce(0, 40)),
                                  rank_bundle(1, 2, "b", 300, uploading(0, 41))});
  ASSERT_EQ(m.jobs.size(), 1u);
  EXPECT_EQ(m.jobs[0].ranks.size(), 2u);
  ASSERT_EQ(m.warnings.size(), 1u);
  EXPECT_EQ(m.warnings[0].rfind("rank 0 is in two bundles", 0), 0u) << m.warnings[0];
  EXPECT_EQ(m.jobs[0].ranks[0].host, "a");  // same snapshot time: the first given

  LoadedBundle newer = rank_bundle(0, 2, "a2", 250, in_all_reduce(0, 40));
  newer.snapshot.sampled_at_unix += 60;
  m = merge_bundles({rank_bundle(0, 2, "a", 200, in_all_reduce(0, 40)), newer,
                     rank_bundle(1, 2, "b", 300, uploading(0, 41))});
  ASSERT_EQ(m.warnings.size(), 1u);
  EXPECT_NE(m.warnings[0].find("using the newer one, /bundles/a2-250"), std::string::npos) << m.warnings[0];
  EXPECT_EQ(m.jobs[0].ranks[0].host, "a2");
}

// A host's bundle of its launcher holds the local ranks, and their
// DataLoader workers inherit RANK: the workers are no ranks of their own.
TEST(Merge, ABundleOfALauncherHoldsSeveralRanksAndWorkersAreNotRanks) {
  LoadedBundle host = rank_bundle(0, 3, "a", 200, in_all_reduce(0, 40));
  ProcessInfo launcher;
  launcher.pid = 100;
  launcher.ppid = 1;
  launcher.cmdline = "/usr/bin/python3 -m torch.distributed.run train.py";
  launcher.threads = {blocked_thread(100, 50, 61)};
  host.snapshot.processes[0].ppid = 100;
  host.snapshot.processes[0].role = ProcessRole::Descendant;
  ProcessInfo rank1 = host.snapshot.processes[0];
  rank1.pid = 210;
  rank1.rank = 1;
  rank1.threads = {uploading(210, 20)};
  ProcessInfo worker = host.snapshot.processes[0];
  worker.pid = 220;
  worker.ppid = 200;
  worker.threads = {blocked_thread(220, 40, kFutex)};
  host.snapshot.processes = {launcher, host.snapshot.processes[0], rank1, worker};
  host.snapshot.target_pid = 100;
  host.meta.job_pid = 100;
  host.meta.rank.reset();
  host.meta.last_progress_unix = kSampled - 500;  // the host's, not one rank's
  MergedReport m = merge_bundles({host, rank_bundle(2, 3, "b", 300, in_all_reduce(0, 39))});
  ASSERT_EQ(m.jobs.size(), 1u);
  const MergedJob& job = m.jobs[0];
  ASSERT_EQ(job.ranks.size(), 3u) << nlohmann::json(m.warnings).dump();
  EXPECT_EQ(job.ranks[0].pid, 200);
  EXPECT_EQ(job.ranks[1].pid, 210);
  EXPECT_EQ(job.ranks[2].pid, 300);
  EXPECT_TRUE(m.warnings.empty()) << nlohmann::json(m.warnings).dump();
  ASSERT_EQ(job.absent.size(), 1u);
  EXPECT_EQ(job.absent[0].rank, 1);
  EXPECT_EQ(job.ranks[0].stall_basis, "main thread blocked");  // not the host's meta
}

TEST(Merge, LegacyLauncherLocalRankArgumentIsTheSameJob) {
  MergedReport m = merge_bundles(
      {rank_bundle(0, 2, "a", 200, in_all_reduce(0, 40), 0, "python3 train.py --local_rank=0 --lr 1"),
       rank_bundle(1, 2, "b", 300, uploading(0, 41), 0, "python3 train.py --local_rank=1 --lr 1")});
  ASSERT_EQ(m.jobs.size(), 1u);
  EXPECT_EQ(m.jobs[0].cmdline, "python3 train.py --lr 1");
  EXPECT_TRUE(m.hang);
}

TEST(Merge, NoCollectiveNoHang) {
  MergedReport m = merge_bundles({rank_bundle(0, 2, "a", 200, uploading(0, 40))});
  EXPECT_FALSE(m.hang);
  EXPECT_EQ(merge_exit_status(m), 0);
  EXPECT_NE(m.verdict.find("no rank is in a collective"), std::string::npos) << m.verdict;
  EXPECT_NE(m.verdict.find("no bundle from rank 1 (of 2)"), std::string::npos) << m.verdict;
}

// Rank 1's host clock runs 20 s ahead of the merging host's (measured when
// its bundle was fetched): by its own clock it stalled after rank 0, on one
// clock 10 s before.
TEST(Merge, ClockOffsetsMeasuredWhenFetchedOrderTheStalls) {
  LoadedBundle r0 = rank_bundle(0, 2, "a", 200, in_all_reduce(0, 40));
  LoadedBundle r1 = rank_bundle(1, 2, "b", 300, uploading(0, 30));
  r0.clock_offset = ClockOffset{0.0, 0.002};
  r1.clock_offset = ClockOffset{20.0, 0.003};
  MergedReport m = merge_bundles({r0, r1});
  const MergedJob& job = m.jobs[0];
  ASSERT_TRUE(job.first_stall);
  EXPECT_EQ(job.ranks[job.first_stall->index].rank, 1);
  EXPECT_DOUBLE_EQ(job.first_stall->unix_time, kSampled - 50);
  EXPECT_TRUE(job.first_stall->certain);
  EXPECT_NE(
      job.first_stall->order.find("10.000 s before rank 0 (host a, pid 200), more than their clocks may "
                                  "differ (± 5.0 ms)"),
      std::string::npos)
      << job.first_stall->order;
  EXPECT_NE(job.first_stall->evidence[0].find("its clock corrected by -20.000 s"), std::string::npos)
      << job.first_stall->evidence[0];
  const MergedRank* one = find_rank(job, 1);
  ASSERT_TRUE(one);
  EXPECT_DOUBLE_EQ(one->clock_offset_s, 20.0);
  EXPECT_NE(one->clock_basis.find("its clock 20.000 s ahead"), std::string::npos) << one->clock_basis;
  nlohmann::json j = merged_report_to_json(m);
  EXPECT_EQ(j["jobs"][0]["first_stall"]["certain"], true);
  EXPECT_EQ(j["jobs"][0]["ranks"][1]["clock"]["offset_s"], 20.0);
}

// Stalls closer than the hosts' clocks may differ are not ordered; on one
// host they are, whatever its clock.
TEST(Merge, StallsCloserThanTheClocksMayDifferAreNotOrdered) {
  auto synced = [](LoadedBundle b, double max_error) {
    b.meta.clock = HostClock{kSampled, true, max_error, max_error / 2};
    return b;
  };
  MergedReport close = merge_bundles({synced(rank_bundle(0, 2, "a", 200, in_all_reduce(0, 40)), 0.5),
                                      synced(rank_bundle(1, 2, "b", 300, uploading(0, 40.3)), 0.5)});
  ASSERT_TRUE(close.jobs[0].first_stall);
  EXPECT_FALSE(close.jobs[0].first_stall->certain);
  EXPECT_NE(
      close.jobs[0].first_stall->order.find("within what their clocks may differ (± 1.000 s): the order "
                                            "is not certain"),
      std::string::npos)
      << close.jobs[0].first_stall->order;

  LoadedBundle unsynced = rank_bundle(1, 2, "b", 300, uploading(0, 75));
  unsynced.meta.clock = HostClock{kSampled, false, 16.0, 16.0};
  MergedReport unknown = merge_bundles({rank_bundle(0, 2, "a", 200, in_all_reduce(0, 40)), unsynced});
  ASSERT_TRUE(unknown.jobs[0].first_stall);
  EXPECT_FALSE(unknown.jobs[0].first_stall->certain);
  EXPECT_NE(unknown.jobs[0].first_stall->order.find("how far their clocks differ is unknown"),
            std::string::npos)
      << unknown.jobs[0].first_stall->order;

  MergedReport one_host = merge_bundles(
      {rank_bundle(0, 2, "a", 200, in_all_reduce(0, 40)), rank_bundle(1, 2, "a", 300, uploading(0, 40.3))});
  ASSERT_TRUE(one_host.jobs[0].first_stall);
  EXPECT_TRUE(one_host.jobs[0].first_stall->certain);
  EXPECT_NE(one_host.jobs[0].first_stall->order.find("on one host's clock"), std::string::npos);
}

// Seven ranks in all_reduce share a stack; rank 3 is elsewhere and stands
// out, as ByteRobust's stack aggregation would show it.
TEST(Merge, RanksAreGroupedByStackAndTheOutlierStandsOut) {
  std::vector<LoadedBundle> bundles;
  for (int rank = 0; rank < 8; ++rank)
    bundles.push_back(rank_bundle(rank, 8, fmt::format("node-{}", rank), 100 + rank,
                                  rank == 3 ? uploading(0, 50) : in_all_reduce(0, 40)));
  MergedReport m = merge_bundles(bundles);
  const MergedJob& job = m.jobs[0];
  ASSERT_EQ(job.stack_groups.size(), 2u);
  EXPECT_EQ(job.stack_groups[0].members.size(), 7u);
  EXPECT_FALSE(job.stack_groups[0].outlier);
  EXPECT_EQ(job.stack_groups[0].stack.front(), "all_reduce (distributed_c10d.py:1536)");
  ASSERT_EQ(job.stack_groups[1].members.size(), 1u);
  EXPECT_TRUE(job.stack_groups[1].outlier);
  EXPECT_EQ(job.ranks[job.stack_groups[1].members[0]].rank, 3);
  std::string evidence = fmt::format("{}", fmt::join(job.evidence, "\n"));
  EXPECT_NE(
      evidence.find("rank 3 stands out: a stack no other rank has (wait_for_checkpoint_upload (train.py:64) "
                    "<- <module> (train.py:92)), ranks 0-2, 4-7 share another"),
      std::string::npos)
      << evidence;
  std::string text = render_merged_text(m);
  EXPECT_NE(text.find("ranks by stack (2 groups):\n  ranks 0-2, 4-7: all_reduce"), std::string::npos) << text;
  EXPECT_NE(text.find("  rank 3 (outlier): wait_for_checkpoint_upload"), std::string::npos) << text;
  nlohmann::json j = merged_report_to_json(m);
  EXPECT_EQ(j["jobs"][0]["stack_groups"][1]["ranks"], nlohmann::json::array({3}));
  EXPECT_EQ(j["jobs"][0]["stack_groups"][1]["outlier"], true);

  // Two ranks, two stacks: neither is the majority, no outlier is claimed.
  MergedReport two = merge_bundles(
      {rank_bundle(0, 2, "a", 200, in_all_reduce(0, 40)), rank_bundle(1, 2, "b", 300, uploading(0, 75))});
  ASSERT_EQ(two.jobs[0].stack_groups.size(), 2u);
  EXPECT_FALSE(two.jobs[0].stack_groups[0].outlier);
  EXPECT_FALSE(two.jobs[0].stack_groups[1].outlier);
}

TEST(Merge, ClockTextIsUtc) { EXPECT_EQ(format_utc_clock(kSampled), "22:13:20"); }

}  // namespace
}  // namespace hangtrace
