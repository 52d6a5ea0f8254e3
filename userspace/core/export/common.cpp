// What the export formats share: frame names, identities, the current wait
// (export/common.h).
#include "common.h"

#include <fmt/format.h>

#include <string_view>

#include "hangtrace/text.h"

namespace hangtrace::exports_detail {

std::string clean_frame_name(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) out += c == ';' ? ':' : (c == '\n' || c == '\r' || c == '\t') ? ' ' : c;
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out.empty() ? "?" : out;
}

std::string folded_key(const std::vector<FoldedFrame>& frames) {
  std::string key;
  for (size_t i = 0; i < frames.size(); ++i) {
    if (i) key += ';';
    key += frames[i].name;
  }
  return key;
}

FoldedFrame synthetic_frame(const std::string& name) {
  return {clean_frame_name(name), FrameKind::Synthetic, "", 0};
}

FoldedFrame user_frame(const UserFrame& f) {
  FoldedFrame out;
  out.kind = f.kind == UserFrame::Kind::Python ? FrameKind::Python : FrameKind::Native;
  out.file = f.file;
  out.line = f.line;
  if (f.kind == UserFrame::Kind::Python) {
    std::string fn = f.function.empty() ? "?" : f.function;
    out.name = f.file.empty() ? clean_frame_name(fn)
               : f.line > 0   ? clean_frame_name(fmt::format("{} ({}:{})", fn, basename_of(f.file), f.line))
                              : clean_frame_name(fmt::format("{} ({})", fn, basename_of(f.file)));
  } else if (!f.function.empty()) {
    out.name = clean_frame_name(f.function);
  } else if (!f.file.empty()) {
    out.name = clean_frame_name(
        fmt::format("{}+0x{:x}", basename_of(f.file), f.module_offset ? f.module_offset : f.addr));
  } else {
    out.name = fmt::format("0x{:x}", f.addr);
  }
  return out;
}

namespace {

// x86 and arm64 entry points of hard and soft interrupts.
bool is_interrupt_entry(std::string_view fn) {
  return fn.starts_with("asm_sysvec_") || fn.starts_with("asm_common_interrupt") ||
         fn.starts_with("common_interrupt") || fn == "handle_softirqs" || fn == "__do_softirq" ||
         fn == "irq_exit_rcu" || fn.starts_with("el1_interrupt") || fn.starts_with("el0_interrupt");
}

}  // namespace

bool woken_from_interrupt(const LiveObservation& live, const TraceEvent& e) {
  if (e.waker_tgid == 0) return true;
  auto it = live.kernel_stacks.find(e.kstack_id);
  if (it == live.kernel_stacks.end()) return false;
  for (const auto& k : it->second) {
    std::string_view fn = k.symbol;
    if (is_interrupt_entry(fn.substr(0, fn.find('+')))) return true;
  }
  return false;
}

std::string waker_frame_name(const TraceEvent& e) {
  if (e.waker_tgid == 0 && e.waker_tid == 0) return "interrupt";
  return fmt::format("{}/{}", e.waker_comm.empty() ? (e.waker_tgid == 0 ? "interrupt" : "?") : e.waker_comm,
                     e.waker_tid);
}

std::string wait_name(const ThreadWait& w) {
  return !w.summary.empty()        ? w.summary
         : !w.syscall_text.empty() ? w.syscall_text
                                   : std::string(activity_name(w.activity));
}

std::optional<double> current_blocked_s(const ThreadInfo& t, const Diagnosis* d, const ThreadWait** wait) {
  *wait = nullptr;
  if (d) {
    auto it = d->graph.threads.find(t.tid);
    if (it == d->graph.threads.end()) return std::nullopt;
    *wait = &it->second;
    Activity a = it->second.activity;
    if (a == Activity::Running || a == Activity::Dead || a == Activity::Unknown) return std::nullopt;
    return it->second.blocked_s;
  }
  if (!t.kernel || t.kernel->on_cpu || t.state == 'R' || t.state == 'Z' || t.state == 'X')
    return std::nullopt;
  return static_cast<double>(t.kernel->off_cpu_ns) / 1e9;
}

Identities::Identities(const Snapshot& snap, const LiveObservation* live) : snap_(snap), live_(live) {
  for (const auto& p : snap.processes)
    for (const auto& t : p.threads)
      by_tid_[t.tid] = {p.pid, p.comm.empty() ? "?" : p.comm, t.comm.empty() ? "?" : t.comm, true};
}

Who Identities::of(int tid) const {
  if (auto it = by_tid_.find(tid); it != by_tid_.end()) return it->second;
  Who w;
  w.pid = tid;
  if (live_) {
    for (const auto& [wakee, e] : live_->last_waker) {
      if (wakee == tid && e.tgid) {
        w.pid = e.tgid;
        if (!e.comm.empty()) w.thread_comm = e.comm;
      }
      if (e.waker_tid == tid && e.waker_tgid) {
        w.pid = e.waker_tgid;
        if (!e.waker_comm.empty()) w.thread_comm = e.waker_comm;
      }
    }
    for (const auto& d : live_->deaths)
      if (d.pid == tid && !d.comm.empty() && w.thread_comm == "?") w.thread_comm = d.comm;
  }
  w.process_comm = process_comm(w.pid);
  if (w.pid == tid && w.thread_comm == "?") w.thread_comm = w.process_comm;
  return w;
}

std::string Identities::process_comm(int pid) const {
  if (const ProcessInfo* p = snap_.process(pid); p && !p->comm.empty()) return p->comm;
  if (live_) {
    if (auto it = live_->meta.find(pid); it != live_->meta.end() && !it->second.comm.empty())
      return it->second.comm;
    for (const auto& d : live_->deaths)
      if (d.pid == pid && !d.comm.empty()) return d.comm;
    if (auto it = live_->last_waker.find(pid); it != live_->last_waker.end() && !it->second.comm.empty())
      return it->second.comm;
  }
  return "?";
}

}  // namespace hangtrace::exports_detail
