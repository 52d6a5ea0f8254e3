// The "shm" concern (bpf/shm.bpf.c): faults of traced tasks on shared tmpfs
// mappings, and the SIGBUS a failed fault ends in. Its syscall part (create,
// truncate, fallocate, mmap, unlink, ENOSPC) runs in the syscall dispatcher
// (live_syscalls.cpp).
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

#include "hangtrace/abi.h"
#include "live_modules.h"
#include "live_twin_hooks.h"
#include "shm.skel.h"

namespace hangtrace {

static_assert(sizeof(ht_shm_event) == 152);
static_assert(offsetof(ht_shm_event, op) == 40);
static_assert(offsetof(ht_shm_event, ret) == 44);
static_assert(offsetof(ht_shm_event, inode) == 48);
static_assert(offsetof(ht_shm_event, size) == 56);
static_assert(offsetof(ht_shm_event, addr) == 64);
static_assert(offsetof(ht_shm_event, name) == 72);
static_assert(offsetof(ht_shm_event, fs_size) == 136);
static_assert(offsetof(ht_shm_event, fs_used) == 144);

namespace {

class ShmModule : public TracerModule {
 public:
  ~ShmModule() override {
    hooks_.detach();
    shm_bpf__destroy(skel_);
  }
  const char* name() const override { return "shm"; }

  Result<bool> load(const SharedMaps& maps, const LiveOptions& options) override {
    hot_at_start_ = options.hot_hooks;
    return hooks_.load(
        [&]() -> Result<bpf_object*> {
          skel_ = shm_bpf__open();
          if (!skel_) return make_error(std::string("open: ") + std::strerror(errno));
          auto shared = maps.reuse_in(skel_->obj);
          if (!shared) return make_error(shared.error());
          skel_->rodata->ht_wakeup_bytes = options.wakeup_bytes;
          skel_->rodata->page_shift = page_shift();
          skel_->rodata->shm_trouble_only = options.shm_trouble_only;
          return skel_->obj;
        },
        [&]() { return shm_bpf__load(skel_); },
        [&]() {
          shm_bpf__destroy(skel_);
          skel_ = nullptr;
        });
  }

  Result<bool> attach() override { return hooks_.attach(hot_at_start_); }
  std::vector<HookStatus> hooks() const override { return hooks_.hooks(); }
  Result<bool> set_hot_hooks(bool on) override { return hooks_.set_hot(on); }

 private:
  shm_bpf* skel_ = nullptr;
  bool hot_at_start_ = true;
  // The syscalls (create/truncate/mmap/ENOSPC) run in the syscall
  // dispatcher; faults and SIGBUS need bpf_find_vma (5.17+) and, for
  // faults, an x86 tracepoint.
  TwinHooks hooks_{"shm",
                   // A fault of a traced process looks its VMA up (bpf_find_vma, ~5 us
                   // when the mm changed since: a PyTorch loop's allocator maps and
                   // unmaps every step), so it is hot: the sampled steady state keeps it
                   // detached and relies on the SIGBUS below.
                   {{"shm_page_fault", "page_fault_user", false, "", true},
                    {"shm_signal_generate", "signal_generate", false}}};
};

}  // namespace

std::unique_ptr<TracerModule> make_shm_module() { return std::make_unique<ShmModule>(); }

}  // namespace hangtrace
