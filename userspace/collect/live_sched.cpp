#include "live_sched.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <mutex>

#include <unistd.h>
#include <string>
#include <vector>

#include "hangtrace/abi.h"
#include "live_modules.h"
#include "live_twin_hooks.h"
#include "sched.skel.h"
#include "hangtrace/text.h"

namespace hangtrace {

static_assert(sizeof(ht_wakeup_event) == 72);
static_assert(offsetof(ht_wakeup_event, waker_kstack_id) == 64);
static_assert(offsetof(ht_wakeup_event, waker_tgid) == 40);
static_assert(offsetof(ht_wakeup_event, waker_comm) == 48);
static_assert(sizeof(ht_wakeup_key) == 12);
static_assert(sizeof(ht_wakeup_count) == 48);

namespace {

// The sched modules loaded in this process: their `wakeups` map, and the
// iterator that adds the wake batches still pending in task storage to it.
struct WakeupSource {
  int map_fd = -1;
  bpf_link* flush = nullptr;
  bool operator==(const WakeupSource&) const = default;
};
std::mutex g_registry_mutex;
std::vector<WakeupSource> g_sources;

void register_source(WakeupSource s) {
  std::lock_guard lock(g_registry_mutex);
  g_sources.push_back(s);
}

void unregister_source(WakeupSource s) {
  std::lock_guard lock(g_registry_mutex);
  std::erase(g_sources, s);
}

// Runs the flush iterator to its end: it writes nothing, it only adds.
Result<bool> flush_wake_batches(bpf_link* link) {
  int fd = bpf_iter_create(bpf_link__fd(link));
  if (fd < 0) return make_error("failed to flush wake batches: " + errno_text(errno));
  char buf[64];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) {
  }
  int err = n < 0 ? errno : 0;
  close(fd);
  if (err) return make_error("failed to flush wake batches: " + errno_text(err));
  return true;
}

class SchedModule : public TracerModule {
 public:
  ~SchedModule() override {
    unregister_source(source_);
    bpf_link__destroy(source_.flush);
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
          skel_->rodata->ht_stream_wakes = options.stream_wakes;
          hot_at_start_ = options.hot_hooks;
          return skel_->obj;
        },
        [&]() {
          int err = sched_bpf__load(skel_);
          if (!err) maps.adopt_created(skel_->obj);
          return err;
        },
        [&]() {
          sched_bpf__destroy(skel_);
          skel_ = nullptr;
        });
    if (!loaded) return loaded;
    return true;
  }

  Result<bool> attach() override {
    auto attached = hooks_.attach(hot_at_start_);
    if (!attached) return attached;
    bpf_link* flush = bpf_program__attach_iter(skel_->progs.flush_wake_batches, nullptr);
    if (!flush) return make_error("failed to attach flush_wake_batches: " + errno_text(errno));
    source_ = {bpf_map__fd(skel_->maps.wakeups), flush};
    register_source(source_);
    return true;
  }
  std::vector<HookStatus> hooks() const override { return hooks_.hooks(); }
  Result<bool> set_hot_hooks(bool on) override { return hooks_.set_hot(on); }

 private:
  sched_bpf* skel_ = nullptr;
  bool hot_at_start_ = true;
  WakeupSource source_;
  // sched_process_exit adds an exiting thread's wake batch to `wakeups`.
  TwinHooks hooks_{
      "sched",
      {{"sched_waking", "sched_waking", true, "", true}, {"sched_process_exit", "sched_process_exit", true}}};
};

}  // namespace

std::unique_ptr<TracerModule> make_sched_module() { return std::make_unique<SchedModule>(); }

Result<std::vector<WakeupCount>> read_wakeup_counts() {
  std::lock_guard lock(g_registry_mutex);
  std::vector<WakeupCount> out;
  for (const WakeupSource& source : g_sources) {
    auto flushed = flush_wake_batches(source.flush);
    if (!flushed) return make_error(flushed.error());
    const int fd = source.map_fd;
    auto add = [&out](const ht_wakeup_key& key, const ht_wakeup_count& value) {
      WakeupCount w;
      w.waker_tgid = static_cast<int>(key.waker_tgid);
      w.waker_tid = static_cast<int>(key.waker_tid);
      w.waker_comm.assign(value.waker_comm, strnlen(value.waker_comm, sizeof value.waker_comm));
      w.wakee_tgid = static_cast<int>(value.wakee_tgid);
      w.wakee_tid = static_cast<int>(key.wakee_tid);
      w.count = value.count;
      w.last_ts_ns = value.last_ts_ns;
      out.push_back(std::move(w));
    };
    // Batched (a few syscalls for the whole map: the daemon reads it at
    // every progress check), else one entry at a time.
    {
      std::vector<ht_wakeup_key> keys(4096);
      std::vector<ht_wakeup_count> values(keys.size());
      uint32_t in_batch = 0, out_batch = 0;
      bool first = true, batched = true;
      for (;;) {
        __u32 count = static_cast<__u32>(keys.size());
        int err = bpf_map_lookup_batch(fd, first ? nullptr : &in_batch, &out_batch, keys.data(),
                                       values.data(), &count, nullptr);
        int e = err ? errno : 0;
        for (__u32 i = 0; i < count; ++i) add(keys[i], values[i]);
        if (e == ENOENT) break;  // the end
        if (err) {
          if (!first || count)
            return make_error(fmt::format("failed to read wakeup counts: {}", errno_text(e)));
          batched = false;  // not supported here: one at a time
          break;
        }
        in_batch = out_batch;
        first = false;
      }
      if (batched) continue;
    }
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
      add(key, value);
    }
  }
  std::sort(out.begin(), out.end(),
            [](const WakeupCount& a, const WakeupCount& b) { return a.count > b.count; });
  return out;
}

}  // namespace hangtrace
