// The network-wait finding cites what the live window saw of the waited-on
// connection: TCP retransmits and failed connects to the same remote, from
// records laid out exactly as bpf/net.bpf.c writes them (abi.h).
#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <gtest/gtest.h>
#include <netinet/tcp.h>

#include <cstring>
#include <string>

#include "hangtrace/abi.h"
#include "hangtrace/analysis.h"
#include "hangtrace/live.h"
#include "snapshot_builder.h"

namespace hangtrace {
namespace {

constexpr int kPid = 100;
constexpr int64_t kConnect = HT_NR_connect;
constexpr int kSynSent = TCP_SYN_SENT, kEstablished = TCP_ESTABLISHED, kClose = TCP_CLOSE;

// The job's main thread has been blocked in connect(fd 3) to 10.255.0.1:4242
// for a minute; the SYN was never answered.
Snapshot stuck_connect() {
  testing::SnapshotBuilder b(kPid);
  b.proc(kPid, 1, ProcessRole::Target);
  testing::in_syscall(b.thread(kPid, kPid), kConnect, {3});
  b.fd(kPid, 3, FdKind::Socket, 5000);
  SocketInfo sock;
  sock.inode = 5000;
  sock.family = "tcp";
  sock.state = "SYN_SENT";
  sock.local = "127.0.0.1:40000";
  sock.remote = "10.255.0.1:4242";
  b.s.sockets.push_back(sock);
  return b.s;
}

TraceEvent tcp_event(uint32_t type, int tgid, uint16_t sport, const char* daddr, uint16_t dport, int oldstate,
                     int newstate, uint64_t ts) {
  ht_tcp_event r;
  std::memset(&r, 0, sizeof r);
  r.hdr.type = type;
  r.hdr.size = sizeof r;
  r.hdr.ts_ns = ts;
  r.hdr.tgid = r.hdr.tid = static_cast<uint32_t>(tgid);
  std::strncpy(r.hdr.comm, "python3", sizeof r.hdr.comm);
  r.family = AF_INET;
  r.sport = sport;
  r.dport = dport;
  inet_pton(AF_INET, "127.0.0.1", r.saddr);
  inet_pton(AF_INET, daddr, r.daddr);
  r.oldstate = oldstate;
  r.newstate = newstate;
  auto e = decode_event(&r, sizeof r);
  EXPECT_TRUE(e.ok()) << e.error();
  return e.ok() ? *e : TraceEvent{};
}

const Finding* network_wait(const Diagnosis& d) {
  for (const auto& f : d.findings)
    if (f.kind == FindingKind::NetworkWait) return &f;
  return nullptr;
}

std::string evidence(const Finding& f) {
  std::string out;
  for (const auto& e : f.evidence) out += e + "\n";
  return out;
}

TEST(NetEvidence, RetransmitsAndFailedConnectsToTheWaitedOnRemoteAreCited) {
  Aggregator agg;
  // An earlier attempt from another port that gave up, then the socket the
  // snapshot shows retransmitting its SYN three times.
  agg.add(tcp_event(HT_EV_TCP_RETRANSMIT, kPid, 39999, "10.255.0.1", 4242, kSynSent, kSynSent, 1));
  agg.add(tcp_event(HT_EV_TCP_STATE, kPid, 39999, "10.255.0.1", 4242, kSynSent, kClose, 2));
  for (uint64_t ts : {3, 4, 5})
    agg.add(tcp_event(HT_EV_TCP_RETRANSMIT, kPid, 40000, "10.255.0.1", 4242, kSynSent, kSynSent, ts));
  // Not this wait: another remote, another process, a connect that succeeded.
  agg.add(tcp_event(HT_EV_TCP_RETRANSMIT, kPid, 40001, "10.255.0.9", 4242, kEstablished, kEstablished, 6));
  agg.add(tcp_event(HT_EV_TCP_RETRANSMIT, 200, 40002, "10.255.0.1", 4242, kSynSent, kSynSent, 7));
  agg.add(tcp_event(HT_EV_TCP_STATE, kPid, 40003, "10.255.0.1", 4242, kSynSent, kEstablished, 8));
  LiveObservation live = agg.finish(0, 3'000'000'000ull, 8, 0);

  Snapshot s = stuck_connect();
  Diagnosis d = diagnose(s, {}, &live);
  const Finding* f = network_wait(d);
  ASSERT_NE(f, nullptr);
  SCOPED_TRACE(evidence(*f));
  EXPECT_EQ(f->details["remote"], "10.255.0.1:4242");
  EXPECT_NE(evidence(*f).find("live: 4 TCP retransmits to 10.255.0.1:4242 in the 3.0 s window "
                              "(last in SYN_SENT: the SYN is never answered)"),
            std::string::npos);
  EXPECT_NE(evidence(*f).find("live: 1 connect to 10.255.0.1:4242 failed (SYN_SENT -> CLOSE)"),
            std::string::npos);
}

TEST(NetEvidence, NothingIsCitedWithoutRetransmitsOrWithoutALiveWindow) {
  Snapshot s = stuck_connect();
  Diagnosis without_live = diagnose(s);
  const Finding* f = network_wait(without_live);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(evidence(*f).find("retransmit"), std::string::npos);

  Aggregator agg;
  agg.add(tcp_event(HT_EV_TCP_STATE, kPid, 40000, "10.255.0.1", 4242, kClose, kSynSent, 1));
  LiveObservation live = agg.finish(0, 3'000'000'000ull, 1, 0);
  Diagnosis d = diagnose(s, {}, &live);
  f = network_wait(d);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(evidence(*f).find("retransmit"), std::string::npos) << evidence(*f);
  EXPECT_EQ(evidence(*f).find("failed"), std::string::npos) << evidence(*f);
}

}  // namespace
}  // namespace hangtrace
