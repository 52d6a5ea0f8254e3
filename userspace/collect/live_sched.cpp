#include "live_sched.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "hangtrace/abi.h"
#include "live_modules.h"
#include "live_twin_hooks.h"
#include "sched.skel.h"

namespace hangtrace {

static_assert(sizeof(ht_wakeup_event) == 72);
static_assert(offsetof(ht_wakeup_event, waker_kstack_id) == 64);
static_assert(offsetof(ht_wakeup_event, waker_tgid) == 40);
static_assert(offsetof(ht_wakeup_event, waker_comm) == 48);
static_assert(sizeof(ht_wakeup_key) == 12);
static_assert(sizeof(ht_wakeup_count) == 48);

namespace {

std::string errno_text(int err) { return std::strerror(err < 0 ? -err : err); }

// The `wakeups` map fds of the sched modules loaded in this process.
std::mutex g_registry_mutex;
std::vector<int> g_wakeup_maps;

void register_map(int fd) {
  std::lock_guard lock(g_registry_mutex);
  g_wakeup_maps.push_back(fd);
}

void unregister_map(int fd) {
  std::lock_guard lock(g_registry_mutex);
  std::erase(g_wakeup_maps, fd);
}

class SchedModule : public TracerModule {
 public:
  ~SchedModule() override {
    if (map_fd_ >= 0) unregister_map(map_fd_);
    hooks_.detach();
    sched_bpf__destroy(skel_);
  }
  const char* name() const override { return "sched"; }

  Result<bool> load(const SharedMaps& maps, const LiveOptions& options) override {
    auto loaded = hooks_.load(
        [&]() -> Result<bpf_object*> {
          skel_ = sched_bpf__open();
          if (!skel_) return make_error("open: " + errno_text(errno));
          auto shared = maps.reuse_in(skel_->obj);
          if (!shared) return make_error(shared.error());
          skel_->rodata->ht_wakeup_bytes = options.wakeup_bytes;
          return skel_->obj;
        },
        [&]() { return sched_bpf__load(skel_); },
        [&]() {
          sched_bpf__destroy(skel_);
          skel_ = nullptr;
        });
    if (!loaded) return loaded;
    map_fd_ = bpf_map__fd(skel_->maps.wakeups);
    register_map(map_fd_);
    return true;
  }

  Result<bool> attach() override { return hooks_.attach(); }
  std::vector<HookStatus> hooks() const override { return hooks_.hooks(); }

 private:
  sched_bpf* skel_ = nullptr;
  int map_fd_ = -1;
  TwinHooks hooks_{"sched", {{"sched_waking", "sched_waking", true}}};
};

}  // namespace

std::unique_ptr<TracerModule> make_sched_module() { return std::make_unique<SchedModule>(); }

Result<std::vector<WakeupCount>> read_wakeup_counts() {
  std::lock_guard lock(g_registry_mutex);
  std::vector<WakeupCount> out;
  for (int fd : g_wakeup_maps) {
    // Batched lookups would save syscalls, but an LRU map of at most 16k
    // pairs read once per report does not need them.
    ht_wakeup_key key{}, next{};
    const void* prev = nullptr;
    for (;;) {
      if (bpf_map_get_next_key(fd, prev, &next) != 0) {
        if (errno == ENOENT) break;
        return make_error(fmt::format("failed to read wakeup counts: {}", errno_text(errno)));
      }
      key = next;
      prev = &key;
      ht_wakeup_count value{};
      // An entry evicted between the two calls is simply skipped.
      if (bpf_map_lookup_elem(fd, &key, &value) != 0) continue;
      WakeupCount w;
      w.waker_tgid = static_cast<int>(key.waker_tgid);
      w.waker_tid = static_cast<int>(key.waker_tid);
      w.waker_comm.assign(value.waker_comm, strnlen(value.waker_comm, sizeof value.waker_comm));
      w.wakee_tgid = static_cast<int>(value.wakee_tgid);
      w.wakee_tid = static_cast<int>(key.wakee_tid);
      w.count = value.count;
      w.last_ts_ns = value.last_ts_ns;
      out.push_back(std::move(w));
    }
  }
  std::sort(out.begin(), out.end(),
            [](const WakeupCount& a, const WakeupCount& b) { return a.count > b.count; });
  return out;
}

}  // namespace hangtrace
