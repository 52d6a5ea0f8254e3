// Epoll watch lists in the wait-for graph, as their owner makes them: a
// watch names its fd by the number it had when added, so after a close and
// a dup2 the number can name another file -- the epoll itself, or another
// epoll naming this one back. The walk must end, name what the watch was of
// when it cannot follow it, and stay bounded on lists of any length.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "hangtrace/analysis.h"
#include "snapshot_builder.h"

namespace hangtrace {
namespace {

using testing::SnapshotBuilder;

constexpr uint64_t kPipe = 42;

// Process 100's main thread in epoll_wait on fd `waited`; fds 3 (a pipe's
// read end, written by nobody) and the epolls given.
SnapshotBuilder epoll_waiter(int waited, const std::vector<FdEntry>& epolls) {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  ThreadInfo& main = b.thread(100, 100);
  testing::in_syscall(main, HT_NR_epoll_wait, {static_cast<uint64_t>(waited), 0x7f0000, 16, ~0ull});
  b.fd(100, 3, FdKind::Pipe, kPipe, 0, 0);
  for (const auto& e : epolls) b.find(100)->fds.push_back(e);
  return b;
}

FdEntry epoll_fd(int fd, uint64_t inode, std::vector<EpollWatch> watches) {
  FdEntry e;
  e.fd = fd;
  e.kind = FdKind::Epoll;
  e.link = "anon_inode:[eventpoll]";
  e.inode = inode;
  e.epoll = std::move(watches);
  return e;
}

std::vector<std::string> labels(const WaitGraph& g, int tid) {
  std::vector<std::string> out;
  for (const auto& id : g.threads.at(tid).objects) out.push_back(g.objects.at(id).label);
  return out;
}

// Epoll 5 watched the pipe as fd 3 and, as fd 6, a file since closed; fd 6
// is now epoll 5 itself (dup2): its inode is not the watched one's.
TEST(EpollGraph, AWatchWhoseFdNowHoldsTheEpollItselfIsNotFollowed) {
  auto b = epoll_waiter(5, {epoll_fd(5, 9000, {{3, 1, kPipe}, {6, 1, 777}}), epoll_fd(6, 9000, {})});
  WaitGraph g = build_wait_graph(b.s);
  const auto names = labels(g, 100);
  ASSERT_EQ(names.size(), 2u);
  EXPECT_NE(names[0].find("pipe:[42]"), std::string::npos) << names[0];
  EXPECT_EQ(names[1], "fd 6 of 100 as epoll 5 added it");
  const WaitObject& stale = g.objects.at(g.threads.at(100).objects[1]);
  EXPECT_EQ(stale.kind, ObjectKind::Unknown);
  ASSERT_FALSE(stale.notes.empty());
  EXPECT_EQ(stale.notes[0], "the watch is of inode 777; fd 6 now holds another file (inode 9000)");
}

// Two epolls whose watches name each other by number with no inode to tell
// (a kernel that prints none): the walk stops at the kernel's nesting bound.
TEST(EpollGraph, EpollsNamingEachOtherEndAtTheNestingBound) {
  auto b = epoll_waiter(5, {epoll_fd(5, 0, {{6, 1, 0}, {3, 1, kPipe}}), epoll_fd(6, 0, {{5, 1, 0}})});
  WaitGraph g = build_wait_graph(b.s);
  bool bound_said = false;
  for (const auto& [id, o] : g.objects)
    for (const auto& n : o.notes) bound_said |= n == "nested deeper than the kernel allows (4): not followed";
  EXPECT_TRUE(bound_said);
  bool pipe = false;
  for (const auto& name : labels(g, 100)) pipe |= name.find("pipe:[42]") != std::string::npos;
  EXPECT_TRUE(pipe);
}

// 100,000 watches (of fds since closed: an object each): followed to the
// bound, the rest one object that says how many; the summary names the
// first few.
TEST(EpollGraph, AWatchListOfAnyLengthIsFollowedToTheBound) {
  std::vector<EpollWatch> many;
  for (int i = 0; i < 100000; ++i) many.push_back(EpollWatch{1000 + i, 1, 0});
  auto b = epoll_waiter(5, {epoll_fd(5, 9000, many)});
  WaitGraph g = build_wait_graph(b.s);
  const auto& w = g.threads.at(100);
  EXPECT_EQ(w.objects.size(), 4097u);
  const WaitObject& rest = g.objects.at(w.objects.back());
  EXPECT_EQ(rest.label, "95904 more fds epoll 5 of 100 watches");
  EXPECT_LT(w.summary.size(), 2000u) << w.summary.size();
  EXPECT_NE(w.summary.find("and 4081 more"), std::string::npos) << w.summary.substr(0, 300);
}

}  // namespace
}  // namespace hangtrace
