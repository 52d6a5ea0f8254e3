// The "syscalls" concern (bpf/syscalls.bpf.c): the syscall dispatcher. One
// program on sys_exit and one on sched_switch (and one on sys_enter when
// every call is streamed) run the
// futex concern (waits and sampled wakes), the blocking-calls concern (fd I/O,
// sockets, poll/select/epoll, accept/connect, wait4/waitid, sleeps lasting at
// least LiveOptions::min_block_ns, with the fd's object) and the syscall part
// of the /dev/shm concern.
#include "hangtrace/abi.h"
#include "live_modules.h"
#include "live_twin_hooks.h"
#include "syscalls.skel.h"

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <optional>
#include <string>

namespace hangtrace {

static_assert(sizeof(ht_futex_event) == 80);
static_assert(offsetof(ht_futex_event, uaddr) == 40);
static_assert(offsetof(ht_futex_event, op) == 48);
static_assert(offsetof(ht_futex_event, ret) == 52);
static_assert(offsetof(ht_futex_event, duration_ns) == 56);
static_assert(offsetof(ht_futex_event, timeout_ns) == 64);
static_assert(offsetof(ht_futex_event, kstack_id) == 72);
static_assert(offsetof(ht_futex_event, ustack_id) == 76);

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

class SyscallsModule : public TracerModule {
 public:
  ~SyscallsModule() override {
    if (hooks_) hooks_->detach();
    syscalls_bpf__destroy(skel_);
  }
  const char* name() const override { return "syscalls"; }

  Result<bool> load(const SharedMaps& maps, const LiveOptions& options) override {
    // Calls start at their first sleep (sched_switch), unless every call is
    // streamed: one that never sleeps must then be seen on entry.
    const bool from_entry = options.min_block_ns == 0;
    hooks_.emplace(
        "syscalls",
        std::vector<TwinSpec>{
            {"sys_enter", "sys_enter", true,
             from_entry ? "" : "not needed: calls are tracked from their first sleep (sched_switch)"},
            {"sys_exit", "sys_exit", true},
            // Without it and with entry tracking, waits are reported
            // without kernel stacks.
            {"sched_switch", "sched_switch", !from_entry}});
    return hooks_->load(
        [&]() -> Result<bpf_object*> {
          skel_ = syscalls_bpf__open();
          if (!skel_) return make_error(std::string("open: ") + std::strerror(errno));
          auto shared = maps.reuse_in(skel_->obj);
          if (!shared) return make_error(shared.error());
          skel_->rodata->ht_wakeup_bytes = options.wakeup_bytes;
          skel_->rodata->min_block_ns = options.min_block_ns;
          skel_->rodata->calls_from_entry = from_entry;
          skel_->rodata->wake_emit_ns = options.futex_wake_sample_ns;
          skel_->rodata->page_shift = page_shift();
          return skel_->obj;
        },
        [&]() { return syscalls_bpf__load(skel_); },
        [&]() {
          syscalls_bpf__destroy(skel_);
          skel_ = nullptr;
        });
  }

  Result<bool> attach() override { return hooks_->attach(); }
  std::vector<HookStatus> hooks() const override {
    return hooks_ ? hooks_->hooks() : std::vector<HookStatus>{};
  }

 private:
  syscalls_bpf* skel_ = nullptr;
  std::optional<TwinHooks> hooks_;
};

}  // namespace

std::unique_ptr<TracerModule> make_syscalls_module() { return std::make_unique<SyscallsModule>(); }

}  // namespace hangtrace
