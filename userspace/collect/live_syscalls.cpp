// The "syscalls" concern (bpf/syscalls.bpf.c): the syscall dispatcher. One
// program on sys_exit and one on sched_switch (and one on sys_enter when
// every call is streamed) run the
// futex concern (waits and sampled wakes), the blocking-calls concern (fd I/O,
// sockets, poll/select/epoll, accept/connect, wait4/waitid, sleeps lasting at
// least LiveOptions::min_block_ns, with the fd's object) and the syscall part
// of the /dev/shm concern.
#include "hangtrace/abi.h"
#include <bpf/bpf.h>

#include "live_histograms.h"
#include "live_modules.h"
#include "live_twin_hooks.h"
#include "syscalls.skel.h"

#include <fmt/format.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <optional>
#include <string>
#include <unistd.h>

namespace hangtrace {

static_assert(sizeof(ht_futex_event) == 80);
static_assert(offsetof(ht_futex_event, uaddr) == 40);
static_assert(offsetof(ht_futex_event, op) == 48);
static_assert(offsetof(ht_futex_event, ret) == 52);
static_assert(offsetof(ht_futex_event, duration_ns) == 56);
static_assert(offsetof(ht_futex_event, timeout_ns) == 64);
static_assert(offsetof(ht_futex_event, kstack_id) == 72);
static_assert(offsetof(ht_futex_event, ustack_id) == 76);

static_assert(sizeof(ht_syscall_event) == 216);
static_assert(sizeof(ht_short_waits) == 128);
static_assert(offsetof(ht_short_waits, waker_comm) == 32);
static_assert(offsetof(ht_short_waits, count) == 48);
static_assert(offsetof(ht_short_waits, sum_ns) == 56);
static_assert(offsetof(ht_short_waits, buckets) == 64);
static_assert(sizeof(ht_short_waits_event) == 168);
static_assert(offsetof(ht_syscall_event, nr) == 40);
static_assert(offsetof(ht_syscall_event, ret) == 48);
static_assert(offsetof(ht_syscall_event, duration_ns) == 56);
static_assert(offsetof(ht_syscall_event, fd) == 64);
static_assert(offsetof(ht_syscall_event, obj_kind) == 68);
static_assert(offsetof(ht_syscall_event, obj_inode) == 72);
static_assert(offsetof(ht_syscall_event, args) == 80);
static_assert(offsetof(ht_syscall_event, kstack_id) == 104);
static_assert(offsetof(ht_syscall_event, ustack_id) == 108);
static_assert(offsetof(ht_syscall_event, mnt_id) == 112);
static_assert(offsetof(ht_syscall_event, file) == 120);

static_assert(sizeof(ht_hist_key) == 8);
static_assert(sizeof(ht_hist_value) == (HT_HIST_BUCKETS + 1) * 8);

namespace {

// The histogram map of the loaded dispatcher (one tracer per process uses
// histograms: the daemon's).
std::atomic<int> g_hist_fd{-1};

class SyscallsModule : public TracerModule {
 public:
  ~SyscallsModule() override {
    if (skel_ && g_hist_fd.load() == bpf_map__fd(skel_->maps.blocked_hist)) g_hist_fd = -1;
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
             from_entry ? "" : "not needed: calls are tracked from their first sleep (sched_switch)", true},
            {"sys_exit", "sys_exit", true, "", true},
            // Without it and with entry tracking, waits are reported
            // without kernel stacks.
            {"sched_switch", "sched_switch", !from_entry, "", true}});
    hot_at_start_ = options.hot_hooks;
    short_waits_at_start_ = options.short_waits;
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
          skel_->rodata->ht_stream_wakes = options.stream_wakes;
          skel_->rodata->hist_blocked = options.blocked_histograms;
          skel_->rodata->shm_trouble_only = options.shm_trouble_only;
          // Unused without histograms: the smallest map the kernel takes.
          bpf_map__set_max_entries(skel_->maps.blocked_hist,
                                   options.blocked_histograms ? options.histogram_entries : 1);
          return skel_->obj;
        },
        [&]() {
          int err = syscalls_bpf__load(skel_);
          if (!err) maps.adopt_created(skel_->obj);
          return err;
        },
        [&]() {
          syscalls_bpf__destroy(skel_);
          skel_ = nullptr;
        });
  }

  Result<bool> attach() override {
    set_short_waits(short_waits_at_start_);
    auto attached = hooks_->attach(hot_at_start_);
    if (attached && skel_->rodata->hist_blocked) g_hist_fd = bpf_map__fd(skel_->maps.blocked_hist);
    return attached;
  }
  void set_short_waits(bool on) override {
    if (skel_) skel_->bss->short_waits_on = on ? 1 : 0;
  }
  Result<bool> set_hot_hooks(bool on) override {
    // Calls left half-tracked by the last detach are stale from now on.
    if (on && !hooks_->hot_attached()) skel_->bss->hooks_epoch++;
    return hooks_->set_hot(on);
  }
  std::vector<HookStatus> hooks() const override {
    return hooks_ ? hooks_->hooks() : std::vector<HookStatus>{};
  }

 private:
  syscalls_bpf* skel_ = nullptr;
  std::optional<TwinHooks> hooks_;
  bool hot_at_start_ = true;
  bool short_waits_at_start_ = false;
};

}  // namespace

std::unique_ptr<TracerModule> make_syscalls_module() { return std::make_unique<SyscallsModule>(); }

Result<std::vector<BlockedHistogram>> read_blocked_histograms() {
  std::vector<BlockedHistogram> out;
  const int fd = g_hist_fd.load();
  if (fd < 0) return out;
  const int ncpus = libbpf_num_possible_cpus();
  if (ncpus <= 0) return make_error("failed to read blocked-time histograms: cannot count CPUs");
  std::vector<ht_hist_value> per_cpu(static_cast<size_t>(ncpus));
  ht_hist_key key{}, next{};
  const void* prev = nullptr;
  for (;;) {
    if (bpf_map_get_next_key(fd, prev, &next) != 0) {
      if (errno == ENOENT) break;
      return make_error(fmt::format("failed to read blocked-time histograms: {}", std::strerror(errno)));
    }
    key = next;
    prev = &key;
    if (bpf_map_lookup_elem(fd, &key, per_cpu.data()) != 0) continue;  // deleted meanwhile
    BlockedHistogram h;
    h.tgid = static_cast<int>(key.tgid);
    h.wait_kind = key.wait_kind;
    h.main_thread = key.main_thread != 0;
    for (const auto& v : per_cpu) {
      for (int i = 0; i < HT_HIST_BUCKETS; ++i) h.count[i] += v.count[i];
      h.sum_ns += v.sum_ns;
    }
    out.push_back(h);
  }
  return out;
}

void forget_blocked_histograms(int tgid) {
  const int fd = g_hist_fd.load();
  if (fd < 0) return;
  for (uint8_t kind = 0; kind < HT_WAIT_KINDS; ++kind)
    for (uint8_t main = 0; main < 2; ++main) {
      ht_hist_key key{};
      key.tgid = static_cast<uint32_t>(tgid);
      key.wait_kind = kind;
      key.main_thread = main;
      bpf_map_delete_elem(fd, &key);
    }
}

}  // namespace hangtrace
