// The "process" concern (bpf/process.bpf.c): fork following, exec, exit,
// signals to traced tasks, OOM victims. Loaded first: without fork following
// the traced set would stop at the processes named at start.
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>

#include <cerrno>
#include <optional>
#include <string>
#include <vector>

#include "hangtrace/text.h"
#include "live_modules.h"
#include "live_twin_hooks.h"
#include "process.skel.h"

namespace hangtrace {
namespace {

// What vmlinux BTF says of a tracepoint's arguments (TwinHooks checks only
// that the tracepoint is there).
struct KernelBtf {
  btf* vmlinux = btf__load_vmlinux_btf();  // NULL (errno set) when the kernel has none
  ~KernelBtf() { btf__free(vmlinux); }

  // The prototype behind tp_btf/<tp>: the typedef the tracepoint macros emit
  // is a pointer to it. NULL when the kernel has no such tracepoint in BTF.
  const btf_type* tracepoint_proto(const char* tp) const {
    if (!vmlinux) return nullptr;
    int id = btf__find_by_name_kind(vmlinux, fmt::format("btf_trace_{}", tp).c_str(), BTF_KIND_TYPEDEF);
    if (id <= 0) return nullptr;
    const btf_type* t = btf__type_by_id(vmlinux, btf__resolve_type(vmlinux, id));
    if (!t || !btf_is_ptr(t)) return nullptr;
    t = btf__type_by_id(vmlinux, t->type);
    return t && btf_is_func_proto(t) ? t : nullptr;
  }
  // Whether argument `n` of the tracepoint (after the leading void *) is a pointer.
  bool tracepoint_arg_is_pointer(const char* tp, int n) const {
    const btf_type* proto = tracepoint_proto(tp);
    if (!proto || btf_vlen(proto) <= n + 1) return false;
    int type = btf__resolve_type(vmlinux, btf_params(proto)[n + 1].type);
    const btf_type* t = type > 0 ? btf__type_by_id(vmlinux, type) : nullptr;
    return t && btf_is_ptr(t);
  }
};

class ProcessModule : public TracerModule {
 public:
  ~ProcessModule() override {
    if (hooks_) hooks_->detach();
    process_bpf__destroy(skel_);
  }
  const char* name() const override { return "process"; }

  Result<bool> load(const SharedMaps& maps, const LiveOptions& options) override {
    // 6.8 changed oom:mark_victim from (int pid) to (struct task_struct *, uid_t);
    // only the latter gives the victim's memory cgroup and its counters.
    const bool victim_has_task = KernelBtf().tracepoint_arg_is_pointer("mark_victim", 0);
    // Fork following comes first: without it the traced set would stop at
    // the processes named at start. The tests' HANGTRACE_LIVE_NO_TP_BTF
    // switch is for the other concerns: this one keeps its best twins.
    hooks_.emplace(
        "process",
        std::vector<TwinSpec>{
            {.base = "sched_process_fork", .tp = "sched_process_fork", .required = true},
            {.base = "sched_process_exec", .tp = "sched_process_exec", .required = false, .raw_only = true},
            {.base = "sched_process_exit", .tp = "sched_process_exit", .required = false, .raw_only = true},
            {.base = "signal_generate", .tp = "signal_generate", .required = false},
            {.base = "mark_victim",
             .tp = "mark_victim",
             .required = false,
             .btf_unusable_because =
                 victim_has_task ? ""
                                 : "tp_btf unavailable: oom:mark_victim passes no task_struct on this kernel",
             .raw_caveat = victim_has_task ? ""
                                           : "victim known by pid only: no memory cgroup, and threads other "
                                             "than the main one are missed"}},
        /*obeys_no_tp_btf=*/false);
    return hooks_->load(
        [&]() -> Result<bpf_object*> {
          skel_ = process_bpf__open();
          if (!skel_) return make_error("open: " + errno_text(errno));
          auto shared = maps.reuse_in(skel_->obj);
          if (!shared) return make_error(shared.error());
          skel_->rodata->ht_wakeup_bytes = options.wakeup_bytes;
          skel_->rodata->page_shift = page_shift();
          skel_->rodata->mark_victim_has_task = victim_has_task;
          return skel_->obj;
        },
        [&]() { return process_bpf__load(skel_); },
        [&]() {
          process_bpf__destroy(skel_);
          skel_ = nullptr;
        });
  }

  Result<bool> attach() override { return hooks_->attach(); }
  std::vector<HookStatus> hooks() const override {
    return hooks_ ? hooks_->hooks() : std::vector<HookStatus>{};
  }

 private:
  process_bpf* skel_ = nullptr;
  std::optional<TwinHooks> hooks_;
};

}  // namespace

std::unique_ptr<TracerModule> make_process_module() { return std::make_unique<ProcessModule>(); }

}  // namespace hangtrace
