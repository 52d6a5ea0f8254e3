// A lock word records its owner as a TID of the pid namespace the threads
// that took it live in: inside a container, the container's numbering. The
// owner is translated through the NSpid of the threads sharing the lock
// before it is judged alive -- and a TID none of them has there is not
// alive, never some host thread that happens to have that number.
#include <gtest/gtest.h>

#include "hangtrace/analysis.h"
#include "snapshot_builder.h"

namespace hangtrace {
namespace {

using testing::mutex_bytes;
using testing::of_kind;
using testing::SnapshotBuilder;

// A container's main process, host pid 5000 (1 inside), waits on a private
// mutex whose word names `owner` as owner; its second thread is host TID
// 5001, TID 2 inside, and busy.
SnapshotBuilder container_lock(int owner) {
  SnapshotBuilder b(5000);
  b.proc(5000, 1, ProcessRole::Target).ns_pids = {5000, 1};
  b.futex_wait(5000, 5000, 0x4000, false, mutex_bytes(2, owner)).ns_tid = 1;
  b.running(5000, 5001).ns_tid = 2;
  return b;
}

TEST(FutexOwnerNamespace, TheOwnerIsTheContainersTidOnTheHost) {
  Diagnosis d = diagnose(container_lock(2).s);
  const WaitObject& o = d.graph.objects.at(d.graph.threads.at(5000).objects.at(0));
  ASSERT_TRUE(o.owner_tid.has_value());
  EXPECT_EQ(*o.owner_tid, 5001);
  EXPECT_FALSE(o.owner_unresolved);
  EXPECT_EQ(o.releasers, (std::vector<int>{5001}));
  bool translated = false;
  for (const auto& n : o.notes) {
    EXPECT_EQ(n.find("not a live thread"), std::string::npos) << n;
    translated |=
        n.find("owner TID 2 in the pid namespace of process 5000 (python3) is TID 5001 on the host") !=
        std::string::npos;
  }
  EXPECT_TRUE(translated) << ::testing::PrintToString(o.notes);
  EXPECT_TRUE(of_kind(d, FindingKind::OrphanedLock).empty()) << d.verdict.summary;
}

TEST(FutexOwnerNamespace, ATidNoThreadHasInTheContainerIsNotAlive) {
  SnapshotBuilder b = container_lock(7);
  b.proc(7, 1, ProcessRole::Peer);  // a host process numbered 7: not the owner
  b.thread(7, 7, 'R', 0.0);
  Diagnosis d = diagnose(b.s);
  const WaitObject& o = d.graph.objects.at(d.graph.threads.at(5000).objects.at(0));
  EXPECT_TRUE(o.owner_unresolved);
  EXPECT_TRUE(o.releasers.empty());
  EXPECT_NE(d.graph.threads.at(5000).summary.find("held by TID 7 of its pid namespace"), std::string::npos)
      << d.graph.threads.at(5000).summary;
  EXPECT_FALSE(of_kind(d, FindingKind::OrphanedLock).empty()) << d.verdict.summary;
}

// A worker forked in the container (host 5100, 3 inside) waits on its copy
// of a lock its parent's second thread (TID 2 inside, 5001 on the host) held
// at the fork: that thread is alive, but in another process.
TEST(FutexOwnerNamespace, ALockCopiedByForkNamesTheParentsThreadNotADeadOne) {
  SnapshotBuilder b = container_lock(2);
  b.find(5000)->threads.erase(b.find(5000)->threads.begin());  // main itself busy too
  b.running(5000, 5000).ns_tid = 1;
  b.proc(5100, 5000, ProcessRole::Descendant).ns_pids = {5100, 3};
  b.futex_wait(5100, 5100, 0x4000, false, mutex_bytes(2, 2)).ns_tid = 3;
  Diagnosis d = diagnose(b.s);
  auto found = of_kind(d, FindingKind::OrphanedLock);
  ASSERT_EQ(found.size(), 1u) << d.verdict.summary;
  const std::string reason = found.front()->details["reason"].get<std::string>();
  EXPECT_NE(reason.find("owner TID 5001 is a thread of process 5000"), std::string::npos) << reason;
  EXPECT_NE(reason.find("fork()"), std::string::npos) << reason;
}

TEST(FutexOwnerNamespace, OutsideAContainerTheTidIsTheHosts) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  b.futex_wait(100, 100, 0x4000, false, mutex_bytes(2, 101));
  b.running(100, 101);
  Diagnosis d = diagnose(b.s);
  const WaitObject& o = d.graph.objects.at(d.graph.threads.at(100).objects.at(0));
  EXPECT_EQ(o.owner_tid, 101);
  EXPECT_EQ(o.releasers, (std::vector<int>{101}));
}

}  // namespace
}  // namespace hangtrace
