// The kernel log's records and what they say of dead processes
// (kernel_log.h), and the process-killed findings made of them.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <set>

#include "frames.h"
#include "hangtrace/analysis.h"
#include "hangtrace/jobs.h"
#include "hangtrace/kernel_log.h"
#include "hangtrace/snapshot_json.h"
#include "snapshot_builder.h"

namespace hangtrace {
namespace {

using testing::SnapshotBuilder;

KernelLogRecord rec(uint64_t ts_s, const std::string& message) {
  KernelLogRecord r;
  r.ts_us = ts_s * 1'000'000;
  r.message = message;
  return r;
}

TEST(KernelLog, ARecordsHeaderAndMessage) {
  auto r =
      parse_kmsg_record("6,8123,3172000123,-;oom-kill:constraint=CONSTRAINT_MEMCG,pid=12\n SUBSYSTEM=x\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->level, 6);
  EXPECT_EQ(r->seq, 8123u);
  EXPECT_EQ(r->ts_us, 3172000123u);
  EXPECT_EQ(r->message, "oom-kill:constraint=CONSTRAINT_MEMCG,pid=12");
  // With the fields later kernels add after the flags.
  EXPECT_TRUE(parse_kmsg_record("4,1,2,-,caller=T12;text"));
  EXPECT_FALSE(parse_kmsg_record("no header"));
  EXPECT_FALSE(parse_kmsg_record("x,1,2,-;text"));
  EXPECT_FALSE(parse_kmsg_record("6,1;text"));
  auto long_one = parse_kmsg_record("6,1,2,-;" + std::string(5000, 'a'));
  ASSERT_TRUE(long_one);
  EXPECT_EQ(long_one->message.size(), kMaxKernelLogMessage);
}

TEST(KernelLog, EveryKindIsNamedAndReadBackFromItsName) {
  using Kind = KernelLogEvent::Kind;
  std::set<std::string> names;
  for (int k = 0; k <= static_cast<int>(Kind::GpuXid); ++k) {
    const std::string name = kernel_log_event_name(static_cast<Kind>(k));
    EXPECT_NE(name, "?");
    EXPECT_TRUE(names.insert(name).second) << name << " names two kinds";
    EXPECT_EQ(kernel_log_event_kind(name), static_cast<Kind>(k)) << name;
  }
  EXPECT_EQ(names.size(), 6u);
  EXPECT_FALSE(kernel_log_event_kind("?"));
  EXPECT_FALSE(kernel_log_event_kind("oom"));
  EXPECT_FALSE(kernel_log_event_kind(""));
}

TEST(KernelLog, AnOomKillIsOneEventWithItsCgroupAndLimit) {
  std::vector<KernelLogRecord> log = {
      rec(100, "python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0"),
      rec(100, "memory: usage 393216kB, limit 393216kB, failcnt 57"),
      rec(100,
          "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/job,"
          "task_memcg=/job/rank1,task=python3,pid=4242,uid=0"),
      rec(100,
          "Memory cgroup out of memory: Killed process 4242 (python3) total-vm:900000kB, "
          "anon-rss:380000kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:1000kB oom_score_adj:0"),
      rec(101, "Out of memory: Killed process 77 (java) total-vm:1kB, anon-rss:1kB"),
  };
  auto events = kernel_log_events(log);
  ASSERT_EQ(events.size(), 2u);
  const KernelLogEvent& e = events[0];
  EXPECT_EQ(e.kind, KernelLogEvent::Kind::OomKill);
  EXPECT_EQ(e.pid, 4242);
  EXPECT_EQ(e.comm, "python3");
  EXPECT_EQ(e.memcg, "/job/rank1");
  EXPECT_EQ(e.oom_memcg, "/job");
  EXPECT_EQ(e.limit_bytes, 393216ull << 10);
  EXPECT_NE(e.message.find("Killed process 4242"), std::string::npos);
  // A system-wide kill without an oom-kill line before it: still one event.
  EXPECT_EQ(events[1].pid, 77);
  EXPECT_EQ(events[1].comm, "java");
  EXPECT_FALSE(events[1].limit_bytes);
}

TEST(KernelLog, SegfaultsTrapsHungTasksMemoryErrorsAndXids) {
  std::vector<KernelLogRecord> log = {
      rec(1, "pt_data_worker[812]: segfault at 0 ip 00007f00 sp 00007ffe error 4 in libc.so.6[7f00+1000]"),
      rec(2,
          "traps: python3[813] general protection fault ip:7f00 sp:7ffe error:0 in libtorch_cpu.so[7f00+10]"),
      rec(3, "INFO: task python3:814 blocked for more than 120 seconds."),
      rec(4, "Memory failure: 0x1234: Sending SIGBUS to python3:815 due to hardware memory corruption"),
      rec(5, "NVRM: Xid (PCI:0000:3b:00): 79, pid=816, name=python3, GPU has fallen off the bus."),
      rec(6, "NVRM: Xid (PCI:0000:3b:00): 13, pid='<unknown>', name=<unknown>, Graphics Exception"),
      rec(7, "random line: segfault at nothing"),
  };
  auto events = kernel_log_events(log);
  ASSERT_EQ(events.size(), 6u);
  EXPECT_EQ(events[0].kind, KernelLogEvent::Kind::Segfault);
  EXPECT_EQ(events[0].pid, 812);
  EXPECT_EQ(events[0].comm, "pt_data_worker");
  EXPECT_EQ(events[1].kind, KernelLogEvent::Kind::Trap);
  EXPECT_EQ(events[1].pid, 813);
  EXPECT_EQ(events[2].kind, KernelLogEvent::Kind::HungTask);
  EXPECT_EQ(events[2].pid, 814);
  EXPECT_EQ(events[3].kind, KernelLogEvent::Kind::MemoryFailure);
  EXPECT_EQ(events[3].pid, 815);
  EXPECT_EQ(events[4].kind, KernelLogEvent::Kind::GpuXid);
  EXPECT_EQ(events[4].xid, 79);
  EXPECT_EQ(events[4].pid, 816);
  EXPECT_EQ(events[5].xid, 13);
  EXPECT_EQ(events[5].pid, 0);
}

TEST(KernelLog, EventsAreBounded) {
  std::vector<KernelLogRecord> log;
  for (int i = 0; i < 1000; ++i)
    log.push_back(rec(i, fmt::format("p[{}]: segfault at 0 ip 1 sp 2 error 4", i + 1)));
  auto events = kernel_log_events(log);
  ASSERT_EQ(events.size(), kMaxKernelLogEvents);
  EXPECT_EQ(events.back().pid, 1000) << "the newest are kept";
}

TEST(KernelLog, TheMemoryCgroupOfAProcess) {
  EXPECT_EQ(jobs::memory_cgroup_of("12:pids:/a\n7:cpu,cpuacct:/b\n4:memory:/job/rank1\n0::/c\n"),
            "/job/rank1");
  EXPECT_EQ(jobs::memory_cgroup_of("0::/kubepods/pod1/ctr\n"), "/kubepods/pod1/ctr");
  EXPECT_EQ(jobs::memory_cgroup_of("3:cpu,memory:/x:y\n"), "/x:y");
  EXPECT_EQ(jobs::memory_cgroup_of("garbage\n1:name=systemd:/s\n"), "");
}

// Rank 0 (pid 200) of world size 2 waits in all_reduce; the kernel log says
// a python3 of the job's memory cgroup was OOM-killed 40 s before the snapshot.
SnapshotBuilder rank_left_alone(const std::string& victim_cgroup, double victim_ago_s) {
  SnapshotBuilder b(100);
  ProcessInfo& l = b.proc(100, 1, ProcessRole::Target);
  l.memory_cgroup = "/job";
  l.age_s = 120;
  b.thread(100, 100);
  ProcessInfo& r0 = b.proc(200, 100, ProcessRole::Descendant);
  r0.rank = 0;
  r0.world_size = 2;
  r0.memory_cgroup = "/job";
  ThreadInfo& t = b.futex_wait(200, 200, 0x5000, false, {}, std::nullopt, 38.0);
  t.python_stack = {testing::py("all_reduce", "/x/torch/distributed/distributed_c10d.py", 1500),
                    testing::py("train", "/job/train.py", 30)};
  b.running(200, 202);  // gloo's thread
  // Its gloo connection to rank 1: the other end held by rank 1's forked
  // helper (pid 300), reparented to init when rank 1 died.
  b.fd(200, 9, FdKind::Socket, 900);
  b.proc(300, 1, ProcessRole::Peer);
  b.thread(300, 300);
  b.fd(300, 4, FdKind::Socket, 901);
  b.tcp_pair(900, 41000, 901, 41001);
  b.s.kernel_log_read_at_s = 5000;
  KernelLogEvent e;
  e.kind = KernelLogEvent::Kind::OomKill;
  e.pid = 201;
  e.comm = "python3";
  e.memcg = victim_cgroup;
  e.limit_bytes = 384ull << 20;
  e.ts_us = static_cast<uint64_t>((5000 - victim_ago_s) * 1e6);
  e.message = "oom-kill:...task=python3,pid=201";
  b.s.kernel_events.push_back(e);
  return b;
}

TEST(KernelLogDeaths, ARankKilledBeforeHangtraceAttachedIsNamed) {
  Diagnosis d = diagnose(rank_left_alone("/job", 40).s);
  const Finding* f = nullptr;
  for (const auto& x : d.findings)
    if (x.kind == FindingKind::ProcessKilled) f = &x;
  ASSERT_NE(f, nullptr) << d.verdict.summary;
  EXPECT_EQ(f->severity, Severity::Critical);
  EXPECT_EQ(f->details["event"], "oom-kill");
  EXPECT_EQ(f->details["source"], "kernel log");
  EXPECT_NEAR(f->details["ago_s"].get<double>(), 40.0, 0.01);
  EXPECT_NE(
      f->summary.find("201 (python3) was killed by the OOM killer in memory cgroup /job (limit 384 MiB)"),
      std::string::npos)
      << f->summary;
  EXPECT_NE(f->summary.find("before hangtrace attached"), std::string::npos);
  // Rank 0's wait for the missing rank 1 is no wait "for the ranks on other
  // hosts": the death is here, and so is the other end of its connection.
  const Finding* wait = nullptr;
  for (const auto& x : d.findings)
    if (x.kind == FindingKind::CollectiveWait) wait = &x;
  ASSERT_NE(wait, nullptr) << d.verdict.summary;
  EXPECT_FALSE(wait->details["on_other_hosts"].get<bool>());
  EXPECT_EQ(wait->severity, Severity::Critical);
  ASSERT_EQ(wait->details["local_peer_holders"].size(), 1u);
  EXPECT_EQ(wait->details["local_peer_holders"][0]["pid"], 300);
  EXPECT_NE(
      wait->summary.find("rank 1 of world size 2, which is not running: its connection's other end is held "
                         "by 300 (python3) on this host"),
      std::string::npos)
      << wait->summary;
  EXPECT_EQ(wait->summary.find("other hosts"), std::string::npos) << wait->summary;
  // Another cgroup's kill, or one from before the job started, is not the job's.
  Diagnosis other = diagnose(rank_left_alone("/other", 40).s);
  for (const auto& x : other.findings) EXPECT_NE(x.kind, FindingKind::ProcessKilled) << x.summary;
  Diagnosis earlier = diagnose(rank_left_alone("/job", 500).s);
  for (const auto& x : earlier.findings) EXPECT_NE(x.kind, FindingKind::ProcessKilled) << x.summary;
  // Through the snapshot's JSON (a bundle) and back.
  auto reloaded = snapshot_from_json(snapshot_to_json(rank_left_alone("/job", 40).s));
  ASSERT_TRUE(reloaded.ok()) << reloaded.error();
  ASSERT_EQ(reloaded->kernel_events.size(), 1u);
  EXPECT_EQ(reloaded->kernel_events[0].memcg, "/job");
  EXPECT_EQ(reloaded->processes[0].memory_cgroup, "/job");
}

}  // namespace
}  // namespace hangtrace
