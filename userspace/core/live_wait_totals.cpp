// Every streamed wait of a live window, summed per thread by what it waited
// on and who ended it: the stall profile's input (include/hangtrace/profile.h).
// Bounded: kMaxWaitTotalsPerThread keys per thread, kMaxWaitTotalThreads
// threads; what does not fit is counted in wait_totals_dropped. A wait inside
// one of its thread's GPU host waits (cudaStreamSynchronize sleeping in the
// driver) is marked as such (WaitTotal::in_gpu_ns), whichever of the two
// records comes first.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>

#include "hangtrace/abi.h"
#include "hangtrace/gpu.h"
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
// A wait's edges and its GPU call's are read on different hooks, a few
// microseconds apart.
constexpr uint64_t kGpuCallSlackNs = 1'000'000;

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
  note_recent_wait(w.tid, w.start_ns, w.end_ns, ns, *t);
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
  last_totals_ = &totals;  // a map's nodes never move
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

void Aggregator::add_short_waits(int tgid, int tid, uint64_t end_ns, const ShortWaits& w) {
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
  // They took at least their sum, back from when the last one ended.
  note_recent_wait(tid, end_ns > w.sum_ns ? end_ns - w.sum_ns : 0, end_ns, w.sum_ns, *t);
}

void Aggregator::note_recent_wait(int tid, uint64_t start_ns, uint64_t end_ns, uint64_t ns, WaitTotal& t) {
  if (!ns) return;
  IntervalRing& r = ring_of(tid);
  for (const auto& [from, to] : r.gpu_calls)
    if (to && start_ns + kGpuCallSlackNs >= from && end_ns <= to + kGpuCallSlackNs) {
      t.in_gpu_ns += ns;  // its call was reported first
      return;
    }
  if (!last_totals_ || last_totals_->empty()) return;
  r.recent[r.recent_next] = {start_ns, end_ns, ns, static_cast<uint32_t>(&t - last_totals_->data())};
  r.recent_next = static_cast<uint32_t>((r.recent_next + 1) % r.recent.size());
}

void Aggregator::add_gpu_host_wait(const GpuCall& c) {
  if (!gpu_fn_is_host_wait(c.fn) || c.tid <= 0) return;
  const uint64_t start = std::max(c.start_ns, window_start_ns_);
  if (c.end_ns <= start) return;
  GpuHostWaits& h = obs_.gpu_host_waits[c.tid];
  h.pid = c.pid;
  ++h.calls;
  h.ns += c.end_ns - start;
  h.ns_by_fn[c.fn] += c.end_ns - start;
  IntervalRing& r = ring_of(c.tid);
  r.gpu_calls[r.gpu_next] = {start, c.end_ns};
  r.gpu_next = static_cast<uint32_t>((r.gpu_next + 1) % r.gpu_calls.size());
  auto totals = obs_.wait_totals.find(c.tid);
  if (totals == obs_.wait_totals.end()) return;
  for (RecentWait& w : r.recent) {
    if (!w.ns || w.start_ns + kGpuCallSlackNs < start || w.end_ns > c.end_ns + kGpuCallSlackNs) continue;
    if (w.total < totals->second.size()) totals->second[w.total].in_gpu_ns += w.ns;
    w.ns = 0;
  }
}

}  // namespace hangtrace
