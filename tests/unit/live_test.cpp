// Ring-buffer record decoding, aggregation, and the live finding rules, fed
// with records laid out exactly as the BPF programs write them (abi.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <vector>

#include "hangtrace/abi.h"
#include "hangtrace/analysis.h"
#include "hangtrace/live.h"
#include "hangtrace/text.h"
#include "hangtrace/report.h"

namespace hangtrace {
namespace {

template <class T>
T record(uint32_t type, uint32_t tgid, uint32_t tid, uint64_t ts, const char* comm) {
  T r;
  std::memset(&r, 0, sizeof r);
  r.hdr.type = type;
  r.hdr.size = sizeof r;
  r.hdr.ts_ns = ts;
  r.hdr.tgid = tgid;
  r.hdr.tid = tid;
  std::strncpy(r.hdr.comm, comm, sizeof r.hdr.comm);
  return r;
}

template <class T>
TraceEvent decoded(const T& r) {
  auto e = decode_event(&r, sizeof r);
  EXPECT_TRUE(e.ok()) << e.error();
  return e.ok() ? *e : TraceEvent{};
}

TEST(LiveDecode, EveryRecordTypeRoundTrips) {
  auto exit = record<ht_proc_event>(HT_EV_PROC_EXIT, 10, 10, 5, "worker");
  exit.exit_code = 7 << 8;
  exit.flags = 1;
  TraceEvent e = decoded(exit);
  EXPECT_EQ(e.type, static_cast<uint32_t>(HT_EV_PROC_EXIT));
  EXPECT_EQ(e.tgid, 10);
  EXPECT_EQ(e.comm, "worker");
  EXPECT_EQ(e.exit_code, 7 << 8);
  EXPECT_TRUE(e.group_exit);

  auto sig = record<ht_signal_event>(HT_EV_SIGNAL, 10, 11, 6, "worker");
  sig.sig = 7;
  sig.code = 2;
  sig.sender_tgid = 10;
  std::strncpy(sig.sender_comm, "worker", sizeof sig.sender_comm);
  e = decoded(sig);
  EXPECT_EQ(e.sig, 7);
  EXPECT_EQ(e.si_code, 2);
  EXPECT_EQ(e.sender_comm, "worker");

  auto tcp = record<ht_tcp_event>(HT_EV_TCP_STATE, 10, 10, 7, "w");
  tcp.family = 2;  // AF_INET
  tcp.sport = 40000;
  tcp.dport = 5000;
  uint8_t lo[4] = {127, 0, 0, 1};
  std::memcpy(tcp.saddr, lo, 4);
  std::memcpy(tcp.daddr, lo, 4);
  tcp.oldstate = 2;
  tcp.newstate = 1;
  e = decoded(tcp);
  EXPECT_EQ(e.local, "127.0.0.1:40000");
  EXPECT_EQ(e.remote, "127.0.0.1:5000");
  EXPECT_EQ(tcp_state_name(e.new_state), "ESTABLISHED");

  auto shm = record<ht_shm_event>(HT_EV_SHM, 10, 10, 8, "w");
  shm.op = HT_SHM_ENOSPC;
  shm.ret = -28;
  std::strncpy(shm.name, "torch_1_2", sizeof shm.name);
  e = decoded(shm);
  EXPECT_EQ(e.name, "torch_1_2");
  EXPECT_STREQ(shm_op_name(e.shm_op), "ENOSPC");

  auto futex = record<ht_futex_event>(HT_EV_FUTEX_WAIT, 10, 12, 9, "w");
  futex.uaddr = 0x1000;
  futex.duration_ns = 1'000'000;
  e = decoded(futex);
  EXPECT_EQ(e.uaddr, 0x1000u);
  EXPECT_EQ(e.duration_ns, 1'000'000u);
}

TEST(LiveDecode, ShortOrUnknownRecordsAreErrors) {
  auto futex = record<ht_futex_event>(HT_EV_FUTEX_WAIT, 1, 1, 1, "x");
  EXPECT_FALSE(decode_event(&futex, sizeof(ht_event_header) + 4).ok());
  EXPECT_FALSE(decode_event(&futex, 3).ok());
  futex.hdr.type = 999;
  EXPECT_FALSE(decode_event(&futex, sizeof futex).ok());
  futex.hdr.type = HT_EV_FUTEX_WAIT;
  futex.hdr.size = sizeof futex + 100;  // claims more than it has
  EXPECT_FALSE(decode_event(&futex, sizeof futex).ok());
}

Snapshot job_snapshot() {
  Snapshot s;
  s.target_pid = 100;
  ProcessInfo p;
  p.pid = 100;
  p.comm = "python3";
  p.state = 'S';
  p.children = {200, 201};
  ThreadInfo t;
  t.tid = 100;
  t.state = 'R';
  t.syscall.mode = SyscallState::Mode::Running;
  p.threads.push_back(t);
  s.processes.push_back(p);
  return s;
}

const Finding* find_kind(const Diagnosis& d, const std::string& kind) {
  for (const auto& f : d.findings)
    if (finding_kind_name(f.kind) == kind) return &f;
  return nullptr;
}

// A SIGSTOP seen live names who sent it; a SIGCONT after it forgets it.
TEST(LiveRules, AStopSignalSeenLiveNamesItsSender) {
  Aggregator agg;
  auto stop = record<ht_signal_event>(HT_EV_SIGNAL, 200, 200, 10, "python3");
  stop.sig = SIGSTOP;
  stop.sender_tgid = 4444;
  stop.sender_tid = 4444;
  std::memcpy(stop.sender_comm, "slurmstepd", 11);
  agg.add(decoded(stop));
  auto other = record<ht_signal_event>(HT_EV_SIGNAL, 201, 201, 11, "python3");
  other.sig = SIGSTOP;
  agg.add(decoded(other));
  auto cont = record<ht_signal_event>(HT_EV_SIGNAL, 201, 201, 12, "python3");
  cont.sig = SIGCONT;
  agg.add(decoded(cont));
  LiveObservation live = agg.finish(0, 2'000'000'000, 3, 0);
  ASSERT_EQ(live.stop_signals.size(), 1u);
  EXPECT_EQ(live.stop_signals.at(200).sender_comm, "slurmstepd");

  Snapshot s = job_snapshot();
  ProcessInfo worker;
  worker.pid = 200;
  worker.ppid = 100;
  worker.comm = "python3";
  worker.state = 'T';
  ThreadInfo t;
  t.tid = 200;
  t.state = 'T';
  worker.threads.push_back(t);
  s.processes.push_back(worker);
  Diagnosis d = diagnose(s, {}, &live);
  const Finding* f = find_kind(d, "stopped");
  ASSERT_NE(f, nullptr);
  EXPECT_NE(f->summary.find("stopped by SIGSTOP from 4444 (slurmstepd)"), std::string::npos) << f->summary;
  EXPECT_EQ(f->details["sender_pid"], 4444);
  EXPECT_EQ(f->details["signal"], "SIGSTOP");
  EXPECT_NE(f->advice.front().find("kill -CONT 200"), std::string::npos);
}

TEST(LiveRules, OomKillNamesVictimCgroupAndLimit) {
  Aggregator agg;
  ProcessMeta m;
  m.pid = 200;
  m.comm = "python3";
  m.memory_cgroup = "/hangtrace-scn-1";
  m.memory_limit_bytes = 512ull << 20;
  agg.set_meta(m);
  auto oom = record<ht_oom_event>(HT_EV_OOM_VICTIM, 200, 200, 10, "python3");
  oom.anon_rss_kb = 500 * 1024;
  agg.add(decoded(oom));
  auto kill = record<ht_signal_event>(HT_EV_SIGNAL, 200, 200, 11, "python3");
  kill.sig = 9;
  kill.code = 0x80;
  agg.add(decoded(kill));
  auto exit = record<ht_proc_event>(HT_EV_PROC_EXIT, 200, 200, 12, "python3");
  exit.exit_code = 9;
  exit.flags = 1;
  agg.add(decoded(exit));
  LiveObservation live = agg.finish(0, 2'000'000'000, 3, 0);
  ASSERT_EQ(live.deaths.size(), 1u);
  EXPECT_TRUE(live.deaths[0].oom_victim);

  Snapshot s = job_snapshot();
  Diagnosis d = diagnose(s, {}, &live);
  const Finding* f = find_kind(d, "process-killed");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->details["cause"], "oom-killer");
  EXPECT_EQ(f->details["pid"], 200);
  EXPECT_EQ(f->details["cgroup"], "/hangtrace-scn-1");
  EXPECT_EQ(f->details["limit_bytes"], 512ull << 20);
  EXPECT_NE(f->summary.find("worker 200"), std::string::npos) << f->summary;
  EXPECT_EQ(exit_status_for(d), 2);
  nlohmann::json j = render_json(s, d, &live);
  EXPECT_EQ(j["live"]["events"], 3);
  EXPECT_EQ(j["live"]["exits"][0]["oom_victim"], true);
}

TEST(LiveRules, SigbusAfterShmTroubleIsTracedToTheFullTmpfs) {
  Aggregator agg;
  auto fault = record<ht_shm_event>(HT_EV_SHM, 201, 201, 10, "python3");
  fault.op = HT_SHM_SIGBUS;
  fault.addr = 0x7f0000000000;
  agg.add(decoded(fault));
  auto bus = record<ht_signal_event>(HT_EV_SIGNAL, 201, 201, 11, "python3");
  bus.sig = 7;
  bus.code = 2;
  bus.sender_tgid = 201;
  agg.add(decoded(bus));
  auto exit = record<ht_proc_event>(HT_EV_PROC_EXIT, 201, 201, 12, "python3");
  exit.exit_code = 7;
  exit.flags = 1;
  agg.add(decoded(exit));
  agg.note_shm_usage(201, 63ull << 20, 64ull << 20);
  LiveObservation live = agg.finish(0, 1, 3, 0);
  Diagnosis d = diagnose(job_snapshot(), {}, &live);
  const Finding* f = find_kind(d, "process-killed");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->details["cause"], "sigbus-shm");
  EXPECT_EQ(f->details["signal"], 7);
  EXPECT_EQ(f->details["shm_size_bytes"], 64ull << 20);
  EXPECT_NE(f->summary.find("SIGBUS"), std::string::npos);
}

TEST(LiveRules, SignalFromAnotherProcessNamesTheSender) {
  Aggregator agg;
  auto term = record<ht_signal_event>(HT_EV_SIGNAL, 200, 200, 10, "python3");
  term.sig = 15;
  term.sender_tgid = 4242;
  std::strncpy(term.sender_comm, "killer", sizeof term.sender_comm);
  agg.add(decoded(term));
  auto exit = record<ht_proc_event>(HT_EV_PROC_EXIT, 200, 200, 11, "python3");
  exit.exit_code = 15;
  exit.flags = 1;
  agg.add(decoded(exit));
  // A clean exit of another worker is not a finding.
  auto clean = record<ht_proc_event>(HT_EV_PROC_EXIT, 201, 201, 11, "python3");
  clean.flags = 1;
  agg.add(decoded(clean));
  LiveObservation live = agg.finish(0, 1, 3, 0);
  Diagnosis d = diagnose(job_snapshot(), {}, &live);
  ASSERT_EQ(d.findings.size(), 1u);
  EXPECT_EQ(d.findings[0].details["cause"], "signal");
  EXPECT_EQ(d.findings[0].details["sender_pid"], 4242);
  EXPECT_NE(d.findings[0].summary.find("killer"), std::string::npos);
}

TEST(LiveRules, MemoryGrowthNeedsRealGrowth) {
  Aggregator agg;
  for (int i = 0; i < 6; ++i) {
    auto rss = record<ht_rss_event>(HT_EV_RSS, 100, 100, 1'000'000'000ull * i, "python3");
    rss.rss_bytes = (200ull + 100ull * i) << 20;  // 200 MiB -> 700 MiB in 5 s
    agg.add(decoded(rss));
  }
  LiveObservation live = agg.finish(0, 5'000'000'000ull, 6, 0);
  Diagnosis d = diagnose(job_snapshot(), {}, &live);
  const Finding* f = find_kind(d, "memory-growth");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->details["pid"], 100);
  EXPECT_NEAR(f->details["growth_bytes_per_s"].get<double>(), 100.0 * (1 << 20), 1.0);
  EXPECT_EQ(f->severity, Severity::Critical);  // the main process itself

  Aggregator flat;
  for (int i = 0; i < 6; ++i) {
    auto rss = record<ht_rss_event>(HT_EV_RSS, 100, 100, 1'000'000'000ull * i, "python3");
    rss.rss_bytes = (400ull + (i % 2) * 64) << 20;  // oscillates
    flat.add(decoded(rss));
  }
  LiveObservation steady = flat.finish(0, 5'000'000'000ull, 6, 0);
  EXPECT_EQ(find_kind(diagnose(job_snapshot(), {}, &steady), "memory-growth"), nullptr);
}

TEST(LiveRules, StuckThreadsSayWhoLastWokeThem) {
  // A worker blocked forever on a private lock, main waiting for it.
  Snapshot s = job_snapshot();
  s.processes[0].threads[0].state = 'S';
  s.processes[0].threads[0].syscall = {
      SyscallState::Mode::InSyscall, HT_NR_wait4, {200, 0, 0, 0, 0, 0}, 0, 0};
  ProcessInfo w;
  w.pid = 200;
  w.ppid = 100;
  w.comm = "python3";
  w.state = 'S';
  w.role = ProcessRole::Descendant;
  ThreadInfo t;
  t.tid = 200;
  t.state = 'S';
  t.syscall = {
      SyscallState::Mode::InSyscall, HT_NR_futex, {0x4000, FUTEX_WAIT_BITSET_PRIVATE, 0, 0, 0, 0}, 0, 0};
  w.threads.push_back(t);
  s.processes.push_back(w);
  Aggregator agg;
  auto wake = record<ht_wakeup_event>(HT_EV_WAKEUP, 100, 100, 1'000'000'000ull, "python3");
  wake.waker_tgid = 200;
  wake.waker_tid = 200;
  std::strncpy(wake.waker_comm, "python3", sizeof wake.waker_comm);
  agg.add(decoded(wake));
  LiveObservation live = agg.finish(0, 4'000'000'000ull, 1, 0);
  Diagnosis d = diagnose(s, {}, &live);
  ASSERT_FALSE(d.findings.empty());
  EXPECT_STREQ(finding_kind_name(d.findings[0].kind), "orphaned-lock");
  std::string all;
  for (const auto& e : d.findings[0].evidence) all += e + "\n";
  EXPECT_NE(all.find("main 100 (python3) was last woken by 200 (python3, tid 200) 3.0 s before"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("nothing woke worker 200"), std::string::npos) << all;
}

TEST(LiveAggregate, MemoryStaysBounded) {
  Aggregator agg(/*per_thread_intervals=*/8, /*max_list=*/16);
  for (int i = 0; i < 10000; ++i) {
    auto w = record<ht_futex_event>(HT_EV_FUTEX_WAIT, 1, 1 + i % 4, i, "x");
    w.duration_ns = 10;
    agg.add(decoded(w));
    auto t = record<ht_tcp_event>(HT_EV_TCP_STATE, 1, 1, i, "x");
    agg.add(decoded(t));
  }
  LiveObservation o = agg.finish(0, 1, 20000, 0);
  EXPECT_EQ(o.blocked.size(), 4u);
  for (const auto& [tid, q] : o.blocked) EXPECT_EQ(q.size(), 8u);
  EXPECT_EQ(o.tcp.size(), 16u);
}

TEST(LiveAggregate, RawHotPathMatchesDecodeAndAdd) {
  // The consumer's fast path (add_raw) must aggregate exactly what
  // decode_event + add would, and reject exactly the records decode_event does.
  std::vector<std::vector<unsigned char>> recs;
  auto put = [&](const auto& r, size_t size) {
    const auto* p = reinterpret_cast<const unsigned char*>(&r);
    recs.emplace_back(p, p + size);
  };
  for (int i = 0; i < 200; ++i) {
    uint32_t tid = 10 + static_cast<uint32_t>(i % 3);
    auto w = record<ht_futex_event>(HT_EV_FUTEX_WAIT, 10, tid, 1000 + i, "x");
    w.uaddr = 0x7f0000000000ull + static_cast<uint64_t>(i);
    w.duration_ns = i % 7 == 0 ? 5000 : 40;  // longer than ts: start clamps to 0
    put(w, sizeof w);
    auto k = record<ht_futex_event>(HT_EV_FUTEX_WAKE, 10, tid, 1000 + i, "x");
    k.ret = 1;
    put(k, sizeof k);
    auto sc = record<ht_syscall_event>(HT_EV_SYSCALL_BLOCK, 10, tid, 2000 + i, "x");
    sc.nr = i % 2 ? HT_NR_read : HT_NR_wait4;
    sc.fd = i % 2 ? 3 : -1;
    sc.duration_ns = 7;
    put(sc, sizeof sc);
    auto sw = record<ht_short_waits_event>(HT_EV_SHORT_WAITS, 10, tid, 3000 + i, "x");
    sw.waits.nr = HT_NR_read;
    sw.waits.fd = 4;
    sw.waits.obj_kind = HT_OBJ_SOCKET;
    sw.waits.object = 500 + static_cast<uint64_t>(i);  // a new socket each time: past the key budget
    sw.waits.waker_tgid = sw.waits.waker_tid = 20;
    sw.waits.count = 3;
    sw.waits.sum_ns = 3000;
    sw.waits.buckets[0] = 3;
    put(sw, sizeof sw);
  }
  auto short_cut = record<ht_short_waits_event>(HT_EV_SHORT_WAITS, 10, 10, 1, "x");
  put(short_cut, sizeof short_cut - 1);
  auto w = record<ht_futex_event>(HT_EV_FUTEX_WAIT, 10, 10, 1, "x");
  put(w, sizeof w - 1);  // too short
  w.hdr.size = sizeof w + 8;
  put(w, sizeof w);  // claims more than it has
  auto sc = record<ht_syscall_event>(HT_EV_SYSCALL_BLOCK, 10, 10, 1, "x");
  put(sc, sizeof sc - 8);
  put(sc, 4);  // not even a header
  auto rss = record<ht_rss_event>(HT_EV_RSS, 10, 10, 5, "x");
  rss.rss_bytes = 1 << 20;
  put(rss, sizeof rss);
  auto unknown = record<ht_rss_event>(99, 10, 10, 5, "x");
  put(unknown, sizeof unknown);

  Aggregator slow(/*per_thread_intervals=*/16), fast(16);
  size_t slow_bad = 0, fast_bad = 0, not_hot = 0;
  for (const auto& r : recs) {
    auto e = decode_event(r.data(), r.size());
    if (e) {
      slow.add(*e);
    } else {
      ++slow_bad;
    }
    switch (fast.add_raw(r.data(), r.size())) {
      case Aggregator::Raw::Added:
        break;
      case Aggregator::Raw::Undecodable:
        ++fast_bad;
        break;
      case Aggregator::Raw::NotHot:
        ++not_hot;
        if (auto d = decode_event(r.data(), r.size())) {
          fast.add(*d);
        } else {
          ++fast_bad;
        }
        break;
    }
  }
  EXPECT_EQ(slow_bad, 6u);
  EXPECT_EQ(fast_bad, slow_bad);
  EXPECT_EQ(not_hot, 3u);  // the header-less one, rss, the unknown type
  LiveObservation a = slow.finish(0, 1, recs.size(), 0), b = fast.finish(0, 1, recs.size(), 0);
  ASSERT_EQ(a.blocked.size(), 3u);
  ASSERT_EQ(b.blocked.size(), a.blocked.size());
  for (const auto& [tid, q] : a.blocked) {
    const auto& p = b.blocked.at(tid);
    ASSERT_EQ(q.size(), 16u);
    ASSERT_EQ(p.size(), q.size());
    for (size_t i = 0; i < q.size(); ++i) {
      EXPECT_EQ(p[i].start_ns, q[i].start_ns);
      EXPECT_EQ(p[i].end_ns, q[i].end_ns);
      EXPECT_EQ(p[i].what, q[i].what);
    }
  }
  EXPECT_EQ(b.rss.at(10).last_bytes, 1u << 20);
  // The short waits are summed alike on both paths.
  ASSERT_EQ(a.wait_totals.size(), 3u);
  ASSERT_EQ(b.wait_totals.size(), a.wait_totals.size());
  for (const auto& [tid, totals] : b.wait_totals) {
    const auto& slow_totals = a.wait_totals.at(tid);
    ASSERT_EQ(totals.size(), slow_totals.size());
    for (size_t i = 0; i < totals.size(); ++i) {
      EXPECT_EQ(totals[i].count, slow_totals[i].count);
      EXPECT_EQ(totals[i].sum_ns, slow_totals[i].sum_ns);
      EXPECT_EQ(totals[i].object, slow_totals[i].object);
      EXPECT_EQ(totals[i].waker_tid, slow_totals[i].waker_tid);
    }
  }
  EXPECT_EQ(b.wait_totals_dropped, 0u);
}

TEST(LiveAggregate, WaitsOnObjectsPastTheKeyBudgetAreFoldedNotDropped) {
  // A loader that opens a socket per batch (torch's fd sharing): 1000
  // sockets, each waited on briefly, then a long wait on a new one.
  Aggregator agg;
  for (uint32_t i = 0; i < 1000; ++i) {
    auto sw = record<ht_short_waits_event>(HT_EV_SHORT_WAITS, 10, 10, 1000 + i, "x");
    sw.waits.nr = HT_NR_read;
    sw.waits.fd = 5;
    sw.waits.obj_kind = HT_OBJ_SOCKET;
    sw.waits.object = 700 + i;
    sw.waits.waker_tgid = 20;
    sw.waits.waker_tid = 21;
    sw.waits.count = 2;
    sw.waits.sum_ns = 2'000'000;
    sw.waits.buckets[10] = 2;
    ASSERT_EQ(agg.add_raw(&sw, sizeof sw), Aggregator::Raw::Added);
  }
  auto sc = record<ht_syscall_event>(HT_EV_SYSCALL_BLOCK, 10, 10, 9'000'000'000ull, "x");
  sc.nr = HT_NR_read;
  sc.fd = 6;
  sc.obj_kind = HT_OBJ_SOCKET;
  sc.obj_inode = 99999;
  sc.duration_ns = 7'000'000;
  ASSERT_EQ(agg.add_raw(&sc, sizeof sc), Aggregator::Raw::Added);
  LiveObservation o = agg.finish(0, 10'000'000'000ull, 1001, 0);
  const auto& totals = o.wait_totals.at(10);
  EXPECT_EQ(totals.size(), kMaxWaitTotalsPerThread - kWaitTotalsForMany + 2);  // + many, + the long one's
  uint64_t calls = 0, ns = 0;
  const WaitTotal* many = nullptr;
  for (const auto& t : totals) {
    calls += t.count;
    ns += t.sum_ns;
    if (t.object == kManyObjects && t.waker_tid == 21) many = &t;
  }
  EXPECT_EQ(calls, 2001u);
  EXPECT_EQ(ns, 2'007'000'000u);
  ASSERT_NE(many, nullptr);
  EXPECT_EQ(many->count, 2u * (1000 - (kMaxWaitTotalsPerThread - kWaitTotalsForMany)));
  EXPECT_EQ(many->waker_pid, 20);
  EXPECT_EQ(many->buckets[10], many->count);
  EXPECT_EQ(o.wait_totals_dropped, 0u);
}

TEST(LiveAggregate, BlockedIntervalsKeepTheMostRecentOldestFirst) {
  Aggregator agg(/*per_thread_intervals=*/3);
  for (int i = 1; i <= 5; ++i) {
    auto w = record<ht_futex_event>(HT_EV_FUTEX_WAIT, 1, 1, 100 * i, "x");
    w.uaddr = 0x1000u * i;
    w.duration_ns = 10;
    agg.add(decoded(w));
    // Read mid-stream: the observation is brought up to date.
    const auto& q = agg.observation().blocked.at(1);
    ASSERT_EQ(q.size(), static_cast<size_t>(std::min(i, 3)));
    EXPECT_EQ(q.back().end_ns, 100u * i);
  }
  auto sc = record<ht_syscall_event>(HT_EV_SYSCALL_BLOCK, 1, 1, 600, "x");
  sc.nr = HT_NR_read;
  sc.fd = 4;
  sc.duration_ns = 50;
  agg.add(decoded(sc));
  LiveObservation o = agg.finish(0, 1, 6, 0);
  const auto& q = o.blocked.at(1);
  ASSERT_EQ(q.size(), 3u);
  EXPECT_EQ(q[0].what, "futex 0x4000");
  EXPECT_EQ(q[0].start_ns, 390u);
  EXPECT_EQ(q[1].what, "futex 0x5000");
  EXPECT_EQ(q[2].what, "read fd 4");
  EXPECT_EQ(q[2].start_ns, 550u);
  EXPECT_EQ(q[2].end_ns, 600u);
}

}  // namespace
}  // namespace hangtrace

namespace hangtrace {
namespace {

TEST(LiveMeta, MemoryCgroupPathFromProcCgroup) {
  bool v2 = true;
  auto p =
      memory_cgroup_path("12:pids:/a\n7:cpu,cpuacct:/b\n4:memory:/hangtrace-scn-9\n0::/user.slice\n", &v2);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(*p, "/hangtrace-scn-9");
  EXPECT_FALSE(v2);
  p = memory_cgroup_path("0::/system.slice/job.service\n", &v2);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(*p, "/system.slice/job.service");
  EXPECT_TRUE(v2);
  EXPECT_FALSE(memory_cgroup_path("", &v2).has_value());
  EXPECT_FALSE(memory_cgroup_path("garbage without colons", &v2).has_value());
}

}  // namespace
}  // namespace hangtrace
