// The socket table parsers (/proc/net/tcp, tcp6, udp, udp6, unix), fed with
// tables copied from a real machine (fixtures/procfs/net_*).
#include "hangtrace/procfs.h"

#include <gtest/gtest.h>

#include <string>

#include "fixture_file.h"

using namespace hangtrace;
using namespace hangtrace::procfs;
using hangtrace::testing::for_each_truncation;
using hangtrace::testing::procfs_fixture;

// ---- net tables ------------------------------------------------------------------

TEST(ProcfsNet, Tcp) {
  auto socks = parse_inet_sockets(procfs_fixture("net_tcp"), "tcp");
  ASSERT_TRUE(socks.ok()) << socks.error();
  ASSERT_EQ(socks->size(), 4u);
  const auto& listen = (*socks)[1];
  EXPECT_EQ(listen.info.local, "127.0.0.1:5000");
  EXPECT_EQ(listen.info.remote, "0.0.0.0:0");
  EXPECT_EQ(listen.info.state, "LISTEN");
  EXPECT_EQ(listen.info.inode, 8715u);
  EXPECT_EQ(listen.info.family, "tcp");
  const auto& server_side = (*socks)[2];
  EXPECT_EQ(server_side.info.state, "ESTABLISHED");
  EXPECT_EQ(server_side.local_ip, "127.0.0.1");
  EXPECT_EQ(server_side.local_port, 5000);
  EXPECT_EQ(server_side.info.remote, "127.0.0.1:60196");
  EXPECT_EQ(server_side.info.rx_queue, 7u);  // "abcdefg" not yet read
  EXPECT_EQ(server_side.info.tx_queue, 0u);
  EXPECT_EQ((*socks)[0].info.local, "0.0.0.0:2024");
  EXPECT_EQ((*socks)[3].info.local, "127.0.0.1:60196");
}

TEST(ProcfsNet, Tcp6) {
  auto socks = parse_inet_sockets(procfs_fixture("net_tcp6"), "tcp6");
  ASSERT_TRUE(socks.ok()) << socks.error();
  ASSERT_EQ(socks->size(), 3u);
  EXPECT_EQ((*socks)[0].info.local, "[::1]:5001");
  EXPECT_EQ((*socks)[0].info.remote, "[::]:0");
  EXPECT_EQ((*socks)[0].info.state, "LISTEN");
  EXPECT_EQ((*socks)[1].info.remote, "[::1]:49126");
  EXPECT_EQ((*socks)[1].remote_ip, "::1");
  EXPECT_EQ((*socks)[1].info.inode, 8720u);
}

TEST(ProcfsNet, Udp) {
  auto v4 = parse_inet_sockets(procfs_fixture("net_udp"), "udp");
  ASSERT_TRUE(v4.ok()) << v4.error();
  ASSERT_EQ(v4->size(), 1u);
  EXPECT_EQ((*v4)[0].info.local, "127.0.0.1:5353");
  EXPECT_EQ((*v4)[0].info.state, "CLOSE");
  EXPECT_EQ((*v4)[0].info.inode, 8721u);
  auto v6 = parse_inet_sockets(procfs_fixture("net_udp6"), "udp6");
  ASSERT_TRUE(v6.ok()) << v6.error();
  ASSERT_EQ(v6->size(), 1u);
  EXPECT_EQ((*v6)[0].info.local, "[::1]:5354");
}

TEST(ProcfsNet, IPv4MappedAndLoopback) {
  std::string text =
      "  sl  local_address                         remote_address                        st tx_queue "
      "rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
      "   0: 0000000000000000FFFF00000100007F:1389 0000000000000000FFFF00000200000A:BFE6 01 "
      "00000010:00000000 00:00000000 00000000     0        0 9001 1 0000000000000000 20 0 0 10 -1\n";
  auto socks = parse_inet_sockets(text, "tcp6");
  ASSERT_TRUE(socks.ok()) << socks.error();
  ASSERT_EQ(socks->size(), 1u);
  EXPECT_EQ((*socks)[0].local_ip, "::ffff:127.0.0.1");
  EXPECT_EQ((*socks)[0].remote_ip, "::ffff:10.0.0.2");
  EXPECT_EQ((*socks)[0].info.tx_queue, 16u);
  EXPECT_EQ(unmap_ipv4("::ffff:10.0.0.2"), "10.0.0.2");
  EXPECT_EQ(unmap_ipv4("::1"), "::1");
  EXPECT_TRUE(is_loopback_address("127.0.0.1"));
  EXPECT_TRUE(is_loopback_address("127.3.2.1"));
  EXPECT_TRUE(is_loopback_address("::1"));
  EXPECT_TRUE(is_loopback_address("::ffff:127.0.0.1"));
  EXPECT_FALSE(is_loopback_address("10.0.0.2"));
  EXPECT_FALSE(is_loopback_address("::"));
  EXPECT_FALSE(is_loopback_address("garbage"));
}

TEST(ProcfsNet, StateNames) {
  EXPECT_EQ(tcp_state_name(1), "ESTABLISHED");
  EXPECT_EQ(tcp_state_name(8), "CLOSE_WAIT");
  EXPECT_EQ(tcp_state_name(10), "LISTEN");
  EXPECT_EQ(tcp_state_name(99), "STATE_99");
}

TEST(ProcfsNet, MalformedInputFails) {
  std::string header =
      "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n";
  EXPECT_TRUE(parse_inet_sockets(header, "tcp").ok());  // just the header: no sockets
  EXPECT_FALSE(parse_inet_sockets(header + "   0: 0100007F:1388 00000000:0000 0A\n", "tcp").ok());
  EXPECT_FALSE(
      parse_inet_sockets(
          header + "   0: 0100007:1388 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 8715\n",
          "tcp")
          .ok());
  EXPECT_FALSE(
      parse_inet_sockets(
          header + "   0: 0100007F:1388 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 8715\n",
          "tcp6")
          .ok());
  EXPECT_FALSE(
      parse_inet_sockets(
          header + "   0: 0100007F:1388 00000000:0000 0A 0000000000000000 00:00000000 00000000 0 0 8715\n",
          "tcp")
          .ok());
  EXPECT_FALSE(
      parse_inet_sockets(
          header + "   0: 0100007F:1388 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 87x5\n",
          "tcp")
          .ok());
  std::string text = procfs_fixture("net_tcp");
  for_each_truncation(text, [](std::string_view t) { (void)parse_inet_sockets(t, "tcp"); });
  std::string text6 = procfs_fixture("net_tcp6");
  for_each_truncation(text6, [](std::string_view t) { (void)parse_inet_sockets(t, "tcp6"); });
}

TEST(ProcfsNet, Unix) {
  auto socks = parse_unix_sockets(procfs_fixture("net_unix"));
  ASSERT_TRUE(socks.ok()) << socks.error();
  ASSERT_EQ(socks->size(), 6u);
  EXPECT_EQ((*socks)[0].inode, 1147u);
  EXPECT_EQ((*socks)[0].state, "CONNECTED");
  EXPECT_EQ((*socks)[0].path, "");
  EXPECT_EQ((*socks)[0].type, 1u);
  EXPECT_EQ((*socks)[2].inode, 8723u);
  EXPECT_TRUE((*socks)[2].listening);
  EXPECT_EQ((*socks)[2].state, "LISTEN");
  EXPECT_EQ((*socks)[2].path, "/tmp/fx/my sock");
  EXPECT_EQ((*socks)[5].path, "@abstract-name");
}

TEST(ProcfsNet, UnixMalformedInputFails) {
  std::string header = "Num       RefCount Protocol Flags    Type St Inode Path\n";
  EXPECT_TRUE(parse_unix_sockets(header).ok());
  EXPECT_FALSE(parse_unix_sockets(header + "00000000155fc6c0: 00000003 00000000 00000000 0001 03\n").ok());
  EXPECT_FALSE(
      parse_unix_sockets(header + "00000000155fc6c0: 00000003 00000000 0000000g 0001 03  1147\n").ok());
  EXPECT_FALSE(
      parse_unix_sockets(header + "00000000155fc6c0 00000003 00000000 00000000 0001 03  1147\n").ok());
  std::string text = procfs_fixture("net_unix");
  for_each_truncation(text, [](std::string_view t) { (void)parse_unix_sockets(t); });
}
