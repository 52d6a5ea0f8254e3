// The "net" concern (bpf/net.bpf.c): TCP state changes and retransmits of
// sockets owned by traced tasks.
#include <bpf/bpf.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <string>

#include "hangtrace/abi.h"
#include "hangtrace/procfs.h"
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

// struct open_sock_owner in bpf/net.bpf.c.
struct ht_sock_owner {
  uint32_t tgid;
  uint32_t tid;
  char comm[HT_COMM_LEN];
};
static_assert(sizeof(ht_sock_owner) == 24);

// Lists the sockets `tgid` has open in `open_socks` (inode -> owner), so that
// one already hanging in connect() or recv() is adopted by its first event.
// Best effort: a process that exits meanwhile, or an fd closed under us, is
// simply not listed.
void list_open_sockets(int map_fd, int tgid, const procfs::ProcFs& proc) {
  ht_sock_owner owner{};
  owner.tgid = owner.tid = static_cast<uint32_t>(tgid);
  if (auto comm = proc.comm(tgid)) comm->copy(owner.comm, sizeof owner.comm - 1);
  auto fds = proc.fds(tgid);
  if (!fds) return;
  for (int fd : *fds) {
    auto link = proc.fd_link(tgid, fd);
    if (!link) continue;
    procfs::FdLinkInfo target = procfs::classify_fd_link(*link);
    if (target.kind != FdKind::Socket || target.inode == 0) continue;
    uint64_t key = target.inode;
    bpf_map_update_elem(map_fd, &key, &owner, BPF_ANY);
  }
}

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
          tgids_ = options.tgids;
          return skel_->obj;
        },
        [&]() { return net_bpf__load(skel_); },
        [&]() {
          net_bpf__destroy(skel_);
          skel_ = nullptr;
        });
  }

  // Listed after attaching, so no socket falls in between: one connect()ed
  // before the attach is in the list, one connect()ed after it is claimed by
  // its SYN_SENT transition.
  Result<bool> attach() override {
    auto attached = hooks_.attach();
    if (attached && skel_) {
      int map_fd = bpf_map__fd(skel_->maps.open_socks);
      for (int tgid : tgids_) list_open_sockets(map_fd, tgid, procfs::ProcFs());
    }
    return attached;
  }
  std::vector<HookStatus> hooks() const override { return hooks_.hooks(); }

 private:
  net_bpf* skel_ = nullptr;
  std::vector<int> tgids_;
  TwinHooks hooks_{
      "net",
      {{"net_set_state", "inet_sock_set_state", true}, {"net_retransmit", "tcp_retransmit_skb", false}}};
};

}  // namespace

std::unique_ptr<TracerModule> make_net_module() { return std::make_unique<NetModule>(); }

}  // namespace hangtrace
