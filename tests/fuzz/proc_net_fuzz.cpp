// The network tables of /proc/PID/net (userspace/core/procfs/socket_tables.cpp,
// host_addresses.cpp) and /etc/resolv.conf (resolv_conf.cpp). The first byte
// picks the file: 0 tcp, 1 tcp6, 2 udp, 3 udp6, 4 unix, 5 if_inet6,
// 6 fib_trie, 7 resolv.conf, 8 one endpoint / address text; the rest is its
// text. Seeds: this machine's /proc/net files and resolv.conf.
#include "fuzz_support.h"
#include "hangtrace/procfs.h"

using namespace hangtrace;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  std::string_view text = fuzz::as_text(data + 1, size - 1);
  static const char* const kInet[] = {"tcp", "tcp6", "udp", "udp6"};
  switch (data[0] % 9) {
    case 0:
    case 1:
    case 2:
    case 3: {
      auto sockets = procfs::parse_inet_sockets(text, kInet[data[0] % 9]);
      if (!sockets) break;
      fuzz::check(sockets->size() <= text.size() / 8 + 1);
      std::vector<std::string> local = {"10.0.0.1", "::1"};
      for (const auto& s : *sockets) {
        (void)procfs::is_loopback_address(s.local_ip);
        (void)procfs::unmap_ipv4(s.remote_ip);
        (void)procfs::canonical_address(s.remote_ip);
        (void)procfs::is_this_host_address(s.remote_ip, local);
        (void)tcp_state_name(s.state_code);
      }
      break;
    }
    case 4:
      if (auto sockets = procfs::parse_unix_sockets(text)) {
        fuzz::check(sockets->size() <= text.size() / 8 + 1);
        for (const auto& s : *sockets) fuzz::check(s.path.size() <= text.size());
      }
      break;
    case 5:
      if (auto addrs = procfs::parse_if_inet6(text)) fuzz::check(addrs->size() <= procfs::kMaxHostAddresses);
      break;
    case 6:
      fuzz::check(procfs::parse_fib_trie_local(text).size() <= procfs::kMaxHostAddresses);
      break;
    case 7: {
      ResolverConfig c = procfs::parse_resolv_conf(text);
      fuzz::check(c.nameservers.size() <= procfs::kMaxNameservers);
      break;
    }
    default:
      (void)procfs::parse_endpoint(text);
      (void)procfs::canonical_address(text);
      (void)procfs::is_unspecified_address(text);
      (void)procfs::is_loopback_address(std::string(text));
      break;
  }
  return 0;
}
