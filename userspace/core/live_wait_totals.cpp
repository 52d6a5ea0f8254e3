// Every streamed wait of a live window, summed per thread by what it waited
// on and who ended it: the stall profile's input (include/hangtrace/profile.h).
// Bounded: kMaxWaitTotalsPerThread keys per thread, kMaxWaitTotalThreads
// threads; what does not fit is counted in wait_totals_dropped.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>

#include "hangtrace/abi.h"
#include "hangtrace/live.h"
#include "hangtrace/syscall_nr.h"

namespace hangtrace {
namespace {

// A wakeup at most this long before the wait began still counts as the one
// that ended it: the sched concern sends one wakeup record per (waker, wakee)
// pair per 10 ms, so a thread woken by the same waker again and again carries
// the earlier record.
constexpr uint64_t kWakeupSlackNs = 20'000'000;
constexpr size_t kFileExamples = 4;

bool ended_by_timeout(const Aggregator::WaitRecord& w) {
  if (w.type == HT_EV_FUTEX_WAIT) return w.ret == -ETIMEDOUT;
  switch (w.nr) {
    // A sleep ends by its timer, whose interrupt runs on whatever task was
    // on that CPU: not a waker.
    case HT_NR_nanosleep:
    case HT_NR_clock_nanosleep:
      return true;
    case HT_NR_poll:
    case HT_NR_ppoll:
    case HT_NR_select:
    case HT_NR_pselect6:
    case HT_NR_epoll_wait:
    case HT_NR_epoll_pwait:
    case HT_NR_epoll_pwait2:
      return w.ret == 0;
    default:
      return false;
  }
}

uint32_t log2_bucket_us(uint64_t ns) {
  uint64_t us = ns / 1000;
  uint32_t b = 0;
  while (us > 1 && b + 1 < HT_HIST_BUCKETS) {
    us >>= 1;
    ++b;
  }
  return b;
}

}  // namespace

void Aggregator::add_wait_total(const WaitRecord& record) {
  WaitRecord w = record;
  if (w.start_ns < window_start_ns_) w.start_ns = std::min(window_start_ns_, w.end_ns);
  const bool timed_out = ended_by_timeout(w);
  int waker_pid = 0, waker_tid = 0;
  const TraceEvent* waker = nullptr;
  if (!timed_out) {
    auto it = obs_.last_waker.find(w.tid);
    if (it != obs_.last_waker.end() && it->second.waker_tgid > 0 &&
        it->second.ts_ns <= w.end_ns + 1'000'000 && it->second.ts_ns + kWakeupSlackNs >= w.start_ns) {
      waker = &it->second;
      waker_pid = waker->waker_tgid;
      waker_tid = waker->waker_tid;
    }
  }
  // Files: one total per mount and directory.
  uint64_t object = w.object;
  std::string_view dir;
  if (w.obj_kind == HT_OBJ_FILE && w.mnt_id) {
    size_t slash = w.file.find('/', w.file.starts_with("/") ? 1 : 0);  // the root's name is "/"
    dir = slash == std::string_view::npos ? std::string_view{} : w.file.substr(0, slash);
    object = (std::hash<std::string_view>{}(dir)*1000003u) ^ w.mnt_id;
  }
  WaitTotal* t = wait_total_of(w.tgid, w.tid, w.type, w.nr, w.obj_kind, object, waker_tid, timed_out);
  if (!t) return;
  if (!t->count) {
    t->waker_pid = waker_pid;
    if (waker) t->waker_comm = waker->waker_comm;
    t->mnt_id = w.mnt_id;
  }
  const uint64_t ns = w.end_ns > w.start_ns ? w.end_ns - w.start_ns : 0;
  ++t->count;
  t->sum_ns += ns;
  ++t->buckets[log2_bucket_us(ns)];
  t->fd = w.fd;
  if (t->ustack_id < 0) t->ustack_id = w.ustack_id;
  if (t->kstack_id < 0) t->kstack_id = w.kstack_id;
  if (!w.file.empty() && t->files.size() < kFileExamples) {
    bool known = false;
    for (const auto& f : t->files) known = known || f == w.file;
    if (!known) t->files.emplace_back(w.file);
  }
}

WaitTotal* Aggregator::wait_total_of(int tgid, int tid, uint32_t type, int64_t nr, uint32_t obj_kind,
                                     uint64_t object, int waker_tid, bool timed_out) {
  auto found = obs_.wait_totals.find(tid);
  if (found == obs_.wait_totals.end()) {
    if (obs_.wait_totals.size() >= kMaxWaitTotalThreads) {
      ++obs_.wait_totals_dropped;
      return nullptr;
    }
    found = obs_.wait_totals.emplace(tid, std::vector<WaitTotal>{}).first;
  }
  std::vector<WaitTotal>& totals = found->second;
  auto find = [&](uint64_t obj) -> WaitTotal* {
    for (auto it = totals.rbegin(); it != totals.rend(); ++it)
      if (it->type == type && it->nr == nr && it->object == obj && it->waker_tid == waker_tid &&
          it->timed_out == timed_out && it->obj_kind == obj_kind)
        return &*it;
    return nullptr;
  };
  if (WaitTotal* t = find(object)) return t;
  if (totals.size() >= kMaxWaitTotalsPerThread - kWaitTotalsForMany && object != kManyObjects) {
    object = kManyObjects;
    if (WaitTotal* t = find(object)) return t;
  }
  if (totals.size() >= kMaxWaitTotalsPerThread) {
    ++obs_.wait_totals_dropped;
    return nullptr;
  }
  WaitTotal& t = totals.emplace_back();
  t.type = type;
  t.pid = tgid;
  t.nr = nr;
  t.obj_kind = obj_kind;
  t.object = object;
  t.waker_tid = waker_tid;
  t.timed_out = timed_out;
  return &t;
}

void Aggregator::add_short_waits(int tgid, int tid, const ShortWaits& w) {
  if (!w.count) return;
  const uint32_t type = w.futex ? uint32_t{HT_EV_FUTEX_WAIT} : uint32_t{HT_EV_SYSCALL_BLOCK};
  WaitTotal* t = wait_total_of(tgid, tid, type, w.nr, w.obj_kind, w.object, w.waker_tid, w.timed_out);
  if (!t) return;
  if (w.waker_tid && !t->waker_pid) {
    t->waker_pid = w.waker_tgid;
    t->waker_comm = w.waker_comm;
  }
  t->count += w.count;
  t->sum_ns += w.sum_ns;
  for (size_t i = 0; i < std::size(w.buckets); ++i) t->buckets[i] += w.buckets[i];
  if (!w.futex) t->fd = w.fd;
}

}  // namespace hangtrace
