// What the export formats share (userspace/core/export/): how a frame is
// named, who a thread is when only its tid is known, and whether a thread of
// the snapshot is blocked now. Internal to hangtrace_core; the public API is
// include/hangtrace/exports.h.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "hangtrace/analysis.h"
#include "hangtrace/exports.h"
#include "hangtrace/live.h"
#include "hangtrace/model.h"

namespace hangtrace::exports_detail {

// A name as folded text can hold it: ';' separates frames and a newline
// stacks, so ';' becomes ':' and line breaks and tabs spaces; trailing spaces
// go; an empty name is "?".
std::string clean_frame_name(const std::string& name);

// A stack as folded text: its frames' names, root first, ';'-joined.
std::string folded_key(const std::vector<FoldedFrame>& frames);

// A frame hangtrace makes up: process, thread, "--", a waker, a live wait.
FoldedFrame synthetic_frame(const std::string& name);
// "fn (file.py:12)" for Python; the symbol, else "module.so+0xOFF", else the
// address for native frames.
FoldedFrame user_frame(const UserFrame& f);

// Whether a wakeup came from interrupt context (a timer, a packet): no task,
// or the waker's kernel stack passes through a hard or soft interrupt entry
// (the "waker" is then whatever task the interrupt hit).
bool woken_from_interrupt(const LiveObservation& live, const TraceEvent& wakeup);

// A waker as a frame names it: "comm/tid", "interrupt" without a task.
std::string waker_frame_name(const TraceEvent& e);

// What a thread waits on, in words: the analysis' summary, else the
// syscall, else its activity.
std::string wait_name(const ThreadWait& w);

// A thread counts as blocked now when the analysis says it waits (or, without
// one, when the kernel has it off CPU and not runnable): its blocked time in
// seconds, and in `*wait` the analysis' view of it (nullptr without one).
std::optional<double> current_blocked_s(const ThreadInfo& t, const Diagnosis* d, const ThreadWait** wait);

// Who a thread is, from the snapshot or else from what was seen live.
struct Who {
  int pid = 0;
  std::string process_comm = "?", thread_comm = "?";
  bool in_snapshot = false;
};

class Identities {
 public:
  Identities(const Snapshot& snap, const LiveObservation* live);
  Who of(int tid) const;
  std::string process_comm(int pid) const;

 private:
  const Snapshot& snap_;
  const LiveObservation* live_;
  std::map<int, Who> by_tid_;
};

}  // namespace hangtrace::exports_detail
