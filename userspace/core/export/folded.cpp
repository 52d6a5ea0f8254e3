// Blocked time as folded stacks (docs/exports.md): the FoldedProfile every
// stack-shaped export is drawn from, and Brendan Gregg's folded text.
#include <fmt/format.h>

#include <cmath>
#include <map>
#include <utility>

#include "common.h"
#include "hangtrace/exports.h"
#include "hangtrace/stacks.h"

namespace hangtrace {
namespace {

using namespace exports_detail;

FoldedFrame kernel_frame(const KernelFrame& k) {
  std::string name =
      k.symbol.empty() ? fmt::format("0x{:x}", k.addr) : k.symbol.substr(0, k.symbol.find('+'));
  return {clean_frame_name(name), FrameKind::Kernel, "", 0};
}

// The frames of a live stack id, innermost first; nullptr when it was not resolved.
template <typename Map, typename Key>
const auto* live_stack(const Map& stacks, const Key& key) {
  auto it = stacks.find(key);
  return it == stacks.end() ? nullptr : &it->second;
}

// A stack on its way into the profile, with what placing a waker needs.
struct Entry {
  FoldedStack stack;
  uint64_t start_ns = 0, end_ns = 0;  // live intervals only
  bool current = false;
  bool has_waker = false;
};
using EntriesByTid = std::map<int, std::vector<Entry>>;

// The current wait of every blocked thread of the snapshot.
void add_current_waits(const Snapshot& snap, const Diagnosis* d, EntriesByTid& per_tid) {
  for (const auto& p : snap.processes) {
    FoldedFrame process = synthetic_frame(fmt::format("{}/{}", p.comm.empty() ? "?" : p.comm, p.pid));
    for (const auto& t : p.threads) {
      const ThreadWait* w = nullptr;
      std::optional<double> blocked = current_blocked_s(t, d, &w);
      if (!blocked) continue;
      Entry e;
      e.current = true;
      e.stack.pid = p.pid;
      e.stack.tid = t.tid;
      e.stack.value_us = static_cast<uint64_t>(std::llround(*blocked * 1e6));
      if (snap.sampled_at_monotonic_ns) {  // when the wait began, on the live clock
        uint64_t back = static_cast<uint64_t>(*blocked * 1e9);
        e.start_ns = back < snap.sampled_at_monotonic_ns ? snap.sampled_at_monotonic_ns - back : 0;
      }
      auto& fr = e.stack.frames;
      fr.push_back(process);
      fr.push_back(synthetic_frame(fmt::format("{}/{}", t.comm.empty() ? "?" : t.comm, t.tid)));
      // Root first: the merged user stack outermost to innermost, then the kernel's.
      std::vector<UserFrame> user = merged_user_stack(t);
      for (auto it = user.rbegin(); it != user.rend(); ++it) fr.push_back(user_frame(*it));
      bool kernel_frames = false;
      if (t.kernel)
        for (auto it = t.kernel->stack.rbegin(); it != t.kernel->stack.rend(); ++it) {
          if (it->symbol.empty() && it->addr == 0) continue;
          fr.push_back(kernel_frame(*it));
          kernel_frames = true;
        }
      // No kernel stack (no BPF, or it could not be read): the wait itself is the leaf.
      if (!kernel_frames && w) fr.push_back(synthetic_frame(wait_name(*w)));
      per_tid[t.tid].push_back(std::move(e));
    }
  }
}

// Every completed blocked interval seen live.
void add_live_intervals(const LiveObservation& live, const Identities& ids, EntriesByTid& per_tid) {
  for (const auto& [tid, intervals] : live.blocked) {
    Who who = ids.of(tid);
    for (const auto& b : intervals) {
      if (b.end_ns <= b.start_ns) continue;
      Entry e;
      e.stack.pid = who.pid;
      e.stack.tid = tid;
      e.stack.value_us = (b.end_ns - b.start_ns + 500) / 1000;
      e.start_ns = b.start_ns;
      e.end_ns = b.end_ns;
      auto& fr = e.stack.frames;
      fr = {synthetic_frame(fmt::format("{}/{}", who.process_comm, who.pid)),
            synthetic_frame(fmt::format("{}/{}", who.thread_comm, tid))};
      // Root first: the user stack of the call, then the kernel's where it
      // slept; the wait itself is the leaf only when no kernel stack says it.
      if (const auto* user = live_stack(live.user_stacks, std::make_pair(tid, b.ustack_id)))
        for (auto it = user->rbegin(); it != user->rend(); ++it) fr.push_back(user_frame(*it));
      const auto* kernel = live_stack(live.kernel_stacks, b.kstack_id);
      if (kernel)
        for (auto it = kernel->rbegin(); it != kernel->rend(); ++it) fr.push_back(kernel_frame(*it));
      if (!kernel || kernel->empty()) fr.push_back(synthetic_frame(b.what));
      per_tid[tid].push_back(std::move(e));
    }
  }
}

// offwaketime's layout: after "--" the waker's kernel stack, then its user
// stack, both innermost first, then the waker itself.
void add_waker(const LiveObservation& live, Entry& target, const TraceEvent& ev, bool earlier) {
  auto& fr = target.stack.frames;
  fr.push_back(synthetic_frame("--"));
  // A wakeup from interrupt context (a timer, a packet) has "woken by"
  // whatever task the interrupt hit: the kernel stack shows the
  // interrupt, and that task's user stack means nothing here.
  bool in_interrupt = woken_from_interrupt(live, ev);
  if (const auto* kernel = live_stack(live.kernel_stacks, ev.kstack_id))
    for (const auto& k : *kernel) fr.push_back(kernel_frame(k));
  if (!in_interrupt)
    if (const auto* user = live_stack(live.user_stacks, std::make_pair(ev.waker_tid, ev.ustack_id)))
      for (const auto& f : *user) fr.push_back(user_frame(f));
  fr.push_back(
      synthetic_frame((earlier ? "earlier: " : "") + (in_interrupt ? "interrupt" : waker_frame_name(ev))));
  target.has_waker = true;
}

void add_wakers(const LiveObservation& live, EntriesByTid& per_tid) {
  // Every live wait a recorded wakeup fell into was ended by it.
  for (const auto& [tid, wakeups] : live.recent_wakeups) {
    auto it = per_tid.find(tid);
    if (it == per_tid.end()) continue;
    for (auto& e : it->second) {
      if (e.current) continue;
      for (auto w = wakeups.rbegin(); w != wakeups.rend(); ++w)
        if (e.start_ns <= w->ts_ns && w->ts_ns <= e.end_ns) {
          add_waker(live, e, *w, false);
          break;
        }
    }
  }
  // The last waker of a thread goes on the wait it ended (unless placed
  // above): the live interval around it, else the last one before it,
  // else the current wait -- marked "earlier:" when the wakeup came before
  // that wait began (it ended a shorter wait).
  for (const auto& [tid, ev] : live.last_waker) {
    auto it = per_tid.find(tid);
    if (it == per_tid.end()) continue;
    Entry* target = nullptr;
    for (auto& e : it->second)
      if (!e.current && e.start_ns <= ev.ts_ns && ev.ts_ns <= e.end_ns) target = &e;
    if (!target)
      for (auto& e : it->second)
        if (!e.current && e.end_ns <= ev.ts_ns && (!target || e.end_ns >= target->end_ns)) target = &e;
    if (!target)
      for (auto& e : it->second)
        if (e.current) target = &e;
    if (!target || target->has_waker) continue;
    bool earlier = target->current && target->start_ns && ev.ts_ns < target->start_ns;
    add_waker(live, *target, ev, earlier);
  }
}

}  // namespace

const char* frame_kind_name(FrameKind k) {
  switch (k) {
    case FrameKind::Synthetic:
      return "hangtrace";
    case FrameKind::Python:
      return "python";
    case FrameKind::Native:
      return "native";
    case FrameKind::Kernel:
      return "kernel";
  }
  return "hangtrace";
}

uint64_t FoldedProfile::total_us() const {
  uint64_t total = 0;
  for (const auto& s : stacks) total += s.value_us;
  return total;
}

FoldedProfile build_folded(const Snapshot& snap, const Diagnosis* d, const LiveObservation* live) {
  EntriesByTid per_tid;
  add_current_waits(snap, d, per_tid);
  if (live) {
    Identities ids(snap, live);
    add_live_intervals(*live, ids, per_tid);
    add_wakers(*live, per_tid);
  }

  std::map<std::string, FoldedStack> merged;
  for (auto& [tid, entries] : per_tid)
    for (auto& e : entries) {
      if (e.stack.value_us == 0) continue;
      std::string key = folded_key(e.stack.frames);
      auto [it, inserted] = merged.emplace(key, e.stack);
      if (!inserted) it->second.value_us += e.stack.value_us;
    }
  FoldedProfile out;
  for (auto& [key, s] : merged) out.stacks.push_back(std::move(s));
  return out;
}

std::string render_folded(const FoldedProfile& profile) {
  std::string out;
  for (const auto& s : profile.stacks) out += fmt::format("{} {}\n", folded_key(s.frames), s.value_us);
  return out;
}

}  // namespace hangtrace
