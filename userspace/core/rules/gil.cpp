// gil-held: a thread holds the GIL of its Python process while it is itself
// blocked (a C extension or ctypes.PyDLL call that does not release the GIL,
// stuck in read() on a pipe), so every other Python thread of the process
// waits for the GIL (graph/gil_objects.cpp) and the whole process is frozen.
// The holder's own wait is the rest of the chain.
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "hangtrace/stacks.h"
#include "hangtrace/text.h"
#include "rules.h"

namespace hangtrace::rules {

namespace {

constexpr size_t kStackFrames = 12;  // frames of each holder stack in the evidence
constexpr size_t kChainHops = 6;     // hops of the holder's own wait chain
constexpr size_t kListedWaiters = 8;
// A holder blocked for less than this (or --stall-after when shorter) is in
// an ordinary short call: a job passes through such states all the time.
constexpr double kMinHeldS = 1.0;

std::string stack_text(const std::vector<UserFrame>& frames) { return frames_text(frames, kStackFrames); }

// The holder's wait and what it leads to: holder -> object -> releaser ->
// its object -> ..., until a thread that waits on nothing known, a thread
// already seen, or kChainHops.
void add_holder_chain(const RuleContext& ctx, Finding& f, int holder, const std::string& gil) {
  std::set<int> seen{holder};
  int cur = holder;
  for (size_t hop = 0; hop < kChainHops; ++hop) {
    const ThreadWait* w = ctx.wait_of(cur);
    if (!w) return;
    const std::string label = ctx.thread_label(cur);
    if (w->objects.empty() || (cur != holder && w->objects.front() == gil)) {
      if (cur != holder || w->objects.empty()) f.chain.push_back({label, "waits:", w->summary});
      return;
    }
    const WaitObject& o = ctx.object(w->objects.front());
    f.chain.push_back({label, "waits on", o.label});
    for (const auto& note : o.notes) f.chain.push_back({o.label, "note", note});
    // The lowest releaser not met yet (at most kChainHops are), else the lowest.
    ReleaserCursor releasers(ctx.graph, {&o});
    std::optional<int> first = releasers.next();
    if (!first) return;
    int next = *first;
    for (std::optional<int> r = first; r; r = releasers.next())
      if (!seen.count(*r)) {
        next = *r;
        break;
      }
    f.chain.push_back({o.label, "can be released by", ctx.releaser_label(o, next)});
    if (!seen.insert(next).second) return;
    add_unique(f.chain_tids, next);
    cur = next;
  }
}

}  // namespace

std::vector<Finding> gil_held_findings(const RuleContext& ctx) {
  std::vector<Finding> out;
  for (const auto& [id, gil] : ctx.graph.objects) {
    if (gil.kind != ObjectKind::Gil || gil.ready || !gil.releasers_certain || !gil.owner_tid) continue;
    const int holder = *gil.owner_tid;
    const ThreadWait* hw = ctx.wait_of(holder);
    if (!hw || !ctx.in_tree(holder) || gil.waiters.empty()) continue;
    // A holder that runs, or made progress between the samples, hands the
    // GIL on at the next switch interval: a busy job, not a frozen one.
    if (hw->activity == Activity::Running || hw->activity == Activity::Unknown ||
        hw->activity == Activity::Dead || hw->activity == Activity::Stopped || hw->progressed)
      continue;
    const double min_held = std::min(kMinHeldS, ctx.opt.stall_after_s);
    if (hw->blocked_s && *hw->blocked_s < min_held) continue;
    const bool cannot_end = ctx.stuck(holder);
    const bool stalled = hw->blocked_s && *hw->blocked_s >= ctx.opt.stall_after_s;

    Finding f(FindingKind::GilHeld);
    f.severity = cannot_end || stalled ? Severity::Critical : Severity::Warning;
    const int pid = ctx.pid_of(holder);
    f.pids = {pid};
    f.tids = {holder};
    std::vector<int> waiters(gil.waiters.begin(), gil.waiters.end());
    std::sort(waiters.begin(), waiters.end());
    for (int t : waiters) add_unique(f.tids, t);
    f.confidence = cannot_end ? ctx.confidence_for(f.tids) : Confidence::Probable;

    ctx.add_main_chain(f, holder, "");
    if (f.chain_tids.empty()) f.chain_tids = {holder};
    add_holder_chain(ctx, f, holder, id);

    const std::string holder_label = ctx.thread_label(holder);
    f.summary = fmt::format(
        "{} holds the {} while it {}{}: {} other thread{} of the process wait{} for the GIL and cannot run "
        "Python code{}",
        holder_label, gil.label, hw->summary, hw->blocked_s ? " " + for_duration(hw->blocked_s) : "",
        waiters.size(), waiters.size() > 1 ? "s" : "", waiters.size() > 1 ? "" : "s",
        cannot_end ? "; its own wait can never end" : "");

    ctx.add_thread_evidence(f, holder);
    const ProcessInfo* p = ctx.snap.process(pid);
    const ThreadInfo* ht = p ? p->thread(holder) : nullptr;
    if (ht) {
      f.evidence.push_back(fmt::format("{} holds the GIL (read from the interpreter's state)", holder_label));
      if (!ht->python_stack.empty())
        f.evidence.push_back(fmt::format("Python stack of the holder: {}", stack_text(ht->python_stack)));
      if (!ht->native_stack.empty())
        f.evidence.push_back(fmt::format("native stack of the holder: {}", stack_text(ht->native_stack)));
      else if (!ht->native_stack_error.empty())
        f.evidence.push_back(
            fmt::format("native stack of the holder not unwound: {}", ht->native_stack_error));
    }
    for (size_t i = 0; i < waiters.size() && i < kListedWaiters; ++i)
      f.evidence.push_back(
          fmt::format("{} {}", ctx.thread_label(waiters[i]), ctx.wait_of(waiters[i])->summary));
    if (waiters.size() > kListedWaiters)
      f.evidence.push_back(fmt::format("... and {} more GIL waiters", waiters.size() - kListedWaiters));

    f.advice = {
        "Release the GIL around the blocking call in the C extension: Py_BEGIN_ALLOW_THREADS ... "
        "Py_END_ALLOW_THREADS (pybind11: py::gil_scoped_release; Cython: with nogil), so the other threads "
        "run while it waits.",
        "With ctypes, load the library with ctypes.CDLL (each call releases the GIL) instead of ctypes.PyDLL "
        "or ctypes.pythonapi (which keep it).",
        "Or move the blocking call into another process (multiprocessing, subprocess) and give it a timeout "
        "(poll/select before read, O_NONBLOCK), so a call that never returns freezes only that process.",
    };
    f.details = {
        {"gil", gil.label},
        {"holder_tid", holder},
        {"waiter_tids", waiters},
        {"holder_waits", hw->summary},
        {"holder_blocked_s", hw->blocked_s ? nlohmann::json(*hw->blocked_s) : nlohmann::json(nullptr)},
        {"holder_wait_can_end", !cannot_end}};
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace hangtrace::rules
