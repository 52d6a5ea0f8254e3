// The "process" concern (bpf/process.bpf.c): fork following, exec, exit,
// signals to traced tasks, OOM victims. Loaded first: without fork following
// the traced set would stop at the processes named at start.
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "live_modules.h"
#include "process.skel.h"
#include "hangtrace/text.h"

namespace hangtrace {
namespace {


// What vmlinux BTF says this kernel offers, read once per load.
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
  ~ProcessModule() override { process_bpf__destroy(skel_); }
  const char* name() const override { return "process"; }

  Result<bool> load(const SharedMaps& maps, const LiveOptions& options) override {
    KernelBtf kbtf;
    bool fork_btf = kbtf.tracepoint_proto("sched_process_fork") != nullptr;
    bool signal_btf = kbtf.tracepoint_proto("signal_generate") != nullptr;
    // 6.8 changed oom:mark_victim from (int pid) to (struct task_struct *, uid_t);
    // only the latter gives the victim's memory cgroup and its counters.
    victim_has_task_ = kbtf.tracepoint_arg_is_pointer("mark_victim", 0);
    bool victim_btf = victim_has_task_;
    why_fork_raw_ = fork_btf ? "" : "tp_btf unavailable: no btf_trace_sched_process_fork in vmlinux BTF";
    why_signal_raw_ = signal_btf ? "" : "tp_btf unavailable: no btf_trace_signal_generate in vmlinux BTF";
    why_victim_raw_ =
        victim_btf ? "" : "tp_btf unavailable: oom:mark_victim passes no task_struct on this kernel";

    // tp_btf twins first; a verifier that refuses them costs one retry with
    // every raw_tp twin.
    std::string first_error;
    for (bool btf : {true, false}) {
      use_btf_ = btf;
      auto r = try_load(maps, options);
      if (r) {
        if (!btf) {
          std::string why = "tp_btf rejected at load: " + (first_error.empty() ? "not tried" : first_error);
          if (fork_btf) why_fork_raw_ = why;
          if (signal_btf) why_signal_raw_ = why;
          if (victim_btf) why_victim_raw_ = why;
        }
        return true;
      }
      if (first_error.empty()) first_error = r.error();
      if (!btf) return make_error("failed to load BPF process tracer: " + r.error());
    }
    return make_error("failed to load BPF process tracer: " + first_error);
  }

  Result<bool> attach() override {
    hooks_.clear();
    struct Hook {
      bpf_program* prog;
      bpf_link** link;
      const char* attach;
      std::string unused_reason;  // empty: this one is in use
      bool required;
    };
    // Empty reason = in use, so a twin left out always says why.
    auto left_out = [](bool chosen, const std::string& why) {
      return chosen ? std::string() : (why.empty() ? std::string("not selected") : why);
    };
    auto& p = skel_->progs;
    auto& l = skel_->links;
    bool fork_btf = use_btf_ && why_fork_raw_.empty();
    bool signal_btf = use_btf_ && why_signal_raw_.empty();
    bool victim_btf = use_btf_ && why_victim_raw_.empty();
    Hook table[] = {
        {p.sched_process_fork_btf, &l.sched_process_fork_btf, "tp_btf/sched_process_fork",
         left_out(fork_btf, why_fork_raw_), true},
        {p.sched_process_fork_raw, &l.sched_process_fork_raw, "raw_tp/sched_process_fork",
         fork_btf ? "not needed: twin sched_process_fork_btf attached" : "", true},
        {p.sched_process_exec, &l.sched_process_exec, "raw_tp/sched_process_exec", "", false},
        {p.sched_process_exit, &l.sched_process_exit, "raw_tp/sched_process_exit", "", false},
        {p.signal_generate_btf, &l.signal_generate_btf, "tp_btf/signal_generate",
         left_out(signal_btf, why_signal_raw_), false},
        {p.signal_generate_raw, &l.signal_generate_raw, "raw_tp/signal_generate",
         signal_btf ? "not needed: twin signal_generate_btf attached" : "", false},
        {p.mark_victim_btf, &l.mark_victim_btf, "tp_btf/mark_victim", left_out(victim_btf, why_victim_raw_),
         false},
        {p.mark_victim_raw, &l.mark_victim_raw, "raw_tp/mark_victim",
         victim_btf ? "not needed: twin mark_victim_btf attached" : "", false},
    };
    for (Hook& h : table) {
      HookStatus st;
      st.concern = name();
      st.program = bpf_program__name(h.prog);
      st.attach = h.attach;
      if (!h.unused_reason.empty()) {
        st.reason = h.unused_reason;
        hooks_.push_back(st);
        continue;
      }
      *h.link = bpf_program__attach(h.prog);
      if (!*h.link) {
        int err = errno;
        if (h.required)
          return make_error(fmt::format("failed to attach {}: {}", st.program, errno_text(err)));
        st.reason = "attach failed: " + errno_text(err);
      } else {
        st.active = true;
        if (h.prog == p.mark_victim_raw && !victim_has_task_) {
          st.reason =
              "victim known by pid only: no memory cgroup, and threads other than the main one are missed";
        }
      }
      hooks_.push_back(st);
    }
    return true;
  }

  std::vector<HookStatus> hooks() const override { return hooks_; }

 private:
  Result<bool> try_load(const SharedMaps& maps, const LiveOptions& options) {
    process_bpf__destroy(skel_);
    skel_ = process_bpf__open();
    if (!skel_) return make_error("open: " + errno_text(errno));
    auto shared = maps.reuse_in(skel_->obj);
    if (!shared) return shared;
    skel_->rodata->ht_wakeup_bytes = options.wakeup_bytes;
    skel_->rodata->page_shift =
        static_cast<uint32_t>(__builtin_ctzl(static_cast<unsigned long>(sysconf(_SC_PAGESIZE))));
    skel_->rodata->mark_victim_has_task = victim_has_task_;
    bool fork_btf = use_btf_ && why_fork_raw_.empty();
    bool signal_btf = use_btf_ && why_signal_raw_.empty();
    bool victim_btf = use_btf_ && why_victim_raw_.empty();
    bpf_program__set_autoload(skel_->progs.sched_process_fork_btf, fork_btf);
    bpf_program__set_autoload(skel_->progs.sched_process_fork_raw, !fork_btf);
    bpf_program__set_autoload(skel_->progs.signal_generate_btf, signal_btf);
    bpf_program__set_autoload(skel_->progs.signal_generate_raw, !signal_btf);
    bpf_program__set_autoload(skel_->progs.mark_victim_btf, victim_btf);
    bpf_program__set_autoload(skel_->progs.mark_victim_raw, !victim_btf);
    if (int err = process_bpf__load(skel_)) {
      process_bpf__destroy(skel_);
      skel_ = nullptr;
      return make_error(
          fmt::format("load ({}): {}", use_btf_ ? "tp_btf twins" : "raw_tp twins", errno_text(err)));
    }
    return true;
  }

  process_bpf* skel_ = nullptr;
  bool use_btf_ = true;
  bool victim_has_task_ = false;
  std::string why_fork_raw_, why_signal_raw_, why_victim_raw_;
  std::vector<HookStatus> hooks_;
};

}  // namespace

std::unique_ptr<TracerModule> make_process_module() { return std::make_unique<ProcessModule>(); }

}  // namespace hangtrace
