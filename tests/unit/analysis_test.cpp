// Graph and rule logic on hand-built snapshots: each test is one situation
// from the field, reduced to the facts the collector would record.
#include <fcntl.h>
#include <poll.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "hangtrace/analysis.h"
#include "hangtrace/report.h"
#include "hangtrace/snapshot_json.h"
#include "snapshot_builder.h"

namespace hangtrace {
namespace {

constexpr int64_t kRead = HT_NR_read, kPoll = HT_NR_poll, kRecvfrom = HT_NR_recvfrom, kWait4 = HT_NR_wait4,
                  kNanosleep = HT_NR_nanosleep;

using testing::in_syscall;
using testing::mutex_bytes;
using testing::sem_bytes;
using testing::SnapshotBuilder;

const Finding* find_kind(const Diagnosis& d, const std::string& kind) {
  for (const auto& f : d.findings)
    if (finding_kind_name(f.kind) == kind) return &f;
  return nullptr;
}

// A thread in poll() on `fd` (POLLIN) with a 5 s timeout: a DataLoader
// waiting on its queue.
void poll_with_timeout(SnapshotBuilder& b, int pid, int tid, int fd) {
  ThreadInfo& t = b.thread(pid, tid);
  in_syscall(t, kPoll, {0x5000, 1, 5000});
  t.memory.poll_fds = {{fd, POLLIN}};
  t.memory.timeout_s = 5.0;
}

bool has_pid(const Finding& f, int pid) { return std::count(f.pids.begin(), f.pids.end(), pid) > 0; }

// The seed report: workers forked while a background thread of main held a
// lock; each worker blocks on its copy; main polls the result pipe (5 s loop).
SnapshotBuilder fork_inherited_lock() {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  b.proc(200, 100, ProcessRole::Descendant);
  b.proc(201, 100, ProcessRole::Descendant);
  poll_with_timeout(b, 100, 100, 5);
  b.futex_wait(100, 101, 0x9000, false, sem_bytes(1, 128));  // holder thread waits on its own event
  b.futex_wait(200, 200, 0x4000, false, mutex_bytes(2, 101));
  b.futex_wait(201, 201, 0x4000, false, mutex_bytes(2, 101));
  for (int pid : {100, 200, 201}) {
    b.fd(pid, 5, FdKind::Pipe, 777, O_RDONLY, pid == 100 ? 0 : -1);
    b.fd(pid, 6, FdKind::Pipe, 777, O_WRONLY);
  }
  return b;
}

// The main process connected to a worker's listening unix socket (as
// torch's file-descriptor sharing does) and reads the answer before the
// worker accepted: the other end sits in the listener's accept queue, held by
// no fd yet. The worker holding the listener will accept it: no dead peer.
TEST(Analysis, AConnectionNotAcceptedYetWaitsOnTheListenersHolder) {
  auto reading_before_accept = [](uint64_t pending_on_listener) {
    SnapshotBuilder b(100);
    b.proc(100, 1, ProcessRole::Target);
    b.proc(200, 100, ProcessRole::Descendant);
    ThreadInfo& main = b.thread(100, 100, 'S', 30.0);
    in_syscall(main, kRead, {14, 0x1000, 4});
    b.thread(200, 200, 'S', 30.0);
    in_syscall(b.find(200)->threads.back(), kPoll, {0x5000, 1, static_cast<uint64_t>(-1)});
    b.fd(100, 14, FdKind::Socket, 71);
    b.fd(200, 9, FdKind::Socket, 90);  // the listener
    SocketInfo client{71, 0, "unix", "CONNECTED", "", "", 0, 0, 0, true};
    client.pending_on_listener = pending_on_listener;
    b.s.sockets.push_back(client);
    b.s.sockets.push_back({90, 0, "unix", "LISTEN", "/tmp/pymp-x/listener-1", "", 0, 0, 0, true});
    return b;
  };
  Diagnosis gone = diagnose(reading_before_accept(0).s);  // of_kind points into it: kept alive
  EXPECT_EQ(testing::of_kind(gone, FindingKind::DeadPeer).size(), 1u);
  SnapshotBuilder pending = reading_before_accept(90);
  Diagnosis d = diagnose(pending.s);
  EXPECT_TRUE(testing::of_kind(d, FindingKind::DeadPeer).empty());
  const WaitObject& o = d.graph.objects.at("socket:[71]");
  ASSERT_EQ(o.releaser_processes.size(), 1u);
  EXPECT_EQ(o.releaser_processes[0].pid, 200);
  ASSERT_FALSE(o.notes.empty());
  EXPECT_EQ(o.notes.back(), "not accepted yet by the listening unix socket:[90] /tmp/pymp-x/listener-1");
  // Through the snapshot's JSON and back, the same.
  auto reloaded = snapshot_from_json(snapshot_to_json(pending.s));
  ASSERT_TRUE(reloaded.ok()) << reloaded.error();
  Diagnosis again = diagnose(*reloaded);
  EXPECT_TRUE(testing::of_kind(again, FindingKind::DeadPeer).empty());
}

TEST(Analysis, ForkInheritedLockIsOrphanedAndCertain) {
  SnapshotBuilder b = fork_inherited_lock();
  Diagnosis d = diagnose(b.s);
  ASSERT_FALSE(d.findings.empty());
  const Finding& f = d.findings.front();
  EXPECT_STREQ(finding_kind_name(f.kind), "orphaned-lock");
  EXPECT_EQ(f.confidence, Confidence::Certain);
  EXPECT_EQ(f.severity, Severity::Critical);
  EXPECT_TRUE(has_pid(f, 200));
  EXPECT_TRUE(has_pid(f, 201));
  EXPECT_EQ(f.details["owner_tid"], 101);
  EXPECT_NE(f.details["reason"].get<std::string>().find("fork"), std::string::npos);
  // The chain starts at main and reaches a worker through the result pipe.
  ASSERT_FALSE(f.chain.empty());
  EXPECT_NE(f.chain.front().from.find("main 100"), std::string::npos);
  EXPECT_NE(f.chain.front().to.find("pipe:[777]"), std::string::npos);
  EXPECT_EQ(d.verdict.status, "hang");
  EXPECT_EQ(exit_status_for(d), 2);
  EXPECT_EQ(find_kind(d, "deadlock-cycle"), nullptr) << "main and its own helper thread are no cycle";
}

TEST(Analysis, SingleThreadedPrivateFutexWithoutOwnerIsOrphaned) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  b.proc(200, 100, ProcessRole::Descendant);
  ThreadInfo& main = b.thread(100, 100);
  in_syscall(main, kWait4, {200, 0, 0});
  b.futex_wait(200, 200, 0x4000, false, sem_bytes(1, 128));  // a Python threading.Lock copy
  Diagnosis d = diagnose(b.s);
  const Finding* f = find_kind(d, "orphaned-lock");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->confidence, Confidence::Certain);
  EXPECT_TRUE(f->details["owner_tid"].is_null());
  EXPECT_NE(f->details["reason"].get<std::string>().find("single thread"), std::string::npos);
  // main waits for that child: the chain says so.
  ASSERT_GE(f->chain.size(), 2u);
  EXPECT_NE(f->chain[0].to.find("child process 200"), std::string::npos);
}

TEST(Analysis, LockInWorkerWhoseOtherThreadsAreStuckIsOrphaned) {
  // A worker with an idle helper thread parked on a condition only the
  // worker's main thread would signal.
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  b.proc(200, 100, ProcessRole::Descendant);
  ThreadInfo& main = b.thread(100, 100);
  in_syscall(main, kWait4, {200, 0, 0});
  b.futex_wait(200, 200, 0x4000, false, sem_bytes(1, 128));
  b.futex_wait(200, 201, 0x8000, false);
  Diagnosis d = diagnose(b.s);
  const Finding* f = find_kind(d, "orphaned-lock");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->confidence, Confidence::Certain) << "every thread that could unlock it waits with no timeout";
  // Every stuck thread of the closed process, the lock's waiter first.
  EXPECT_EQ(f->tids, (std::vector<int>{200, 201}));
  EXPECT_EQ(d.verdict.status, "hang");

  // If the helper thread waits with a timeout (and did nothing), it is probable.
  b.find(200)->threads[1].memory.timeout_s = 1.0;
  Diagnosis timed = diagnose(b.s);
  f = find_kind(timed, "orphaned-lock");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->confidence, Confidence::Probable);
}

// Four threads of one process queue on a lock whose holder sleeps holding it
// (lock contention). Read one by one, each can read as waiting on it: the
// holder's wait was read an instant before it got the lock. A thread that ran
// after its wait was read (schedstat's run count moved) is not in that wait
// for good, so nothing is orphaned; if no thread ran again, it is.
TEST(Analysis, AContendedLockWhoseHolderRanAfterItsWaitWasReadIsNoOrphanedLock) {
  auto contended = [](bool holder_ran) {
    SnapshotBuilder b(100);
    b.proc(100, 1, ProcessRole::Target);
    for (int tid : {100, 101, 102, 103}) {
      ThreadInfo& t = b.futex_wait(100, tid, 0x4000, false, sem_bytes(2, 128), std::nullopt, 0.004);
      t.runs_at_read = t.runs_end = 5000 + static_cast<uint64_t>(tid);
    }
    if (holder_ran) b.find(100)->threads[1].runs_end += 3;
    return b;
  };
  Diagnosis stuck = diagnose(contended(false).s);
  const Finding* f = find_kind(stuck, "orphaned-lock");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->confidence, Confidence::Certain);
  EXPECT_FALSE(stuck.graph.threads.at(101).woke);

  SnapshotBuilder moving = contended(true);
  Diagnosis d = diagnose(moving.s);
  EXPECT_TRUE(d.graph.threads.at(101).woke);
  EXPECT_FALSE(d.graph.threads.at(102).woke);
  EXPECT_EQ(find_kind(d, "orphaned-lock"), nullptr);
  EXPECT_EQ(find_kind(d, "deadlock-cycle"), nullptr);
  EXPECT_NE(d.verdict.status, "hang") << d.verdict.summary;
  // Through the snapshot's JSON (a bundle) and back, the same.
  auto reloaded = snapshot_from_json(snapshot_to_json(moving.s));
  ASSERT_TRUE(reloaded.ok()) << reloaded.error();
  Diagnosis again = diagnose(*reloaded);
  EXPECT_TRUE(again.graph.threads.at(101).woke);
  EXPECT_EQ(find_kind(again, "orphaned-lock"), nullptr);
}

TEST(Analysis, TimedLockWaitInSingleThreadIsOnlyProbable) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  b.futex_wait(100, 100, 0x4000, false, sem_bytes(1, 128), 1.0);
  Diagnosis d = diagnose(b.s);
  const Finding* f = find_kind(d, "orphaned-lock");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->confidence, Confidence::Probable);
}

TEST(Analysis, CrossProcessCycleThroughPipeAndSharedMutex) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  b.proc(200, 100, ProcessRole::Descendant);
  ThreadInfo& parent = b.thread(100, 100);
  in_syscall(parent, kRead, {3, 0x1000, 4});
  b.fd(100, 3, FdKind::Pipe, 42, O_RDONLY, 0);
  b.fd(200, 4, FdKind::Pipe, 42, O_WRONLY);
  b.shared_map(100, 0x7000000, 99, "/dev/zero (deleted)");
  b.shared_map(200, 0x7000000, 99, "/dev/zero (deleted)");
  b.futex_wait(200, 200, 0x7000000, true, mutex_bytes(2, 100, 128));
  Diagnosis d = diagnose(b.s);
  ASSERT_FALSE(d.findings.empty());
  const Finding& f = d.findings.front();
  EXPECT_STREQ(finding_kind_name(f.kind), "deadlock-cycle");
  EXPECT_EQ(f.confidence, Confidence::Certain);
  EXPECT_TRUE(has_pid(f, 100));
  EXPECT_TRUE(has_pid(f, 200));
  ASSERT_EQ(f.chain.size(), 4u);
  EXPECT_NE(f.chain[0].to.find("pipe:[42]"), std::string::npos);
  EXPECT_NE(f.chain[2].to.find("pthread mutex"), std::string::npos);
  EXPECT_NE(f.chain[3].to.find("main 100"), std::string::npos);
  EXPECT_EQ(d.deadlocked_tids, (std::vector<int>{100, 200}));
}

TEST(Analysis, SemaphoreCycleAcrossProcessesIsFoundWithoutOwner) {
  // main holds a multiprocessing.Lock (a shared semaphore) and reads the
  // result pipe; the worker waits on the semaphore.
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  b.proc(200, 100, ProcessRole::Descendant);
  ThreadInfo& main = b.thread(100, 100);
  in_syscall(main, kRead, {3, 0x1000, 4});
  for (int pid : {100, 200}) {
    b.fd(pid, 3, FdKind::Pipe, 42, O_RDONLY, 0);
    b.fd(pid, 4, FdKind::Pipe, 42, O_WRONLY);
    b.shared_map(pid, 0x7000000, 55, "/dev/shm/sem.mp-abc (deleted)");
  }
  b.futex_wait(200, 200, 0x7000000, true, sem_bytes(1, 0));
  Diagnosis d = diagnose(b.s);
  const Finding* f = find_kind(d, "deadlock-cycle");
  ASSERT_NE(f, nullptr);
  EXPECT_TRUE(has_pid(*f, 100) && has_pid(*f, 200));
  EXPECT_EQ(f->confidence, Confidence::Certain);
  EXPECT_NE(f->summary.find("semaphore"), std::string::npos);
}

TEST(Analysis, ReaderHoldingItsOwnWriteEndIsDeadPeer) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  ProcessInfo& zombie = b.proc(101, 100, ProcessRole::Descendant);
  zombie.state = 'Z';
  ThreadInfo& reader = b.thread(100, 100);
  in_syscall(reader, kRead, {3, 0x1000, 4});
  b.fd(100, 3, FdKind::Pipe, 42, O_RDONLY, 0);
  b.fd(100, 4, FdKind::Pipe, 42, O_WRONLY);
  Diagnosis d = diagnose(b.s);
  const Finding* f = find_kind(d, "dead-peer");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->confidence, Confidence::Certain);
  EXPECT_TRUE(has_pid(*f, 100));
  bool zombie_named = false;
  for (const auto& e : f->evidence) zombie_named |= e.find("101") != std::string::npos;
  EXPECT_TRUE(zombie_named);
}

TEST(Analysis, PipeWithQueuedDataIsNotAHang) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  ThreadInfo& reader = b.thread(100, 100);
  in_syscall(reader, kRead, {3, 0x1000, 4});
  b.fd(100, 3, FdKind::Pipe, 42, O_RDONLY, 16);
  b.find(100)->fds.back().ready_events = 1;
  b.fd(100, 4, FdKind::Pipe, 42, O_WRONLY);
  Diagnosis d = diagnose(b.s);
  EXPECT_TRUE(d.findings.empty());
  EXPECT_EQ(d.verdict.status, "ok");
  EXPECT_EQ(exit_status_for(d), 0);
}

// A healthy DataLoader: main polls the result pipe with a timeout, workers
// wait for indices with a timeout, one worker is computing.
TEST(Analysis, HealthyLoaderHasNoCriticalFinding) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  b.proc(200, 100, ProcessRole::Descendant);
  b.proc(201, 100, ProcessRole::Descendant);
  poll_with_timeout(b, 100, 100, 5);
  for (int pid : {100, 200, 201}) {
    b.fd(pid, 5, FdKind::Pipe, 777, O_RDONLY, 0);
    b.fd(pid, 6, FdKind::Pipe, 777, O_WRONLY);
    b.fd(pid, 7, FdKind::Pipe, 888, O_RDONLY, 0);
    b.fd(pid, 8, FdKind::Pipe, 888, O_WRONLY);
  }
  poll_with_timeout(b, 200, 200, 7);
  b.thread(201, 201, 'R');
  Diagnosis d = diagnose(b.s);
  for (const auto& f : d.findings) EXPECT_NE(f.severity, Severity::Critical) << f.summary;
  EXPECT_EQ(exit_status_for(d), 0);
}

TEST(Analysis, TimedWaitsWithoutProgressAreAProbableCycle) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  b.proc(200, 100, ProcessRole::Descendant);
  poll_with_timeout(b, 100, 100, 5);
  b.fd(100, 5, FdKind::Pipe, 777, O_RDONLY, 0);
  b.fd(200, 6, FdKind::Pipe, 777, O_WRONLY);
  b.fd(200, 7, FdKind::Pipe, 888, O_RDONLY, 0);
  b.fd(100, 8, FdKind::Pipe, 888, O_WRONLY);
  poll_with_timeout(b, 200, 200, 7);
  Diagnosis d = diagnose(b.s);
  const Finding* f = find_kind(d, "deadlock-cycle");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->confidence, Confidence::Probable);

  // The same picture while the worker burns CPU between samples: no hang.
  b.find(200)->threads[0].cpu_ns_end = 50'000'000;
  Diagnosis live = diagnose(b.s);
  EXPECT_EQ(find_kind(live, "deadlock-cycle"), nullptr);
  EXPECT_EQ(exit_status_for(live), 0);
}

TEST(Analysis, NetworkWaitNamesEndpointsAndLocalPeer) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  b.proc(200, 100, ProcessRole::Descendant);
  b.proc(300, 1, ProcessRole::Peer, "silent_server");
  ThreadInfo& main = b.thread(100, 100);
  in_syscall(main, kRead, {5, 0, 4});
  b.fd(100, 5, FdKind::Pipe, 777, O_RDONLY, 0);
  b.fd(200, 6, FdKind::Pipe, 777, O_WRONLY);
  ThreadInfo& w = b.thread(200, 200);
  in_syscall(w, kRecvfrom, {9, 0, 1024});
  w.kernel->off_cpu_ns = 30'000'000'000ull;
  b.fd(200, 9, FdKind::Socket, 5000);
  b.fd(300, 4, FdKind::Socket, 5001);
  ThreadInfo& server = b.thread(300, 300);
  in_syscall(server, kNanosleep, {0x1000});
  server.memory.timeout_s = 3600;
  b.tcp_pair(5000, 40000, 5001, 5000);
  Diagnosis d = diagnose(b.s);
  const Finding* f = find_kind(d, "network-wait");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, Severity::Critical);
  EXPECT_TRUE(has_pid(*f, 200));
  EXPECT_EQ(f->details["remote"], "127.0.0.1:5000");
  EXPECT_EQ(f->details["peer_pids"], nlohmann::json::array({300}));
  EXPECT_NEAR(f->details["blocked_s"].get<double>(), 30.0, 1e-6);

  // Below the stall threshold it is not a finding at all.
  AnalysisOptions patient;
  patient.stall_after_s = 60;
  EXPECT_EQ(find_kind(diagnose(b.s, patient), "network-wait"), nullptr);
}

// torch.distributed's TCPStore: rank 0 runs the store's server loop (poll
// over its listening socket and the connections it accepted) and each rank a
// client listener thread polling its connection for pushed callbacks. Both
// wait forever on idle connections while the job runs: no network-wait. The
// same client while the server works instead of reading it: a network-wait.
TEST(Analysis, IdleConnectionsOfAServerLoopAreNotNetworkWaits) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  b.proc(200, 1, ProcessRole::Descendant);
  b.thread(100, 100, 'R');
  b.thread(200, 200, 'R');
  auto poller = [&](int pid, int tid, std::vector<std::pair<int, uint32_t>> fds) {
    ThreadInfo& t = b.thread(pid, tid);
    in_syscall(t, kPoll, {0x5000, fds.size(), static_cast<uint64_t>(-1)});
    t.memory.poll_fds = std::move(fds);
    t.kernel->off_cpu_ns = 30'000'000'000ull;
  };
  poller(100, 101, {{6, POLLIN}, {7, POLLIN}, {8, POLLIN}});
  poller(100, 102, {{9, POLLIN}});
  poller(200, 201, {{9, POLLIN}});
  b.fd(100, 6, FdKind::Socket, 6000);
  b.fd(100, 7, FdKind::Socket, 6001);
  b.fd(100, 8, FdKind::Socket, 6003);
  b.fd(100, 9, FdKind::Socket, 6002);
  b.fd(200, 9, FdKind::Socket, 6004);
  b.tcp_listen(6000, "0.0.0.0:29500");
  b.tcp_pair(6001, 29500, 6002, 41000);
  b.tcp_pair(6003, 29500, 6004, 41002);
  Diagnosis idle = diagnose(b.s);
  EXPECT_EQ(find_kind(idle, "network-wait"), nullptr) << idle.verdict.summary;

  // The same server loop outside the job (a local service): it may have
  // handed the request to a thread that is stuck; its clients' waits count.
  b.find(100)->role = ProcessRole::Peer;
  b.s.target_pid = 200;
  b.find(200)->role = ProcessRole::Target;
  Diagnosis served = diagnose(b.s);
  const Finding* client = find_kind(served, "network-wait");
  ASSERT_NE(client, nullptr) << served.verdict.summary;
  EXPECT_TRUE(has_pid(*client, 200));
  b.find(100)->role = ProcessRole::Target;
  b.s.target_pid = 100;
  b.find(200)->role = ProcessRole::Descendant;

  // The server thread busy elsewhere (not reading its connections): the
  // clients' waits are for it.
  ThreadInfo& server = *std::find_if(b.find(100)->threads.begin(), b.find(100)->threads.end(),
                                     [](const ThreadInfo& t) { return t.tid == 101; });
  in_syscall(server, kNanosleep, {0x1000});
  server.memory.poll_fds.clear();
  server.memory.timeout_s = 3600;
  Diagnosis busy = diagnose(b.s);
  const Finding* f = find_kind(busy, "network-wait");
  ASSERT_NE(f, nullptr) << busy.verdict.summary;
  EXPECT_EQ(f->details["remote"], "127.0.0.1:29500");
}

TEST(Analysis, RemoteNetworkPeerIsExternal) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  ThreadInfo& main = b.thread(100, 100);
  in_syscall(main, kRecvfrom, {9, 0, 1024});
  b.fd(100, 9, FdKind::Socket, 5000);
  b.s.sockets.push_back(
      {5000, 0, "tcp", "ESTABLISHED", "10.0.0.2:40000", "93.184.216.34:443", 0, 0, 0, false});
  Diagnosis d = diagnose(b.s);
  const Finding* f = find_kind(d, "network-wait");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->details["remote_on_this_host"], false);
  EXPECT_EQ(f->severity, Severity::Critical);  // the main thread itself is stuck on it
  EXPECT_EQ(find_kind(d, "deadlock-cycle"), nullptr);
}

TEST(Analysis, ShmNearlyFullIsReportedWithSegments) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  b.thread(100, 100, 'R');
  b.s.shm.available = true;
  b.s.shm.mount_path = "/dev/shm";
  b.s.shm.size_bytes = 64ull << 20;
  b.s.shm.used_bytes = 62ull << 20;
  b.s.shm.largest.push_back({"torch_1234_abc", 12ull << 20, 12ull << 20, {200}});
  Diagnosis d = diagnose(b.s);
  const Finding* f = find_kind(d, "shm-exhausted");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->details["segments"][0]["name"], "torch_1234_abc");
  EXPECT_TRUE(has_pid(*f, 200));
  b.s.shm.used_bytes = 10ull << 20;
  EXPECT_EQ(find_kind(diagnose(b.s), "shm-exhausted"), nullptr);
}

TEST(Analysis, SelfDeadlockOnOwnMutex) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  b.thread(100, 100, 'R');
  b.futex_wait(100, 101, 0x4000, false, mutex_bytes(2, 101));
  Diagnosis d = diagnose(b.s);
  const Finding* f = find_kind(d, "deadlock-cycle");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->tids, (std::vector<int>{101}));
}

// main 100 polls two pipes, each written by a child that sleeps: in the
// text, each pipe is drawn with its own releaser under it (siblings), not
// the second pipe's lines between the first and its releaser.
TEST(Analysis, TheWaitChainDrawsEachObjectWithItsOwnReleasers) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  ThreadInfo& main = b.thread(100, 100, 'S', 60.0);
  testing::in_syscall(main, HT_NR_poll, {0x7000, 2, static_cast<uint64_t>(-1)});
  main.memory.poll_fds = {{5, POLLIN}, {6, POLLIN}};
  b.fd(100, 5, FdKind::Pipe, 900, O_RDONLY, 0);
  b.fd(100, 6, FdKind::Pipe, 901, O_RDONLY, 0);
  for (int child : {200, 201}) {
    b.proc(child, 100, ProcessRole::Descendant);
    testing::in_syscall(b.thread(child, child, 'S', 60.0), HT_NR_pause, {});
    b.fd(child, 7, FdKind::Pipe, child == 200 ? 900 : 901, O_WRONLY);
  }
  Diagnosis d = diagnose(b.s);
  std::string text = render_text(b.s, d);
  const size_t first = text.find("waits on pipe:[900]"), first_releaser = text.find("released by worker 200"),
               second = text.find("waits on pipe:[901]"),
               second_releaser = text.find("released by worker 201");
  ASSERT_NE(first, std::string::npos) << text;
  ASSERT_NE(second_releaser, std::string::npos) << text;
  EXPECT_LT(first, first_releaser) << text;
  EXPECT_LT(first_releaser, second) << text;
  EXPECT_LT(second, second_releaser) << text;
}

TEST(Analysis, ReportsRenderVerdictFirstAndSchema) {
  SnapshotBuilder b = fork_inherited_lock();
  Diagnosis d = diagnose(b.s);
  std::string text = render_text(b.s, d);
  size_t verdict = text.find("VERDICT: HANG (orphaned-lock, certain)");
  ASSERT_NE(verdict, std::string::npos) << text;
  EXPECT_LT(verdict, text.find("PROCESSES AND THREADS"));
  EXPECT_NE(text.find("WAIT CHAIN"), std::string::npos);
  nlohmann::json j = render_json(b.s, d);
  EXPECT_EQ(j["schema"], kReportSchema);
  EXPECT_EQ(j["verdict"]["status"], "hang");
  ASSERT_TRUE(j["findings"].is_array());
  for (const auto& f : j["findings"]) {
    for (const char* key : {"id", "kind", "severity", "confidence", "pids", "tids", "summary", "chain",
                            "evidence", "advice", "details"})
      EXPECT_TRUE(f.contains(key)) << key;
  }
  ASSERT_EQ(j["processes"].size(), 3u);
  const auto& t = j["processes"][1]["threads"][0];
  EXPECT_EQ(t["wait"]["kind"], "futex");
  EXPECT_NEAR(t["blocked_s"].get<double>(), 60.0, 1e-6);
}

}  // namespace
}  // namespace hangtrace
