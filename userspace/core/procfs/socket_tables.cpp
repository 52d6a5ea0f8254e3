// Parsers of the socket tables: /proc/net/{tcp,tcp6,udp,udp6} and
// /proc/net/unix (as a process's namespace shows them, ROOT/PID/net/...).
#include <arpa/inet.h>

#include <cstring>
#include <fmt/format.h>

#include "fields.h"
#include "hangtrace/procfs.h"

namespace hangtrace::procfs {

using namespace fields;

// ---- net/tcp, udp ----------------------------------------------------------------

namespace {

// The kernel prints each 32-bit word of the (network order) address as a
// native u32 with %08X, so writing the parsed words back in native order
// restores the network-order bytes.
std::optional<std::pair<std::string, uint16_t>> parse_hex_address(std::string_view text, bool v6) {
  size_t colon = text.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  std::string_view hex = text.substr(0, colon);
  auto port = parse_int<uint16_t>(text.substr(colon + 1), 16);
  size_t words = v6 ? 4 : 1;
  if (!port || hex.size() != words * 8) return std::nullopt;
  unsigned char bytes[16];
  for (size_t w = 0; w < words; ++w) {
    auto word = parse_int<uint32_t>(hex.substr(w * 8, 8), 16);
    if (!word) return std::nullopt;
    std::memcpy(bytes + w * 4, &*word, 4);
  }
  char buf[INET6_ADDRSTRLEN];
  if (!inet_ntop(v6 ? AF_INET6 : AF_INET, bytes, buf, sizeof buf)) return std::nullopt;
  return std::make_pair(std::string(buf), *port);
}

std::string join_address(const std::string& ip, uint16_t port, bool v6) {
  return v6 ? fmt::format("[{}]:{}", ip, port) : fmt::format("{}:{}", ip, port);
}

}  // namespace

Result<std::vector<InetSocketEntry>> parse_inet_sockets(std::string_view text, const std::string& family) {
  bool v6 = ends_with(family, "6");
  std::vector<InetSocketEntry> out;
  std::string what = fmt::format("/proc/net/{}", family);
  bool first = true;
  for (auto line : split_lines(text)) {
    auto tokens = split_whitespace(line);
    if (tokens.empty()) continue;
    if (first) {
      first = false;
      if (tokens[0] == "sl") continue;  // the header
    }
    // sl local remote st tx:rx tr:when retrnsmt uid timeout inode ...
    if (tokens.size() < 10 || !ends_with(tokens[0], ":"))
      return parse_error(what, fmt::format("short line '{}'", excerpt(line)));
    auto local = parse_hex_address(tokens[1], v6), remote = parse_hex_address(tokens[2], v6);
    auto state = parse_int<int>(tokens[3], 16);
    size_t q = tokens[4].find(':');
    auto tx = q == std::string_view::npos ? std::nullopt : parse_u64(tokens[4].substr(0, q), 16);
    auto rx = q == std::string_view::npos ? std::nullopt : parse_u64(tokens[4].substr(q + 1), 16);
    auto inode = parse_u64(tokens[9]);
    if (!local || !remote || !state || !tx || !rx || !inode)
      return parse_error(what, fmt::format("bad line '{}'", excerpt(line)));
    InetSocketEntry e;
    e.local_ip = local->first;
    e.local_port = local->second;
    e.remote_ip = remote->first;
    e.remote_port = remote->second;
    e.state_code = *state;
    e.info.inode = *inode;
    e.info.family = family;
    e.info.state = tcp_state_name(*state);
    e.info.local = join_address(e.local_ip, e.local_port, v6);
    e.info.remote = join_address(e.remote_ip, e.remote_port, v6);
    e.info.tx_queue = *tx;
    e.info.rx_queue = *rx;
    out.push_back(std::move(e));
  }
  return out;
}

std::string unmap_ipv4(const std::string& ip) {
  constexpr std::string_view kMapped = "::ffff:";
  if (starts_with(ip, kMapped) && ip.find('.') != std::string::npos) return ip.substr(kMapped.size());
  return ip;
}

// ---- net/unix --------------------------------------------------------------------

Result<std::vector<UnixSocketEntry>> parse_unix_sockets(std::string_view text) {
  std::vector<UnixSocketEntry> out;
  constexpr uint32_t kAcceptCon = 0x10000;  // __SO_ACCEPTCON: a listening socket
  bool first = true;
  for (auto line : split_lines(text)) {
    if (trim(line).empty()) continue;
    if (first) {
      first = false;
      if (starts_with(trim(line), "Num")) continue;
    }
    // "Num: RefCount Protocol Flags Type St Inode [Path]"; the path may hold
    // spaces, so it is whatever follows the inode.
    std::string_view rest = line;
    std::string_view num = next_field(rest);
    next_field(rest);  // RefCount
    next_field(rest);  // Protocol
    std::string_view flags = next_field(rest), type = next_field(rest), st = next_field(rest),
                     inode = next_field(rest);
    if (inode.empty() || !ends_with(num, ":"))
      return parse_error("/proc/net/unix", fmt::format("short line '{}'", excerpt(line)));
    auto flags_v = parse_int<uint32_t>(flags, 16);
    auto type_v = parse_int<uint32_t>(type, 16);
    auto st_v = parse_int<int>(st, 16);
    auto inode_v = parse_u64(inode);
    if (!flags_v || !type_v || !st_v || !inode_v)
      return parse_error("/proc/net/unix", fmt::format("bad line '{}'", excerpt(line)));
    UnixSocketEntry e;
    e.inode = *inode_v;
    e.type = *type_v;
    e.socket_state = *st_v;
    e.listening = (*flags_v & kAcceptCon) != 0;
    if (e.listening)
      e.state = "LISTEN";
    else if (*st_v == 1)
      e.state = "UNCONNECTED";
    else if (*st_v == 2)
      e.state = "CONNECTING";
    else if (*st_v == 3)
      e.state = "CONNECTED";
    else if (*st_v == 4)
      e.state = "DISCONNECTING";
    else
      e.state = fmt::format("STATE_{}", *st_v);
    e.path = rest_of_line(rest);
    out.push_back(std::move(e));
  }
  return out;
}
}  // namespace hangtrace::procfs
