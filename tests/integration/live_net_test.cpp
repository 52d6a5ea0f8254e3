// TCP retransmits, live, against a real stuck connect() (root + BTF).
//
// repro_live_syn_retransmit moves into a private network namespace (the
// host's network is never touched), routes 10.255.0.1 out of `lo` so its SYN
// loops back unanswered, keeps the SYN retransmit timeout at 1 s, and hangs
// in connect() -- before any tracer attaches, as a job hung on a rendezvous
// server that is gone. The net concern must still stream that socket's
// retransmits (it adopts sockets the traced processes already had open), and
// `hangtrace --pid --duration` must cite them in its network-wait finding.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "hangtrace/abi.h"
#include "hangtrace/syscall_nr.h"
#include "live_tracer.h"
#include "support.h"

namespace hangtrace::testing {
namespace {

using namespace std::chrono_literals;

constexpr int kTcpSynSent = TCP_SYN_SENT;
constexpr const char* kRemote = "10.255.0.1";
constexpr int kRemotePort = 4242;

bool hook_active(const LiveTracer& t, const std::string& program) {
  for (const auto& h : t.hooks())
    if (h.program == program) return h.active;
  return false;
}

std::string hook_listing(const LiveTracer& t) {
  std::ostringstream os;
  for (const auto& h : t.hooks()) {
    if (h.concern != "net") continue;
    os << "  " << h.program << " " << h.attach << " " << (h.active ? "active" : "inactive")
       << (h.reason.empty() ? "" : " -- " + h.reason) << "\n";
  }
  return os.str();
}

// Whether this kernel has the tcp_retransmit_skb tracepoint at all (its BTF
// names every tracepoint's btf_trace_<name> type).
bool kernel_has_retransmit_tracepoint() {
  std::ifstream in("/sys/kernel/btf/vmlinux", std::ios::binary);
  std::string btf((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return btf.find(std::string("btf_trace_tcp_retransmit_skb") + '\0') != std::string::npos;
}

std::string describe(const std::vector<ht_tcp_event>& events, uint64_t t0) {
  std::ostringstream os;
  for (const auto& e : events) {
    char src[INET6_ADDRSTRLEN] = {}, dst[INET6_ADDRSTRLEN] = {};
    inet_ntop(e.family, e.saddr, src, sizeof src);
    inet_ntop(e.family, e.daddr, dst, sizeof dst);
    os << "  +" << (e.hdr.ts_ns - t0) / 1'000'000 << " ms tid " << e.hdr.tid << " " << src << ":" << e.sport
       << " -> " << dst << ":" << e.dport << " state " << e.newstate << " cookie " << e.sock_cookie << "\n";
  }
  return os.str();
}

uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// The repro, blocked in connect() with its SYN in flight.
struct StuckConnect {
  Workload w{{repro_path("repro_live_syn_retransmit")}};
  int pid = -1, port = -1;

  // "" when it is in place, else what went wrong.
  std::string start() {
    std::string ready = w.wait_for_line("READY", 20s);
    if (ready.empty()) return "the repro printed no READY line (unshare(CLONE_NEWNET) refused?)";
    pid = field(ready, "pid");
    port = field(ready, "port");
    if (pid <= 0 || port <= 0) return "bad READY line: " + ready;
    std::string remote = std::string("remote=") + kRemote + ":" + std::to_string(kRemotePort);
    if (ready.find(remote) == std::string::npos) return "bad READY line: " + ready;
    return ::hangtrace::testing::wait_until_blocked(pid, 20s, {HT_NR_connect});
  }
};

// Twins as in live_resources_test: tp_btf, and the raw_tp a kernel without
// tp_btf would get.
class LiveNet : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (GetParam()) setenv("HANGTRACE_LIVE_NO_TP_BTF", "1", 1);
  }
  void TearDown() override { unsetenv("HANGTRACE_LIVE_NO_TP_BTF"); }
  std::string twin(const std::string& base) const { return base + (GetParam() ? "_raw" : "_btf"); }
};

TEST_P(LiveNet, SynRetransmitsOfAConnectHungBeforeAttachAreStreamed) {
  HANGTRACE_REQUIRE_BPF();
  StuckConnect repro;
  std::string why = repro.start();
  ASSERT_EQ(why, "") << why;

  LiveOptions opt;
  opt.tgids = {repro.pid};
  auto started = LiveTracer::start(opt);
  ASSERT_TRUE(started) << started.error();
  auto& t = **started;
  const uint64_t t0 = monotonic_ns();
  std::cout << hook_listing(t);
  if (!hook_active(t, twin("net_retransmit"))) {
    if (!kernel_has_retransmit_tracepoint())
      GTEST_SKIP() << "this kernel has no tcp_retransmit_skb tracepoint";
    FAIL() << twin("net_retransmit") << " is not active:\n" << hook_listing(t);
  }

  // Three retransmits of the stuck socket, with a deadline: at one a second
  // that takes about 3 s (older kernels without tcp_syn_linear_timeouts back
  // off: 1, 3, 7, 15 s after the connect).
  std::vector<ht_tcp_event> events;
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (events.size() < 3 && std::chrono::steady_clock::now() < deadline) {
    int n = t.poll(100, [&](const void* data, size_t size) {
      ht_event_header h;
      if (size < sizeof(ht_tcp_event)) return;
      std::memcpy(&h, data, sizeof h);
      if (h.type != HT_EV_TCP_RETRANSMIT || static_cast<int>(h.tgid) != repro.pid) return;
      ht_tcp_event e;
      std::memcpy(&e, data, sizeof e);
      events.push_back(e);
    });
    ASSERT_GE(n, 0);
  }
  std::string seen = describe(events, t0);
  std::cout << seen;
  SCOPED_TRACE(seen);
  ASSERT_GE(events.size(), 3u) << "retransmits seen within 20 s";

  uint8_t remote[4], lo[4] = {127, 0, 0, 1};
  inet_pton(AF_INET, kRemote, remote);
  for (const auto& e : events) {
    EXPECT_EQ(e.family, AF_INET);
    EXPECT_EQ(e.hdr.tgid, static_cast<uint32_t>(repro.pid));
    EXPECT_EQ(e.sport, repro.port);
    EXPECT_EQ(e.dport, kRemotePort);
    EXPECT_EQ(std::memcmp(e.saddr, lo, 4), 0);
    EXPECT_EQ(std::memcmp(e.daddr, remote, 4), 0);
    EXPECT_EQ(e.oldstate, kTcpSynSent);
    EXPECT_EQ(e.newstate, kTcpSynSent);
    if (!GetParam()) {
      EXPECT_NE(e.sock_cookie, 0u);  // tp_btf: bpf_get_socket_cookie
    }
  }
  // One socket: the same cookie throughout.
  EXPECT_TRUE(std::all_of(events.begin(), events.end(),
                          [&](const ht_tcp_event& e) { return e.sock_cookie == events[0].sock_cookie; }));
  for (size_t i = 1; i < events.size(); ++i)
    std::cout << "  interval " << (events[i].hdr.ts_ns - events[i - 1].hdr.ts_ns) / 1'000'000 << " ms\n";
}

INSTANTIATE_TEST_SUITE_P(Twins, LiveNet, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? "raw_tp" : "tp_btf";
                         });

// The real binary, attached to the job that is already stuck.
TEST(LiveNetCli, NetworkWaitFindingCitesTheRetransmits) {
  HANGTRACE_REQUIRE_BPF();
  if (!kernel_has_retransmit_tracepoint()) GTEST_SKIP() << "this kernel has no tcp_retransmit_skb tracepoint";
  StuckConnect repro;
  std::string why = repro.start();
  ASSERT_EQ(why, "") << why;

  auto run = ::hangtrace::testing::run_hangtrace(repro.pid, {"--duration", "3", "--stall-after", "1"});
  ASSERT_TRUE(run.report.is_object()) << run.dump();
  EXPECT_EQ(run.cmd.exit_code, 2) << run.dump();
  auto waits = run.findings("network-wait");
  ASSERT_EQ(waits.size(), 1u) << run.dump();
  const auto& f = waits[0];
  const std::string remote = std::string(kRemote) + ":" + std::to_string(kRemotePort);
  EXPECT_EQ(f["details"]["remote"], remote) << run.dump();
  EXPECT_EQ(f["details"]["local"], "127.0.0.1:" + std::to_string(repro.port)) << run.dump();
  EXPECT_EQ(f["details"]["remote_on_this_host"], false) << run.dump();
  EXPECT_EQ(f["severity"], "critical") << run.dump();

  // "live: N TCP retransmits to 10.255.0.1:4242 in the 3.0 s window (last in SYN_SENT: ...)"
  const std::regex cited(
      "live: ([0-9]+) TCP retransmits? to 10\\.255\\.0\\.1:4242 in the [0-9.]+ s window "
      "\\(last in SYN_SENT: the SYN is never answered\\)");
  int retransmits = -1;
  for (const auto& e : f["evidence"]) {
    std::smatch m;
    std::string text = e.get<std::string>();
    if (std::regex_search(text, m, cited)) {
      retransmits = std::stoi(m[1]);
      std::cout << "  evidence: " << text << "\n";
    }
  }
  std::cout << "  summary: " << f["summary"].get<std::string>() << "\n";
  // One a second over a 3 s window; 2 leaves room for where the window falls.
  EXPECT_GE(retransmits, 2) << run.dump();
  EXPECT_LE(retransmits, 6) << run.dump();
}

}  // namespace
}  // namespace hangtrace::testing
