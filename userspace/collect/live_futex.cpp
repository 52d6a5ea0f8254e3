// The "futex" concern (bpf/futex.bpf.c): futex waits of the traced tasks that
// last at least LiveOptions::min_block_ns, and wakes that woke someone.
#include <bpf/libbpf.h>
#include <fmt/format.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "futex.skel.h"
#include "hangtrace/abi.h"
#include "live_modules.h"

namespace hangtrace {

static_assert(sizeof(ht_futex_event) == 80);
static_assert(offsetof(ht_futex_event, uaddr) == 40);
static_assert(offsetof(ht_futex_event, op) == 48);
static_assert(offsetof(ht_futex_event, ret) == 52);
static_assert(offsetof(ht_futex_event, duration_ns) == 56);
static_assert(offsetof(ht_futex_event, timeout_ns) == 64);
static_assert(offsetof(ht_futex_event, kstack_id) == 72);
static_assert(offsetof(ht_futex_event, ustack_id) == 76);

namespace {

std::string errno_text(int err) { return std::strerror(err < 0 ? -err : err); }

class FutexModule : public TracerModule {
 public:
  ~FutexModule() override { futex_bpf__destroy(skel_); }
  const char* name() const override { return "futex"; }

  Result<bool> load(const SharedMaps& maps, const LiveOptions& options) override {
    skel_ = futex_bpf__open();
    if (!skel_) return make_error("failed to load BPF futex tracer: open: " + errno_text(errno));
    auto shared = maps.reuse_in(skel_->obj);
    if (!shared) return shared;
    skel_->rodata->ht_wakeup_bytes = options.wakeup_bytes;
    skel_->rodata->min_block_ns = options.min_block_ns;
    // raw_tp only (see futex.bpf.c): nothing to probe, every kernel with
    // BPF ring buffers has raw tracepoints.
    if (int err = futex_bpf__load(skel_)) {
      return make_error("failed to load BPF futex tracer: " + errno_text(err));
    }
    return true;
  }

  Result<bool> attach() override {
    hooks_.clear();
    return attach_hooks(
        name(),
        {
            {skel_->progs.futex_sys_enter, &skel_->links.futex_sys_enter, "raw_tp/sys_enter", true, ""},
            {skel_->progs.futex_sys_exit, &skel_->links.futex_sys_exit, "raw_tp/sys_exit", true, ""},
            // Only the stacks of waits depend on this one.
            {skel_->progs.futex_sched_switch, &skel_->links.futex_sched_switch, "raw_tp/sched_switch", false,
             "waits reported without stacks"},
        },
        hooks_);
  }

  std::vector<HookStatus> hooks() const override { return hooks_; }

 private:
  futex_bpf* skel_ = nullptr;
  std::vector<HookStatus> hooks_;
};

}  // namespace

std::unique_ptr<TracerModule> make_futex_module() { return std::make_unique<FutexModule>(); }

}  // namespace hangtrace
