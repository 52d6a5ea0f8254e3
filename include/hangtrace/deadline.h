// Calls that may block on a hostile target, given a deadline.
//
// Reading a process's cmdline, environ, maps or memory takes its mmap_lock.
// A thread stuck in the kernel while holding it (or a writer queued behind
// such a holder) would block hangtrace forever, exactly when it is needed.
// So such a read runs on a throwaway thread: if it does not finish in time,
// the caller gets nullopt and leaves that process's memory alone. The thread
// is detached: it ends when the lock frees up, or with hangtrace. `fn` must
// own what it uses (capture by value): it may outlive the caller.
#pragma once

#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <system_error>
#include <thread>
#include <type_traits>

namespace hangtrace {

template <class Fn>
auto call_with_deadline(Fn fn, std::chrono::milliseconds limit) -> std::optional<std::invoke_result_t<Fn>> {
  using T = std::invoke_result_t<Fn>;
  auto result = std::make_shared<std::promise<T>>();
  std::future<T> done = result->get_future();
  try {
    std::thread([result, fn]() mutable { result->set_value(fn()); }).detach();
  } catch (const std::system_error&) {
    return fn();  // no thread to spare: call it directly
  }
  if (done.wait_for(limit) != std::future_status::ready) return std::nullopt;
  return done.get();
}

}  // namespace hangtrace
