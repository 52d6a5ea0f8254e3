#include "hangtrace/wait_sampler.h"

#include <gtest/gtest.h>
#include <linux/futex.h>
#include <sys/syscall.h>

#include <cstring>

#include "hangtrace/abi.h"
#include "hangtrace/syscall_nr.h"

namespace hangtrace {
namespace {

constexpr uint64_t kS = 1'000'000'000ull;

TaskBrief blocked(int tid, int64_t nr, std::initializer_list<uint64_t> args, uint64_t off_cpu_ns,
                  uint64_t nvcsw, int tgid = 100) {
  TaskBrief t;
  t.tid = tid;
  t.tgid = tgid;
  t.off_cpu_ns = off_cpu_ns;
  t.nvcsw = nvcsw;
  t.syscall_nr = nr;
  size_t i = 0;
  for (uint64_t a : args) t.syscall_args[i++] = a;
  return t;
}

TaskBrief running(int tid, uint64_t nvcsw, int tgid = 100) {
  TaskBrief t;
  t.tid = tid;
  t.tgid = tgid;
  t.on_cpu = true;
  t.nvcsw = nvcsw;
  return t;
}

constexpr int64_t kFutex = HT_NR_futex, kRead = HT_NR_read, kPoll = HT_NR_poll, kEpollWait = HT_NR_epoll_wait,
                  kNanosleep = HT_NR_nanosleep, kWait4 = HT_NR_wait4, kGetpid = SYS_getpid;
constexpr uint64_t kFutexWaitPrivate = FUTEX_WAIT_PRIVATE, kFutexWakePrivate = FUTEX_WAKE_PRIVATE,
                   kFutexWaitBitsetPrivate = FUTEX_WAIT_BITSET_PRIVATE;

TEST(ClassifySampledCall, TellsWaitsTheirKindAndWhetherTheyCanTimeOut) {
  uint64_t untimed_futex[6] = {0x1000, kFutexWaitPrivate, 0, 0, 0, 0};
  SampledCall c = classify_sampled_call(kFutex, untimed_futex);
  EXPECT_TRUE(c.is_wait);
  EXPECT_EQ(c.wait_kind, HT_WAIT_FUTEX);
  EXPECT_FALSE(c.timed);

  uint64_t timed_futex[6] = {0x1000, kFutexWaitBitsetPrivate, 0, 0x7ffd0000, 0, 0xffffffff};
  EXPECT_TRUE(classify_sampled_call(kFutex, timed_futex).timed);

  uint64_t wake[6] = {0x1000, kFutexWakePrivate, 1, 0, 0, 0};
  EXPECT_FALSE(classify_sampled_call(kFutex, wake).is_wait);

  uint64_t read_args[6] = {7, 0x5000, 4, 0, 0, 0};
  c = classify_sampled_call(kRead, read_args);
  EXPECT_TRUE(c.is_wait);
  EXPECT_EQ(c.wait_kind, HT_WAIT_IO);
  EXPECT_EQ(c.fd, 7);
  EXPECT_FALSE(c.timed);

  uint64_t poll_forever[6] = {0x5000, 1, static_cast<uint64_t>(-1), 0, 0, 0};
  uint64_t poll_5s[6] = {0x5000, 1, 5000, 0, 0, 0};
  EXPECT_FALSE(classify_sampled_call(kPoll, poll_forever).timed);
  EXPECT_TRUE(classify_sampled_call(kPoll, poll_5s).timed);
  EXPECT_EQ(classify_sampled_call(kPoll, poll_5s).wait_kind, HT_WAIT_POLL);

  uint64_t epoll_forever[6] = {4, 0x5000, 8, 0xffffffff, 0, 0};
  EXPECT_FALSE(classify_sampled_call(kEpollWait, epoll_forever).timed);

  uint64_t none[6] = {};
  c = classify_sampled_call(kNanosleep, none);
  EXPECT_EQ(c.wait_kind, HT_WAIT_SLEEP);
  EXPECT_TRUE(c.timed);
  c = classify_sampled_call(kWait4, none);
  EXPECT_EQ(c.wait_kind, HT_WAIT_CHILD);
  EXPECT_FALSE(c.timed);
  EXPECT_FALSE(classify_sampled_call(kGetpid, none).is_wait);
}

TEST(WaitSampler, OneWaitSeenByTwoPassesEndsWhenTheThreadHasRun) {
  WaitSampler sampler(1 * kS);
  auto pass = sampler.update(10 * kS, {blocked(101, kFutex, {0x1000, kFutexWaitPrivate}, kS / 2, 5)});
  EXPECT_TRUE(pass.ended.empty());
  pass = sampler.update(11 * kS, {blocked(101, kFutex, {0x1000, kFutexWaitPrivate}, kS / 2 + kS, 5)});
  EXPECT_TRUE(pass.ended.empty());
  ASSERT_EQ(sampler.in_progress().size(), 1u);
  EXPECT_EQ(sampler.in_progress().at(101).start_ns, 10 * kS - kS / 2);

  pass = sampler.update(12 * kS, {running(101, 6)});
  ASSERT_EQ(pass.ended.size(), 1u);
  const SampledWait& w = pass.ended[0];
  EXPECT_EQ(w.tid, 101);
  EXPECT_EQ(w.wait_kind, HT_WAIT_FUTEX);
  EXPECT_EQ(w.start_ns, 10 * kS - kS / 2);
  EXPECT_EQ(w.duration_ns(), kS + kS / 2);  // to the last pass that saw it: a lower bound
  EXPECT_TRUE(w.woken);
  EXPECT_EQ(pass.woken_from_untimed.at(101), 1u);
  EXPECT_TRUE(sampler.in_progress().empty());
}

TEST(WaitSampler, ATimedWaitThatEndsIsNoWakeup) {
  WaitSampler sampler(1 * kS);
  uint64_t timeout = 0x7ffd0000;
  sampler.update(10 * kS, {blocked(101, kFutex, {0x1000, kFutexWaitBitsetPrivate, 0, timeout}, 2 * kS, 5)});
  // The DataLoader's loop: the same call again after its timeout.
  auto pass =
      sampler.update(16 * kS, {blocked(101, kFutex, {0x1000, kFutexWaitBitsetPrivate, 0, timeout}, kS, 6)});
  ASSERT_EQ(pass.ended.size(), 1u);
  EXPECT_TRUE(pass.ended[0].timed);
  EXPECT_TRUE(pass.woken_from_untimed.empty());
  // The next wait began when the thread last left the CPU.
  EXPECT_EQ(sampler.in_progress().at(101).start_ns, 15 * kS);
}

TEST(WaitSampler, ShortWaitsAreNotReportedButTheirWakeupsCount) {
  WaitSampler sampler(1 * kS);
  // A ping-pong: blocked in read at every pass, a different read each time.
  uint64_t nvcsw = 10;
  WaitSampler::Pass pass;
  uint64_t woken = 0;
  for (int i = 0; i < 5; ++i) {
    pass = sampler.update((10 + i) * kS, {blocked(101, kRead, {5, 0x5000, 1}, 2000, nvcsw)});
    nvcsw += 250000;
    EXPECT_TRUE(pass.ended.empty());
    if (pass.woken_from_untimed.count(101)) woken += pass.woken_from_untimed.at(101);
  }
  EXPECT_EQ(woken, 4u);
}

TEST(WaitSampler, AThreadThatExitsWaitingEndsItsWaitWithoutAWakeup) {
  WaitSampler sampler(1 * kS);
  sampler.update(10 * kS, {blocked(101, kRead, {5}, 3 * kS, 1), running(100, 1)});
  auto pass = sampler.update(11 * kS, {running(100, 1)});
  ASSERT_EQ(pass.ended.size(), 1u);
  EXPECT_FALSE(pass.ended[0].woken);
  EXPECT_TRUE(pass.woken_from_untimed.empty());
}

TEST(WaitSampler, ACallChangeEndsTheWaitEvenWithoutASwitchSeen) {
  WaitSampler sampler(0);
  sampler.update(10 * kS, {blocked(101, kRead, {5}, kS, 1)});
  auto pass = sampler.update(11 * kS, {blocked(101, kWait4, {}, kS / 2, 1)});
  ASSERT_EQ(pass.ended.size(), 1u);
  EXPECT_EQ(pass.ended[0].nr, kRead);
  EXPECT_EQ(sampler.in_progress().at(101).nr, kWait4);
}

TEST(WaitSampler, AsksWhatAnFdIsOncePerWait) {
  int asked = 0;
  WaitSampler sampler(0, [&](int tgid, int fd) {
    ++asked;
    EXPECT_EQ(tgid, 100);
    EXPECT_EQ(fd, 9);
    return FdInfo{HT_WAIT_NET, 2, 4242};
  });
  sampler.update(10 * kS, {blocked(101, kRead, {9}, kS, 1)});
  sampler.update(11 * kS, {blocked(101, kRead, {9}, 2 * kS, 1)});
  auto pass = sampler.update(12 * kS, {running(101, 2)});
  EXPECT_EQ(asked, 1);
  ASSERT_EQ(pass.ended.size(), 1u);
  EXPECT_EQ(pass.ended[0].wait_kind, HT_WAIT_NET);
  EXPECT_EQ(pass.ended[0].fd.inode, 4242u);
}

TEST(WaitSampler, ForgetsAProcessThreads) {
  WaitSampler sampler(0);
  sampler.update(10 * kS, {blocked(101, kRead, {5}, kS, 1), blocked(201, kRead, {5}, kS, 1, 200)});
  sampler.forget_tgid(100);
  EXPECT_EQ(sampler.threads(), 1u);
  auto pass = sampler.update(11 * kS, {});
  ASSERT_EQ(pass.ended.size(), 1u);
  EXPECT_EQ(pass.ended[0].tgid, 200);
}

TEST(SampledWaitRecord, IsTheRingBufferRecordOfItsKind) {
  SampledWait w;
  w.tid = 101;
  w.tgid = 100;
  w.wait_kind = HT_WAIT_FUTEX;
  w.nr = kFutex;
  w.args[0] = 0x1000;
  w.args[1] = kFutexWaitPrivate;
  w.start_ns = 5 * kS;
  w.seen_until_ns = 8 * kS;
  w.woken = true;
  std::string raw = sampled_wait_record(w, "python3");
  ASSERT_EQ(raw.size(), sizeof(ht_futex_event));
  ht_futex_event f;
  std::memcpy(&f, raw.data(), sizeof f);
  EXPECT_EQ(f.hdr.type, static_cast<uint32_t>(HT_EV_FUTEX_WAIT));
  EXPECT_EQ(f.hdr.size, sizeof f);
  EXPECT_EQ(f.hdr.ts_ns, 8 * kS);
  EXPECT_EQ(f.hdr.tid, 101u);
  EXPECT_STREQ(f.hdr.comm, "python3");
  EXPECT_EQ(f.uaddr, 0x1000u);
  EXPECT_EQ(f.op, kFutexWaitPrivate);
  EXPECT_EQ(f.duration_ns, 3 * kS);
  EXPECT_EQ(f.ret, 0);
  EXPECT_LT(f.kstack_id, 0);

  w.wait_kind = HT_WAIT_IO;
  w.nr = kRead;
  w.args[0] = 5;
  w.fd = FdInfo{HT_WAIT_IO, 1, 777};
  raw = sampled_wait_record(w, "python3");
  ASSERT_EQ(raw.size(), sizeof(ht_syscall_event));
  ht_syscall_event e;
  std::memcpy(&e, raw.data(), sizeof e);
  EXPECT_EQ(e.hdr.type, static_cast<uint32_t>(HT_EV_SYSCALL_BLOCK));
  EXPECT_EQ(e.nr, kRead);
  EXPECT_EQ(e.fd, 5);
  EXPECT_EQ(e.obj_kind, HT_OBJ_PIPE);
  EXPECT_EQ(e.obj_inode, 777u);
  EXPECT_EQ(e.duration_ns, 3 * kS);
}

}  // namespace
}  // namespace hangtrace
