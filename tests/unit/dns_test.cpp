// Name resolution: which addresses are this host (loopback, v4-mapped, the
// interfaces of /proc/net/if_inet6 and fib_trie), resolv.conf as a process
// sees it, and the dns-wait rule on hand-built snapshots (a DataLoader worker
// in getaddrinfo against a resolver on this host, or none).
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "fixture_file.h"
#include "hangtrace/analysis.h"
#include "hangtrace/procfs.h"
#include "snapshot_builder.h"
#include "temp_dir.h"

namespace hangtrace {
namespace {

using namespace procfs;
using testing::for_each_truncation;
using testing::in_syscall;
using testing::procfs_fixture;
using testing::SnapshotBuilder;
using testing::TempDir;

// ---- addresses ---------------------------------------------------------------------

TEST(HostAddresses, EveryLoopbackAddressIsThisHost) {
  for (const char* ip : {"127.0.0.1", "127.0.0.53", "127.255.255.254", "::1", "0:0:0:0:0:0:0:1",
                         "::ffff:127.0.0.1", "::ffff:7f00:35", "::FFFF:127.1.2.3"})
    EXPECT_TRUE(is_loopback_address(ip)) << ip;
  for (const char* ip : {"128.0.0.1", "10.0.0.2", "::", "0.0.0.0", "::2", "::ffff:10.0.0.1", "fe80::1"})
    EXPECT_FALSE(is_loopback_address(ip)) << ip;
}

TEST(HostAddresses, HostileTextIsNoAddress) {
  std::string nul("127.0.0.1\0x", 11);
  for (const std::string& ip :
       {std::string(), std::string(" 127.0.0.1"), std::string("127.0.0.1 "), nul, std::string("127.1"),
        std::string("127.0.0.256"), std::string("[::1]"), std::string("::1%lo"), std::string(300, '1'),
        std::string("localhost"), std::string("127.0.0.1:53"), std::string("::ffff:127.0.0.1.5")}) {
    EXPECT_FALSE(canonical_address(ip)) << ip;
    EXPECT_FALSE(is_loopback_address(ip)) << ip;
    EXPECT_FALSE(is_this_host_address(ip, {"127.0.0.1", ip})) << ip;
  }
}

TEST(HostAddresses, CanonicalFormsCompareEqual) {
  EXPECT_EQ(canonical_address("::ffff:10.0.0.1"), "10.0.0.1");
  EXPECT_EQ(canonical_address("FD00:0:0::2"), "fd00::2");
  std::vector<std::string> local = {"192.0.2.2", "fd00::2"};
  EXPECT_TRUE(is_this_host_address("192.0.2.2", local));
  EXPECT_TRUE(is_this_host_address("::ffff:192.0.2.2", local));  // a v6 socket's view of it
  EXPECT_TRUE(is_this_host_address("fd00:0::2", local));
  EXPECT_TRUE(is_this_host_address("127.0.0.53", {}));  // loopback needs no list
  EXPECT_FALSE(is_this_host_address("192.0.2.3", local));
  EXPECT_FALSE(is_this_host_address("0.0.0.0", {"0.0.0.0"}));  // unspecified: no end at all
  EXPECT_FALSE(is_this_host_address("::", {"::"}));
}

TEST(HostAddresses, Endpoints) {
  auto v4 = parse_endpoint("127.0.0.53:53");
  ASSERT_TRUE(v4);
  EXPECT_EQ(v4->ip, "127.0.0.53");
  EXPECT_EQ(v4->port, 53);
  auto v6 = parse_endpoint("[::1]:53");
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->ip, "::1");
  auto mapped = parse_endpoint("[::ffff:127.0.0.9]:5353");
  ASSERT_TRUE(mapped);
  EXPECT_EQ(mapped->ip, "127.0.0.9");
  EXPECT_EQ(mapped->port, 5353);
  for (const char* bad : {"", ":53", "::1:53", "[::1:53", "[]:53", "1.2.3.4:", "1.2.3.4:99999", "1.2.3.4:5x",
                          "name:53", "[1.2.3.4]x:53", "1.2.3.4"})
    EXPECT_FALSE(parse_endpoint(bad)) << bad;
}

TEST(HostAddresses, IfInet6) {
  auto a = parse_if_inet6(procfs_fixture("net_if_inet6"));
  ASSERT_TRUE(a.ok()) << a.error();
  EXPECT_EQ(*a, (std::vector<std::string>{"fe80::fc:ff:fe00:1", "fd00::2", "::1"}));
  EXPECT_FALSE(parse_if_inet6("zz000000000000000000000000000001 01 80 10 80 lo\n").ok());
  EXPECT_FALSE(parse_if_inet6("0001 01 80 10 80 lo\n").ok());
  EXPECT_FALSE(parse_if_inet6("00000000000000000000000000000001\n").ok());
  for_each_truncation(procfs_fixture("net_if_inet6"), [](std::string_view t) { (void)parse_if_inet6(t); });
}

TEST(HostAddresses, FibTrieLocalAddresses) {
  // 127.0.0.0 is a /8 host LOCAL route, not an address; Main and Local list each once.
  EXPECT_EQ(parse_fib_trie_local(procfs_fixture("net_fib_trie")),
            (std::vector<std::string>{"127.0.0.1", "192.0.2.2"}));
  EXPECT_TRUE(parse_fib_trie_local("/32 host LOCAL\n|-- not-an-ip\n   /32 host LOCAL\n|--\n").empty());
  for_each_truncation(procfs_fixture("net_fib_trie"),
                      [](std::string_view t) { (void)parse_fib_trie_local(t); });
}

TEST(HostAddresses, ReadFromTheNamespaceOfAProcess) {
  TempDir dir("ht-host-addresses");
  std::filesystem::create_directories(dir.path / "42" / "net");
  std::ofstream(dir.path / "42" / "net" / "fib_trie") << procfs_fixture("net_fib_trie");
  std::ofstream(dir.path / "42" / "net" / "if_inet6") << procfs_fixture("net_if_inet6");
  ProcFs proc(dir.path.string());
  auto a = proc.host_addresses(42);
  ASSERT_TRUE(a.ok()) << a.error();
  EXPECT_EQ(*a, (std::vector<std::string>{"127.0.0.1", "192.0.2.2", "fe80::fc:ff:fe00:1", "fd00::2", "::1"}));
  int err = 0;
  EXPECT_FALSE(proc.host_addresses(43, &err).ok());
  EXPECT_EQ(err, ENOENT);
}

// ---- resolv.conf --------------------------------------------------------------------

TEST(ResolvConf, NameserversAndTimeouts) {
  ResolverConfig c = parse_resolv_conf(procfs_fixture("etc_resolv_conf"));
  EXPECT_EQ(c.nameservers, (std::vector<std::string>{"127.0.0.53", "10.0.0.2", "fe80::1"}));
  EXPECT_EQ(c.timeout_s, 30);
  EXPECT_EQ(c.attempts, 5);
  EXPECT_TRUE(c.error.empty());
}

TEST(ResolvConf, HostileText) {
  std::string many;
  for (int i = 0; i < 100; ++i) many += "nameserver 10.0.0." + std::to_string(i) + "\n";
  many += "options timeout:-1 attempts:99999999999 timeout: attempts:x\n";
  many += std::string(100000, 'x') + "\n";
  many += std::string("nameserver 10.1.1.1\0junk\n", 25);
  ResolverConfig c = parse_resolv_conf(many);
  EXPECT_EQ(c.nameservers.size(), kMaxNameservers);
  EXPECT_FALSE(c.timeout_s);
  EXPECT_FALSE(c.attempts);
  EXPECT_TRUE(
      parse_resolv_conf("nameserver\n# nameserver 1.1.1.1\n;nameserver 2.2.2.2\nnameserverx 3.3.3.3\n")
          .nameservers.empty());
  for_each_truncation(procfs_fixture("etc_resolv_conf"),
                      [](std::string_view t) { (void)parse_resolv_conf(t); });
}

// ROOT/PID/root as a directory tree standing for a process's root.
struct FakeRoot {
  TempDir dir{"ht-resolv"};
  std::filesystem::path root = dir.path / "42" / "root";
  FakeRoot() { std::filesystem::create_directories(root / "etc"); }
  ProcFs proc() const { return ProcFs(dir.path.string()); }
};

TEST(ResolvConf, ReadThroughTheProcessRoot) {
  FakeRoot r;
  std::ofstream(r.root / "etc" / "resolv.conf") << "nameserver 127.0.0.77\noptions attempts:5\n";
  auto c = r.proc().resolv_conf(42);
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->nameservers, (std::vector<std::string>{"127.0.0.77"}));
  EXPECT_EQ(c->attempts, 5);
  EXPECT_FALSE(r.proc().resolv_conf(43).ok());
}

TEST(ResolvConf, AnAbsoluteLinkResolvesInsideTheProcessRoot) {
  FakeRoot r;
  std::filesystem::create_directories(r.root / "run");
  std::ofstream(r.root / "run" / "stub-resolv.conf") << "nameserver 127.0.0.53\n";
  // /run/stub-resolv.conf of the process, not of hangtrace (which has none).
  std::filesystem::create_symlink("/run/stub-resolv.conf", r.root / "etc" / "resolv.conf");
  auto c = r.proc().resolv_conf(42);
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->nameservers, (std::vector<std::string>{"127.0.0.53"}));
}

TEST(ResolvConf, NotARegularFileIsAnErrorNotAHang) {
  FakeRoot r;
  ASSERT_EQ(mkfifo((r.root / "etc" / "resolv.conf").c_str(), 0600), 0);
  int err = 0;
  auto c = r.proc().resolv_conf(42, &err);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().find("not a regular file"), std::string::npos) << c.error();
}

// The opener under resolv_conf, for any file of the process's (native
// stacks open its libraries through it): a FIFO put where a library was is
// refused at once (EINVAL), and a link resolves inside the process's root.
TEST(OpenInRoot, AFifoIsRefusedAtOnceAndALinkStaysInsideTheRoot) {
  FakeRoot r;
  std::filesystem::create_directories(r.root / "lib");
  ASSERT_EQ(mkfifo((r.root / "lib" / "libevil.so").c_str(), 0600), 0);
  int err = 0;
  auto fifo = r.proc().open_in_root(42, "/lib/libevil.so", &err);
  ASSERT_FALSE(fifo.ok());
  EXPECT_EQ(err, EINVAL);
  std::ofstream(r.root / "lib" / "libreal.so") << "ELF?";
  std::filesystem::create_symlink("/lib/libreal.so", r.root / "lib" / "liblink.so");
  std::filesystem::create_symlink("../../../../../../../etc/passwd", r.root / "lib" / "libup.so");
  auto link = r.proc().open_in_root(42, "/lib/liblink.so", &err);
  ASSERT_TRUE(link.ok()) << link.error();
  char buf[8] = {};
  EXPECT_EQ(read(*link, buf, sizeof buf), 4);
  EXPECT_STREQ(buf, "ELF?");
  close(*link);
  // Dot-dots stop at the process's root: its /etc/passwd (none), not ours.
  EXPECT_FALSE(r.proc().open_in_root(42, "/lib/libup.so", &err).ok());
  EXPECT_EQ(err, ENOENT);
}

TEST(ResolvConf, ALargeFileIsReadUpToTheBound) {
  FakeRoot r;
  {
    std::ofstream out(r.root / "etc" / "resolv.conf");
    out << "nameserver 10.0.0.1\n";
    for (size_t n = 0; n < kMaxResolvConfBytes; n += 20) out << "# padding padding  \n";
    out << "nameserver 10.0.0.2\n";  // past the bound: not read
  }
  auto c = r.proc().resolv_conf(42);
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->nameservers, (std::vector<std::string>{"10.0.0.1"}));
}

// ---- the dns-wait rule ----------------------------------------------------------------

const Finding* find_kind(const Diagnosis& d, FindingKind kind) {
  for (const auto& f : d.findings)
    if (f.kind == kind) return &f;
  return nullptr;
}

constexpr uint64_t kWorkerSocket = 7000, kResolverSocket = 7001;

// main 100 polls the batch pipe its worker 200 writes; the worker polls a UDP
// socket connected to 127.0.0.77:53 (glibc's send_dg); with `resolver`, the
// peer process 300 holds the socket bound there and waits in recvfrom.
SnapshotBuilder dataloader_lookup(bool resolver, double blocked_s = 12.0,
                                  const std::string& server = "127.0.0.77:53") {
  SnapshotBuilder b(100);
  b.proc(100, 1, ProcessRole::Target);
  b.proc(200, 100, ProcessRole::Descendant);
  ThreadInfo& main = b.thread(100, 100);
  in_syscall(main, HT_NR_poll, {0x5000, 1, 5000});
  main.memory.poll_fds = {{5, POLLIN}};
  main.memory.timeout_s = 5.0;
  b.fd(100, 5, FdKind::Pipe, 777, O_RDONLY, 0);
  b.fd(200, 6, FdKind::Pipe, 777, O_WRONLY);
  ThreadInfo& w = b.thread(200, 200, 'S', blocked_s);
  in_syscall(w, HT_NR_poll, {0x6000, 1, 30000});
  w.memory.poll_fds = {{9, POLLIN}};
  w.memory.timeout_s = 30.0;
  w.native_stack = {
      {UserFrame::Kind::Native, "__poll", "/usr/lib/x86_64-linux-gnu/libc.so.6"},
      {UserFrame::Kind::Native, "send_dg", "/usr/lib/x86_64-linux-gnu/libc.so.6"},
      {UserFrame::Kind::Native, "__res_context_send", "/usr/lib/x86_64-linux-gnu/libc.so.6"},
      {UserFrame::Kind::Native, "_nss_dns_gethostbyname4_r", "/usr/lib/x86_64-linux-gnu/libc.so.6"},
      {UserFrame::Kind::Native, "getaddrinfo", "/usr/lib/x86_64-linux-gnu/libc.so.6"}};
  ResolverConfig config;
  config.nameservers = {"127.0.0.77"};
  config.timeout_s = 30;
  config.attempts = 5;
  b.find(200)->resolver = config;
  b.fd(200, 9, FdKind::Socket, kWorkerSocket);
  b.s.sockets.push_back({kWorkerSocket, 1, "udp", "ESTABLISHED", "127.0.0.1:41000", server, 0, 0, 0, true});
  if (resolver) {
    b.proc(300, 1, ProcessRole::Peer, "silent_dns");
    ThreadInfo& r = b.thread(300, 300);
    in_syscall(r, HT_NR_recvfrom, {4, 0, 512});
    b.fd(300, 4, FdKind::Socket, kResolverSocket);
    b.s.sockets.push_back({kResolverSocket, 1, "udp", "CLOSE", server, "0.0.0.0:0", 0, 0, 0, false});
  }
  return b;
}

TEST(DnsWaitRule, AWorkerInGetaddrinfoNamesTheResolverOnThisHost) {
  Diagnosis d = diagnose(dataloader_lookup(true).s);
  const Finding* f = find_kind(d, FindingKind::DnsWait);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, Severity::Critical);
  EXPECT_EQ(f->tids, (std::vector<int>{200}));
  EXPECT_NE(f->summary.find("DNS lookup via 127.0.0.77:53"), std::string::npos) << f->summary;
  EXPECT_NE(f->summary.find("silent_dns"), std::string::npos) << f->summary;
  EXPECT_NE(f->summary.find("on this host"), std::string::npos) << f->summary;
  EXPECT_EQ(f->summary.find("not on this host"), std::string::npos) << f->summary;
  EXPECT_EQ(f->details["resolver"], "127.0.0.77:53");
  EXPECT_EQ(f->details["resolver_pids"], nlohmann::json::array({300}));
  EXPECT_EQ(f->details["resolver_on_this_host"], true);
  EXPECT_EQ(f->details["nameservers"], nlohmann::json::array({"127.0.0.77"}));
  EXPECT_EQ(f->details["resolv_timeout_s"], 30);
  EXPECT_EQ(f->details["frame"], "getaddrinfo (native, libc.so.6)");
  bool conf = false;
  for (const auto& e : f->evidence)
    conf |= e.find("nameserver 127.0.0.77; options timeout:30 attempts:5") != std::string::npos;
  EXPECT_TRUE(conf) << nlohmann::json(f->evidence).dump(1);
  EXPECT_FALSE(f->chain.empty());  // main -> worker -> the lookup
  EXPECT_NE(f->advice[1].find("options timeout:"), std::string::npos);
  // network-wait leaves the lookup to dns-wait.
  EXPECT_EQ(find_kind(d, FindingKind::NetworkWait), nullptr);
  EXPECT_EQ(exit_status_for(d), 2);
}

TEST(DnsWaitRule, NoProcessListensOnTheResolverAddress) {
  Diagnosis d = diagnose(dataloader_lookup(false, 12.0, "127.0.0.53:53").s);
  const Finding* f = find_kind(d, FindingKind::DnsWait);
  ASSERT_NE(f, nullptr);
  EXPECT_NE(f->summary.find("no process on this host listens on 127.0.0.53:53"), std::string::npos)
      << f->summary;
  EXPECT_EQ(f->details["resolver_on_this_host"], true);
  EXPECT_TRUE(f->details["resolver_pids"].empty());
}

TEST(DnsWaitRule, ARemoteResolver) {
  SnapshotBuilder b = dataloader_lookup(false, 12.0, "10.255.255.53:53");
  b.s.sockets[0].remote_is_local_host = false;
  Diagnosis d = diagnose(b.s);
  const Finding* f = find_kind(d, FindingKind::DnsWait);
  ASSERT_NE(f, nullptr);
  EXPECT_NE(f->summary.find("via 10.255.255.53:53; the resolver is not on this host"), std::string::npos)
      << f->summary;
  EXPECT_EQ(f->details["resolver_on_this_host"], false);
}

TEST(DnsWaitRule, NativeFramesAloneWithTheResolverFromResolvConf) {
  SnapshotBuilder b = dataloader_lookup(false);
  b.find(200)->fds.clear();  // the socket is not known: only the frames say "lookup"
  b.s.sockets.clear();
  Diagnosis d = diagnose(b.s);
  const Finding* f = find_kind(d, FindingKind::DnsWait);
  ASSERT_NE(f, nullptr);
  EXPECT_NE(f->summary.find("DNS lookup via 127.0.0.77:53"), std::string::npos) << f->summary;
  EXPECT_EQ(f->details["resolver_on_this_host"], true);
}

TEST(DnsWaitRule, PythonFrameAlone) {
  SnapshotBuilder b = dataloader_lookup(false);
  b.find(200)->fds.clear();
  b.s.sockets.clear();
  ThreadInfo& w = b.find(200)->threads[0];
  w.native_stack.clear();
  w.python_stack = {{UserFrame::Kind::Python, "getaddrinfo", "/usr/lib/python3.11/socket.py", 962},
                    {UserFrame::Kind::Python, "Shards.__getitem__", "/job/train.py", 20}};
  Diagnosis d = diagnose(b.s);
  const Finding* f = find_kind(d, FindingKind::DnsWait);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->details["frame"], "getaddrinfo (Python, /usr/lib/python3.11/socket.py:962)");
  // A function of the user's own named getaddrinfo is no lookup.
  w.python_stack[0].file = "/job/mylib.py";
  EXPECT_EQ(find_kind(diagnose(b.s), FindingKind::DnsWait), nullptr);
}

TEST(DnsWaitRule, ShortLookupsAreNoFinding) {
  AnalysisOptions patient;
  patient.stall_after_s = 60;
  Diagnosis d = diagnose(dataloader_lookup(true).s, patient);
  EXPECT_EQ(find_kind(d, FindingKind::DnsWait), nullptr);
  EXPECT_EQ(find_kind(d, FindingKind::NetworkWait), nullptr);
}

// Point (a) without DNS: a UDP socket to a server on this host is answered by
// the process holding the socket bound there (network-wait names it).
TEST(DnsWaitRule, UdpToALocalServerFindsItsProcess) {
  SnapshotBuilder b = dataloader_lookup(true, 12.0, "127.0.0.77:9999");
  b.find(200)->threads[0].native_stack.clear();
  b.find(200)->resolver.reset();
  Diagnosis d = diagnose(b.s);
  EXPECT_EQ(find_kind(d, FindingKind::DnsWait), nullptr);
  const Finding* f = find_kind(d, FindingKind::NetworkWait);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->details["peer_pids"], nlohmann::json::array({300}));
  EXPECT_EQ(f->details["remote_on_this_host"], true);
  EXPECT_EQ(f->summary.find("not on this host"), std::string::npos) << f->summary;
  // Bound to the wildcard address: the same server.
  b.s.sockets[1].local = "0.0.0.0:9999";
  Diagnosis wildcard = diagnose(b.s);
  f = find_kind(wildcard, FindingKind::NetworkWait);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->details["peer_pids"], nlohmann::json::array({300}));
  // Another port: nobody.
  b.s.sockets[1].local = "0.0.0.0:9998";
  Diagnosis other_port = diagnose(b.s);
  f = find_kind(other_port, FindingKind::NetworkWait);
  ASSERT_NE(f, nullptr);
  EXPECT_TRUE(f->details["peer_pids"].empty());
  EXPECT_NE(f->summary.find("no process on this host holds the other end"), std::string::npos) << f->summary;
}

}  // namespace
}  // namespace hangtrace
