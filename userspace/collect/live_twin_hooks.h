// Loading and attaching a concern's tracepoint hooks: twins (one handler
// compiled as <base>_btf (SEC tp_btf/<tp>) and <base>_raw (SEC raw_tp/<tp>))
// and lone raw_tp programs. Used by every concern that hooks tracepoints
// (process, syscalls, sched, shm, net, memory): the one attach path.
//
// Load tries, best first: tp_btf for every tracepoint that vmlinux BTF
// describes; raw_tp for all; raw_tp for the required hooks only (an optional
// hook whose program the verifier refuses, e.g. for a helper this kernel
// lacks, is then listed as inactive with the reason instead of sinking the
// concern).
#pragma once

#include <bpf/libbpf.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "live_tracer.h"

namespace hangtrace {

struct TwinSpec {
  std::string base;  // programs <base>_btf and <base>_raw
  std::string tp;    // tracepoint name, e.g. "sys_exit"
  bool required;     // the concern is useless without it
  // Not loaded at all in this configuration, listed inactive with this
  // reason (e.g. "not needed: ..."); empty: wanted.
  std::string unwanted_because = {};
  // It runs on every syscall, context switch or wakeup of the machine: the
  // daemon's sampled steady state keeps it loaded but detached (set_hot).
  bool hot = false;
  // No twin: one program <base> on raw_tp/<tp>.
  bool raw_only = false;
  // Set: the tp_btf twin is not used, for this reason -- what the
  // btf_trace_<tp> typedef alone does not tell (the tracepoint's arguments
  // on this kernel).
  std::string btf_unusable_because = {};
  // Set: said of the raw_tp twin when it is the one attached (what it
  // cannot see).
  std::string raw_caveat = {};
};

class TwinHooks {
 public:
  // `obeys_no_tp_btf`: HANGTRACE_LIVE_NO_TP_BTF=1 makes it take the raw_tp
  // twins (the tests' switch for the concerns whose raw path they check).
  TwinHooks(std::string concern, std::vector<TwinSpec> specs, bool obeys_no_tp_btf = true);
  ~TwinHooks() { detach(); }
  TwinHooks(const TwinHooks&) = delete;
  TwinHooks& operator=(const TwinHooks&) = delete;

  // `open` opens the skeleton, points it at the shared maps and sets its
  // rodata, returning its object; `load` loads it (0 or -errno); `destroy`
  // frees it. Called once per try.
  Result<bool> load(const std::function<Result<bpf_object*>()>& open, const std::function<int()>& load,
                    const std::function<void()>& destroy);
  // Attaches the chosen twin of every loaded hook (the hot ones only with
  // `hot`); a required one that fails is an error, an optional one is
  // recorded.
  Result<bool> attach(bool hot = true);
  // Attaches or detaches the hot hooks only; the others stay as they are.
  Result<bool> set_hot(bool on);
  bool hot_attached() const { return hot_attached_; }
  // Destroys the links (before the skeleton goes).
  void detach();
  std::vector<HookStatus> hooks() const { return hooks_; }

 private:
  struct Hook {
    TwinSpec spec;
    bool btf_available = false;  // vmlinux BTF has btf_trace_<tp>
    bool use_btf = false;        // chosen twin
    bool loaded = false;         // loaded in the chosen variant
    std::string why_not_btf;
    std::string why_not_loaded;
    size_t status = 0;  // its first entry in hooks_ (the _btf twin's, or the lone program's)
  };
  std::string concern_;
  bool obeys_no_tp_btf_ = true;
  std::vector<Hook> hooks_spec_;
  bpf_object* obj_ = nullptr;
  std::vector<std::pair<size_t, bpf_link*>> links_;  // (hook index, its link)
  std::vector<HookStatus> hooks_;                    // per hook: the _btf and _raw twins, or the lone program
  bool hot_attached_ = false;
  Result<bool> attach_one(size_t index, bool required_fails);
  HookStatus& chosen_status(size_t index);
  void detach_one(size_t index, const std::string& why);
};

// log2 of the page size, for BPF programs that turn page counts into bytes.
uint32_t page_shift();

}  // namespace hangtrace
