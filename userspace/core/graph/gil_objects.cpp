// The GIL in the wait-for graph. A thread of a Python process that waits for
// the interpreter lock sleeps in a futex inside the interpreter's GIL state
// (take_gil: a condition wait with the 5 ms switch interval as timeout, again
// and again until the holder drops it). Such a thread waits on one object per
// process, "GIL of P", and only the thread holding the GIL can end that wait:
// the holder's own wait (a read() it makes without releasing the GIL)
// continues the chain.
//
// Recognised, in this order:
//   1. the futex address lies in one of the process's GIL states
//      (ProcessInfo::python_gils, read by the collector for CPython 3.8-3.13);
//   2. without those (an older snapshot, an interpreter whose state was not
//      read), the native stack: take_gil / drop_gil, or the condition wait
//      reached from the functions take_gil is inlined into (or from an
//      unnamed frame of the same binary: a stripped take_gil), or, for the
//      lock-based GIL of old interpreters, PyThread_acquire_lock(_timed)
//      called straight from those functions.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <string_view>

#include "graph_builder.h"

namespace hangtrace::graph {

namespace {

// struct _gil_runtime_state: interval, last_holder, locked, switch_number,
// then cond, mutex, switch_cond, switch_mutex (pthread types, 176 bytes with
// glibc on x86_64, 192 on arm64). A futex inside this span is one of them.
constexpr uint64_t kGilStateBytes = 256;

// The CPython functions that wait for the GIL themselves.
constexpr std::array<std::string_view, 2> kGilWaiters = {"take_gil", "drop_gil"};
// The functions take_gil is called from (and inlined into, in optimized
// builds), 3.6 to 3.13: releasing and re-taking the GIL around a blocking call
// (PyEval_RestoreThread), the eval loop's drop request handling, a C thread
// entering Python.
constexpr std::array<std::string_view, 10> kGilTakers = {
    "PyEval_RestoreThread",      "PyEval_AcquireThread",     "PyEval_AcquireLock", "_PyThreadState_Attach",
    "PyGILState_Ensure",         "_PyEval_EvalFrameDefault", "_Py_HandlePending",  "handle_eval_breaker",
    "eval_frame_handle_pending", "PyEval_EvalFrameEx"};

bool one_of(std::string_view name, const auto& names) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

// libc's futex, mutex, condition and semaphore internals a wait sits under.
bool libc_wait_frame(std::string_view f) {
  for (std::string_view p :
       {"__futex", "__GI___futex", "futex_", "___pthread_cond", "__pthread_cond", "pthread_cond_",
        "__pthread_mutex_lock", "pthread_mutex_lock", "__lll_lock", "lll_lock", "sem_", "__new_sem_wait",
        "do_futex_wait", "__GI___pthread_mutex", "PyCOND_", "PyMUTEX_", "syscall"})
    if (starts_with(f, p)) return true;
  return false;
}

bool condition_wait_frame(std::string_view f) {
  return f.find("pthread_cond_") != std::string_view::npos || starts_with(f, "PyCOND_");
}

bool unnamed(const UserFrame& f) { return f.function.empty() || starts_with(f.function, "0x"); }

bool gil_wait_in_native_stack(const std::vector<UserFrame>& stack) {
  size_t i = 0;
  bool condition = false;
  while (i < stack.size() && stack[i].kind == UserFrame::Kind::Native && !unnamed(stack[i]) &&
         libc_wait_frame(stack[i].function)) {
    condition = condition || condition_wait_frame(stack[i].function);
    ++i;
  }
  if (i >= stack.size() || stack[i].kind != UserFrame::Kind::Native) return false;
  const UserFrame& f = stack[i];
  const UserFrame* caller =
      i + 1 < stack.size() && stack[i + 1].kind == UserFrame::Kind::Native ? &stack[i + 1] : nullptr;
  if (one_of(f.function, kGilWaiters)) return true;
  if (condition && one_of(f.function, kGilTakers)) return true;  // take_gil inlined
  if (!caller || !one_of(caller->function, kGilTakers)) return false;
  // A stripped take_gil: an unnamed frame of the interpreter's own binary.
  if (condition && unnamed(f) && !f.file.empty() && f.file == caller->file) return true;
  // The GIL of old interpreters was a PyThread lock taken by the eval loop.
  return f.function == "PyThread_acquire_lock" || f.function == "PyThread_acquire_lock_timed";
}

}  // namespace

bool GraphBuilder::is_gil_wait(const ProcessInfo& p, const ThreadInfo& t) const {
  if (!p.is_python || t.syscall.nr != HT_NR_futex) return false;
  const uint64_t uaddr = t.syscall.args[0];
  if (!p.python_gils.empty())
    return std::any_of(p.python_gils.begin(), p.python_gils.end(),
                       [&](uint64_t gil) { return uaddr >= gil && uaddr - gil < kGilStateBytes; });
  return gil_wait_in_native_stack(t.native_stack);
}

bool GraphBuilder::gil_held_by_blocked_thread(const ProcessInfo& p) const {
  return std::any_of(p.threads.begin(), p.threads.end(), [](const ThreadInfo& t) {
    return t.holds_gil && t.state != 'R' && t.syscall.mode == SyscallState::Mode::InSyscall;
  });
}

std::string GraphBuilder::gil_object(const ProcessInfo& p, ThreadWait& w) {
  const std::string id = fmt::format("gil:{}", p.pid);
  WaitObject& o = object(id, ObjectKind::Gil, fmt::format("GIL of {}", process_label(p.pid)));
  if (o.holder_pids.empty()) {
    o.holder_pids.push_back(p.pid);
    bool state_read = !p.python_gils.empty();
    for (const auto& t : p.threads) {
      state_read = state_read || t.holds_gil || !t.python_stack.empty();
      if (t.holds_gil && alive(t)) o.releasers.push_back(t.tid);
    }
    if (o.releasers.size() == 1) o.owner_tid = o.releasers.front();
    o.releasers_certain = !o.releasers.empty();
    if (o.releasers.empty() && state_read) {
      o.ready = true;  // free at that instant: a waiter takes it next
      o.notes.push_back("no thread held the GIL when the interpreter's state was read");
    } else if (o.releasers.empty()) {
      add_releaser_process(o, p.pid);
      o.notes.push_back("the GIL's holder is unknown (the interpreter's state was not read)");
    }
  }
  w.summary =
      fmt::format("waits for the {}{} (take_gil: a timed wait, retried until the holder lets go)", o.label,
                  o.owner_tid ? fmt::format(" held by TID {}", *o.owner_tid) : std::string());
  return id;
}

void GraphBuilder::finish_gil(WaitObject& o) {
  // Every thread that could hold it waits for it: the holder read and the
  // waits disagree (the GIL changed hands in between), or nobody holds it.
  if (releaser_count(o) == 0 && !o.ready) {
    o.ready = true;
    o.notes.push_back("every thread that could hold the GIL was waiting for it: it is free or changed hands");
  }
}

}  // namespace hangtrace::graph
