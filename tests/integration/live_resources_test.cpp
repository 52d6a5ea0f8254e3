// The live tracer's resource concerns against real processes (root + BTF):
// shm (/dev/shm files, faults on them, the SIGBUS of a full tmpfs, ENOSPC),
// net (TCP state changes of a traced process's sockets) and memory (RSS
// growth). Each workload waits for a line on stdin before it acts, so the
// tracer is attached before the first event of interest.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "hangtrace/abi.h"
#include "live_tracer.h"
#include "live_records.h"
#include "support.h"

namespace hangtrace::testing {
namespace {

using namespace std::chrono_literals;

constexpr int kTcpSynSent = TCP_SYN_SENT, kTcpEstablished = TCP_ESTABLISHED, kTcpSynRecv = TCP_SYN_RECV,
              kTcpFinWait1 = TCP_FIN_WAIT1, kTcpFinWait2 = TCP_FIN_WAIT2, kTcpClose = TCP_CLOSE,
              kTcpCloseWait = TCP_CLOSE_WAIT, kTcpLastAck = TCP_LAST_ACK, kTcpListen = TCP_LISTEN;

std::unique_ptr<LiveTracer> start_tracer(int pid, uint64_t rss_step = 64u << 20) {
  LiveOptions opt;
  opt.tgids = {pid};
  opt.rss_step_bytes = rss_step;
  if (const char* v = getenv("HANGTRACE_TEST_BPF_VERBOSITY")) opt.verbosity = std::atoi(v);
  auto t = LiveTracer::start(opt);
  if (!t) {
    ADD_FAILURE() << t.error();
    return nullptr;
  }
  return std::move(*t);
}

bool hook_active(const LiveTracer& t, const std::string& program) {
  for (const auto& h : t.hooks()) {
    if (h.program == program) return h.active;
  }
  return false;
}

std::string hook_listing(const LiveTracer& t, const std::string& concern) {
  std::ostringstream os;
  for (const auto& h : t.hooks()) {
    if (h.concern != concern) continue;
    os << "  " << h.program << " " << h.attach << " " << (h.active ? "active" : "inactive")
       << (h.reason.empty() ? "" : " -- " + h.reason) << "\n";
  }
  return os.str();
}

// Every test runs twice: with the tp_btf twins this kernel offers, and with
// the raw_tp twins a kernel without tp_btf would get.
class LiveResources : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (GetParam()) setenv("HANGTRACE_LIVE_NO_TP_BTF", "1", 1);
  }
  void TearDown() override { unsetenv("HANGTRACE_LIVE_NO_TP_BTF"); }
  // The twin this run must have attached.
  std::string twin(const std::string& base) const { return base + (GetParam() ? "_raw" : "_btf"); }
};

std::string name_of(const ht_shm_event& e) { return std::string(e.name, strnlen(e.name, sizeof e.name)); }

std::string describe(const std::vector<ht_shm_event>& events) {
  std::ostringstream os;
  for (const auto& e : events) {
    os << "  op " << e.op << " ret " << e.ret << " inode " << e.inode << " size " << e.size << " addr 0x"
       << std::hex << e.addr << std::dec << " name " << name_of(e) << " tmpfs " << e.fs_used << "/"
       << e.fs_size << "\n";
  }
  return os.str();
}

std::vector<ht_shm_event> with_op(const std::vector<ht_shm_event>& events, uint32_t op) {
  std::vector<ht_shm_event> out;
  for (const auto& e : events) {
    if (e.op == op) out.push_back(e);
  }
  return out;
}

TEST_P(LiveResources, ShmProducerDiesOfSigbusOnAFullTmpfs) {
  HANGTRACE_REQUIRE_BPF();
  Workload w({repro_path("repro_live_shm"), "sigbus"}, /*gated_stdin=*/true);
  int pid = field(w.wait_for_line("READY"), "pid");
  ASSERT_GT(pid, 0);
  auto t = start_tracer(pid);
  ASSERT_TRUE(t);
  std::cout << hook_listing(*t, "shm") << hook_listing(*t, "syscalls");
  // The create/truncate/mmap records come from the syscall dispatcher.
  for (const char* base : {"sys_exit", "shm_page_fault", "shm_signal_generate"}) {
    ASSERT_TRUE(hook_active(*t, twin(base))) << twin(base);
  }

  w.release();
  int status = w.wait_exit();
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS) << "wait status " << status;

  Collected c;
  auto shm = [&] { return c.of_type<ht_shm_event>(HT_EV_SHM, pid); };
  poll_until(*t, c, [&] { return !with_op(shm(), HT_SHM_SIGBUS).empty(); });
  auto events = shm();
  std::cout << describe(events);
  SCOPED_TRACE(describe(events));

  auto create = with_op(events, HT_SHM_CREATE);
  ASSERT_EQ(create.size(), 1u);
  EXPECT_EQ(name_of(create[0]), "x");
  EXPECT_GE(create[0].ret, 0);  // the fd
  uint64_t inode = create[0].inode;
  EXPECT_NE(inode, 0u);

  auto trunc = with_op(events, HT_SHM_TRUNCATE);
  ASSERT_EQ(trunc.size(), 1u);
  EXPECT_EQ(trunc[0].size, 4u << 20);
  EXPECT_EQ(trunc[0].ret, 0);
  EXPECT_EQ(trunc[0].inode, inode);

  auto mmap = with_op(events, HT_SHM_MMAP);
  ASSERT_EQ(mmap.size(), 1u);
  EXPECT_EQ(mmap[0].size, 4u << 20);
  EXPECT_NE(mmap[0].addr, 0u);
  EXPECT_EQ(mmap[0].inode, inode);
  uint64_t base = mmap[0].addr;

  // Rate-limited to one per MiB of file: the first page, then the first
  // page past the 1 MiB tmpfs -- the one that fails.
  auto faults = with_op(events, HT_SHM_FAULT);
  ASSERT_GE(faults.size(), 1u);
  EXPECT_EQ(faults[0].inode, inode);
  EXPECT_EQ(faults[0].addr, base);
  EXPECT_EQ(faults[0].size, 0u);  // file offset
  EXPECT_EQ(faults.back().addr, base + (1u << 20));

  auto sigbus = with_op(events, HT_SHM_SIGBUS);
  ASSERT_EQ(sigbus.size(), 1u);
  EXPECT_EQ(sigbus[0].hdr.tid, static_cast<uint32_t>(pid));
  EXPECT_EQ(sigbus[0].ret, 2);  // BUS_ADRERR
  EXPECT_EQ(sigbus[0].inode, inode);
  EXPECT_EQ(name_of(sigbus[0]), "x");
  EXPECT_EQ(sigbus[0].addr, base + (1u << 20));
  EXPECT_EQ(sigbus[0].size, 1u << 20);  // file offset: exactly the tmpfs size
  // Measured in the kernel at the fault: the 1 MiB tmpfs was full.
  EXPECT_EQ(sigbus[0].fs_size, 1u << 20);
  EXPECT_GE(sigbus[0].fs_used, 900u << 10);
  EXPECT_EQ(trunc[0].fs_size, 1u << 20);
}

TEST_P(LiveResources, ShmFallocatePastTheTmpfsSizeIsEnospc) {
  HANGTRACE_REQUIRE_BPF();
  Workload w({repro_path("repro_live_shm"), "fallocate"}, /*gated_stdin=*/true);
  int pid = field(w.wait_for_line("READY"), "pid");
  ASSERT_GT(pid, 0);
  auto t = start_tracer(pid);
  ASSERT_TRUE(t);

  w.release();
  ASSERT_EQ(w.wait_for_line("FALLOCATE"), "FALLOCATE 28");  // ENOSPC
  ASSERT_EQ(w.wait_for_line("WRITE"), "WRITE 28");
  ASSERT_EQ(w.wait_for_line("DONE"), "DONE");

  Collected c;
  auto shm = [&] { return c.of_type<ht_shm_event>(HT_EV_SHM, pid); };
  poll_until(*t, c, [&] { return !with_op(shm(), HT_SHM_UNLINK).empty(); });
  auto events = shm();
  std::cout << describe(events);
  SCOPED_TRACE(describe(events));

  auto create = with_op(events, HT_SHM_CREATE);
  ASSERT_EQ(create.size(), 1u);
  // fallocate's (size: where the file would end), then write's (size: the count).
  auto enospc = with_op(events, HT_SHM_ENOSPC);
  ASSERT_EQ(enospc.size(), 2u);
  EXPECT_EQ(enospc[0].size, 4u << 20);
  EXPECT_EQ(enospc[1].size, 64u << 10);
  for (const auto& e : enospc) {
    EXPECT_EQ(e.ret, -28);
    EXPECT_EQ(e.fs_size, 1u << 20);
    EXPECT_EQ(e.inode, create[0].inode);
    EXPECT_EQ(name_of(e), "x");
  }
  EXPECT_TRUE(with_op(events, HT_SHM_FALLOCATE).empty());  // reported as the ENOSPC

  auto unlink = with_op(events, HT_SHM_UNLINK);
  ASSERT_EQ(unlink.size(), 1u);
  EXPECT_EQ(unlink[0].ret, 0);
  EXPECT_EQ(name_of(unlink[0]), "x");
}

// The states one socket went through, in order.
std::vector<int> states_of(const std::vector<ht_tcp_event>& events,
                           const std::function<bool(const ht_tcp_event&)>& sel) {
  std::vector<int> out;
  for (const auto& e : events) {
    if (!sel(e)) continue;
    if (out.empty()) out.push_back(e.oldstate);
    out.push_back(e.newstate);
  }
  return out;
}

std::string describe(const std::vector<ht_tcp_event>& events) {
  std::ostringstream os;
  for (const auto& e : events) {
    char src[INET6_ADDRSTRLEN] = {}, dst[INET6_ADDRSTRLEN] = {};
    inet_ntop(e.family, e.saddr, src, sizeof src);
    inet_ntop(e.family, e.daddr, dst, sizeof dst);
    os << "  tid " << e.hdr.tid << " " << src << ":" << e.sport << " -> " << dst << ":" << e.dport << " "
       << e.oldstate << " -> " << e.newstate << " cookie " << e.sock_cookie << "\n";
  }
  return os.str();
}

TEST_P(LiveResources, TcpStateChangesOfATracedClientAndServer) {
  HANGTRACE_REQUIRE_BPF();
  Workload w({repro_path("repro_live_tcp")}, /*gated_stdin=*/true);
  std::string ready = w.wait_for_line("READY");
  int pid = field(ready, "pid"), port = field(ready, "port");
  ASSERT_GT(pid, 0);
  ASSERT_GT(port, 0);
  auto t = start_tracer(pid);
  ASSERT_TRUE(t);
  std::cout << hook_listing(*t, "net");
  ASSERT_TRUE(hook_active(*t, twin("net_set_state")));
  ASSERT_TRUE(hook_active(*t, twin("net_retransmit")));

  w.release();
  int client_port = field(w.wait_for_line("DONE"), "client_port");
  ASSERT_GT(client_port, 0);

  Collected c;
  auto tcp = [&] { return c.of_type<ht_tcp_event>(HT_EV_TCP_STATE, pid); };
  auto is_listener = [&](const ht_tcp_event& e) { return e.sport == port && e.dport == 0; };
  auto is_child = [&](const ht_tcp_event& e) { return e.sport == port && e.dport == client_port; };
  // connect() enters SYN_SENT before the source port is bound.
  auto is_client = [&](const ht_tcp_event& e) {
    return e.dport == port && (e.sport == client_port || e.newstate == kTcpSynSent);
  };
  poll_until(*t, c, [&] {
    auto ev = tcp();
    auto child = states_of(ev, is_child), listener = states_of(ev, is_listener);
    return !child.empty() && child.back() == kTcpClose && !listener.empty() && listener.back() == kTcpClose;
  });
  auto events = tcp();
  std::cout << describe(events);
  SCOPED_TRACE(describe(events));

  EXPECT_EQ(states_of(events, is_listener), (std::vector<int>{kTcpClose, kTcpListen, kTcpClose}));
  EXPECT_EQ(states_of(events, is_client), (std::vector<int>{kTcpClose, kTcpSynSent, kTcpEstablished,
                                                            kTcpFinWait1, kTcpFinWait2, kTcpClose}));
  EXPECT_EQ(states_of(events, is_child), (std::vector<int>{kTcpListen, kTcpSynRecv, kTcpEstablished,
                                                           kTcpCloseWait, kTcpLastAck, kTcpClose}));
  for (const auto& e : events) {
    EXPECT_EQ(e.family, AF_INET);
    EXPECT_EQ(e.hdr.tgid, static_cast<uint32_t>(pid));
    // Both ends are known from ESTABLISHED on (a child is cloned into
    // SYN_RECV before its peer's address is filled in).
    if (!is_listener(e) && (e.newstate == kTcpEstablished || e.newstate == kTcpClose)) {
      uint8_t lo[4] = {127, 0, 0, 1};
      EXPECT_EQ(std::memcmp(e.saddr, lo, 4), 0);
      EXPECT_EQ(std::memcmp(e.daddr, lo, 4), 0);
    }
  }
}

TEST_P(LiveResources, RssGrowthIsStreamedInSteps) {
  HANGTRACE_REQUIRE_BPF();
  Workload w({repro_path("repro_live_rss")}, /*gated_stdin=*/true);
  int pid = field(w.wait_for_line("READY"), "pid");
  ASSERT_GT(pid, 0);
  auto t = start_tracer(pid, 32u << 20);
  ASSERT_TRUE(t);
  std::cout << hook_listing(*t, "memory");
  ASSERT_TRUE(hook_active(*t, twin("memory_rss_stat")));

  w.release();
  ASSERT_EQ(w.wait_for_line("DONE"), "DONE");

  Collected c;
  auto rss = [&] { return c.of_type<ht_rss_event>(HT_EV_RSS, pid); };
  poll_until(*t, c, [&] {
    auto ev = rss();
    return !ev.empty() && ev.back().rss_bytes >= (200u << 20);
  });
  auto events = rss();
  std::ostringstream os;
  for (const auto& e : events)
    os << "  rss " << (e.rss_bytes >> 20) << " MiB anon " << (e.anon_bytes >> 20) << " MiB\n";
  std::cout << os.str();
  SCOPED_TRACE(os.str());

  ASSERT_GE(events.size(), 4u);
  for (size_t i = 1; i < events.size(); ++i) EXPECT_GT(events[i].rss_bytes, events[i - 1].rss_bytes);
  EXPECT_GE(events.back().rss_bytes, 200u << 20);
  EXPECT_GE(events.back().anon_bytes, 200u << 20);
}

INSTANTIATE_TEST_SUITE_P(Twins, LiveResources, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? "raw_tp" : "tp_btf";
                         });

}  // namespace
}  // namespace hangtrace::testing
