// The "syscalls" concern (bpf/syscalls.bpf.c): blocking syscalls of the traced
// tasks (fd I/O, sockets, poll/select/epoll, accept/connect, wait4/waitid,
// sleeps) that last at least LiveOptions::min_block_ns, with the fd's object.
#include <bpf/libbpf.h>
#include <fmt/format.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "syscalls.skel.h"
#include "hangtrace/abi.h"
#include "live_modules.h"

namespace hangtrace {

static_assert(sizeof(ht_syscall_event) == 112);
static_assert(offsetof(ht_syscall_event, nr) == 40);
static_assert(offsetof(ht_syscall_event, ret) == 48);
static_assert(offsetof(ht_syscall_event, duration_ns) == 56);
static_assert(offsetof(ht_syscall_event, fd) == 64);
static_assert(offsetof(ht_syscall_event, obj_kind) == 68);
static_assert(offsetof(ht_syscall_event, obj_inode) == 72);
static_assert(offsetof(ht_syscall_event, args) == 80);
static_assert(offsetof(ht_syscall_event, kstack_id) == 104);
static_assert(offsetof(ht_syscall_event, ustack_id) == 108);

namespace {

std::string errno_text(int err) { return std::strerror(err < 0 ? -err : err); }

class SyscallsModule : public TracerModule {
 public:
  ~SyscallsModule() override { syscalls_bpf__destroy(skel_); }
  const char* name() const override { return "syscalls"; }

  Result<bool> load(const SharedMaps& maps, const LiveOptions& options) override {
    skel_ = syscalls_bpf__open();
    if (!skel_) return make_error("failed to load BPF syscall tracer: open: " + errno_text(errno));
    auto shared = maps.reuse_in(skel_->obj);
    if (!shared) return shared;
    skel_->rodata->ht_wakeup_bytes = options.wakeup_bytes;
    skel_->rodata->min_block_ns = options.min_block_ns;
    // raw_tp only (see syscalls.bpf.c): nothing to probe, every kernel with
    // BPF ring buffers has raw tracepoints.
    if (int err = syscalls_bpf__load(skel_)) {
      return make_error("failed to load BPF syscall tracer: " + errno_text(err));
    }
    return true;
  }

  Result<bool> attach() override {
    hooks_.clear();
    return attach_hooks(
        name(),
        {
            {skel_->progs.syscalls_sys_enter, &skel_->links.syscalls_sys_enter, "raw_tp/sys_enter", true, ""},
            {skel_->progs.syscalls_sys_exit, &skel_->links.syscalls_sys_exit, "raw_tp/sys_exit", true, ""},
            // Only the stacks of waits depend on this one.
            {skel_->progs.syscalls_sched_switch, &skel_->links.syscalls_sched_switch, "raw_tp/sched_switch",
             false, "blocking calls reported without stacks"},
        },
        hooks_);
  }

  std::vector<HookStatus> hooks() const override { return hooks_; }

 private:
  syscalls_bpf* skel_ = nullptr;
  std::vector<HookStatus> hooks_;
};

}  // namespace

std::unique_ptr<TracerModule> make_syscalls_module() { return std::make_unique<SyscallsModule>(); }

}  // namespace hangtrace
