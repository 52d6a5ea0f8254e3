// The "memory" concern (bpf/memory.bpf.c): RSS of traced processes, streamed
// each time it moves by LiveOptions::rss_step_bytes, for memory-growth.
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

#include "hangtrace/abi.h"
#include "live_modules.h"
#include "live_twin_hooks.h"
#include "memory.skel.h"

namespace hangtrace {

static_assert(sizeof(ht_rss_event) == 56);
static_assert(offsetof(ht_rss_event, rss_bytes) == 40);
static_assert(offsetof(ht_rss_event, anon_bytes) == 48);

namespace {

class MemoryModule : public TracerModule {
 public:
  ~MemoryModule() override {
    hooks_.detach();
    memory_bpf__destroy(skel_);
  }
  const char* name() const override { return "memory"; }

  Result<bool> load(const SharedMaps& maps, const LiveOptions& options) override {
    return hooks_.load(
        [&]() -> Result<bpf_object*> {
          skel_ = memory_bpf__open();
          if (!skel_) return make_error(std::string("open: ") + std::strerror(errno));
          auto shared = maps.reuse_in(skel_->obj);
          if (!shared) return make_error(shared.error());
          skel_->rodata->ht_wakeup_bytes = options.wakeup_bytes;
          // 0 would stream every page; one page is the finest step that means anything.
          skel_->rodata->rss_step_bytes = options.rss_step_bytes ? options.rss_step_bytes : 4096;
          skel_->rodata->page_shift = page_shift();
          return skel_->obj;
        },
        [&]() { return memory_bpf__load(skel_); },
        [&]() {
          memory_bpf__destroy(skel_);
          skel_ = nullptr;
        });
  }

  Result<bool> attach() override { return hooks_.attach(); }
  std::vector<HookStatus> hooks() const override { return hooks_.hooks(); }

 private:
  memory_bpf* skel_ = nullptr;
  TwinHooks hooks_{"memory", {{"memory_rss_stat", "rss_stat", true}}};
};

}  // namespace

std::unique_ptr<TracerModule> make_memory_module() { return std::make_unique<MemoryModule>(); }

}  // namespace hangtrace
