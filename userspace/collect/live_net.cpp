// The "net" concern (bpf/net.bpf.c): TCP state changes and retransmits of
// sockets owned by traced tasks.
#include <cerrno>
#include <cstddef>
#include <cstring>

#include "hangtrace/abi.h"
#include "live_modules.h"
#include "live_twin_hooks.h"
#include "net.skel.h"

namespace hangtrace {

static_assert(sizeof(ht_tcp_event) == 96);
static_assert(offsetof(ht_tcp_event, family) == 40);
static_assert(offsetof(ht_tcp_event, sport) == 42);
static_assert(offsetof(ht_tcp_event, dport) == 44);
static_assert(offsetof(ht_tcp_event, saddr) == 48);
static_assert(offsetof(ht_tcp_event, daddr) == 64);
static_assert(offsetof(ht_tcp_event, oldstate) == 80);
static_assert(offsetof(ht_tcp_event, newstate) == 84);
static_assert(offsetof(ht_tcp_event, sock_cookie) == 88);

namespace {

class NetModule : public TracerModule {
 public:
  ~NetModule() override {
    hooks_.detach();
    net_bpf__destroy(skel_);
  }
  const char* name() const override { return "net"; }

  Result<bool> load(const SharedMaps& maps, const LiveOptions& options) override {
    return hooks_.load(
        [&]() -> Result<bpf_object*> {
          skel_ = net_bpf__open();
          if (!skel_) return make_error(std::string("open: ") + std::strerror(errno));
          auto shared = maps.reuse_in(skel_->obj);
          if (!shared) return make_error(shared.error());
          skel_->rodata->ht_wakeup_bytes = options.wakeup_bytes;
          return skel_->obj;
        },
        [&]() { return net_bpf__load(skel_); },
        [&]() {
          net_bpf__destroy(skel_);
          skel_ = nullptr;
        });
  }

  Result<bool> attach() override { return hooks_.attach(); }
  std::vector<HookStatus> hooks() const override { return hooks_.hooks(); }

 private:
  net_bpf* skel_ = nullptr;
  TwinHooks hooks_{
      "net",
      {{"net_set_state", "inet_sock_set_state", true}, {"net_retransmit", "tcp_retransmit_skb", false}}};
};

}  // namespace

std::unique_ptr<TracerModule> make_net_module() { return std::make_unique<NetModule>(); }

}  // namespace hangtrace
