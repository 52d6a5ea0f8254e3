// Socket facts /proc/net does not show: the peer of a unix socket
// (NETLINK_SOCK_DIAG), and the addresses of a network namespace. Both answer
// for the namespace of the calling thread, so for a target in another netns
// they run in a short-lived thread that setns()es into it: only that thread
// switches, the rest of hangtrace stays where it is.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hangtrace/result.h"

namespace hangtrace {

struct UnixDiagEntry {
  uint64_t inode = 0;
  uint64_t peer_inode = 0;  // 0: no peer (listening, unconnected, peer gone)
  uint32_t type = 0;        // SOCK_STREAM, ...
  uint32_t state = 0;       // TCP_ESTABLISHED=1, TCP_LISTEN=10, TCP_CLOSE=7 as unix uses them
  std::string name;         // "" unnamed, "@abstract", or a path
  bool has_queues = false;
  uint32_t rx_queue = 0;  // bytes queued to read (listening: pending connections)
  uint32_t tx_queue = 0;
  // Listening: the client sockets of the connections in its accept queue
  // (UNIX_DIAG_ICONS), at most kMaxPendingConnections.
  std::vector<uint64_t> pending_clients;
};

inline constexpr size_t kMaxPendingConnections = 4096;

// Dumps every unix socket of the calling thread's network namespace.
Result<std::vector<UnixDiagEntry>> unix_diag_dump();

// IPv4/IPv6 addresses of the calling thread's network namespace
// ("10.0.0.5", "::1"; no brackets, no scope).
Result<std::vector<std::string>> interface_addresses();

struct NetnsFacts {
  Result<std::vector<UnixDiagEntry>> unix_sockets = make_error("not queried");
  Result<std::vector<std::string>> addresses = make_error("not queried");
};

// Both queries for the network namespace at `netns_path` (a
// /proc/PID/ns/net link), or for hangtrace's own namespace when it is empty.
NetnsFacts query_network_namespace(const std::string& netns_path);

}  // namespace hangtrace
