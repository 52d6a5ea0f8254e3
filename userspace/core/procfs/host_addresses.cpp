// Which addresses are this host: address text in canonical form, endpoints
// as SocketInfo writes them, and the interface addresses of a network
// namespace from /proc/net/if_inet6 (IPv6) and /proc/net/fib_trie (IPv4).
#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <fmt/format.h>

#include "fields.h"
#include "hangtrace/procfs.h"

namespace hangtrace::procfs {

using namespace fields;

std::optional<std::string> canonical_address(std::string_view ip) {
  if (ip.empty() || ip.size() >= INET6_ADDRSTRLEN) return std::nullopt;
  std::string text(ip);  // NUL-terminated for inet_pton; no NUL inside
  if (text.find('\0') != std::string::npos) return std::nullopt;
  char buf[INET6_ADDRSTRLEN];
  in_addr v4{};
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) {
    if (!inet_ntop(AF_INET, &v4, buf, sizeof buf)) return std::nullopt;
    return std::string(buf);
  }
  in6_addr v6{};
  if (inet_pton(AF_INET6, text.c_str(), &v6) != 1) return std::nullopt;
  if (IN6_IS_ADDR_V4MAPPED(&v6)) {
    std::memcpy(&v4, v6.s6_addr + 12, 4);
    if (!inet_ntop(AF_INET, &v4, buf, sizeof buf)) return std::nullopt;
    return std::string(buf);
  }
  if (!inet_ntop(AF_INET6, &v6, buf, sizeof buf)) return std::nullopt;
  return std::string(buf);
}

bool is_loopback_address(const std::string& ip_in) {
  auto ip = canonical_address(ip_in);
  if (!ip) return false;
  if (*ip == "::1") return true;
  in_addr v4{};
  return inet_pton(AF_INET, ip->c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127;
}

bool is_unspecified_address(std::string_view ip) {
  auto c = canonical_address(ip);
  return c && (*c == "0.0.0.0" || *c == "::");
}

std::optional<Endpoint> parse_endpoint(std::string_view text) {
  size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  std::string_view host = text.substr(0, colon);
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return std::nullopt;
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string_view::npos) {
    return std::nullopt;  // an IPv6 address needs its brackets
  }
  auto port = parse_int<uint16_t>(text.substr(colon + 1));
  auto ip = canonical_address(host);
  if (!port || !ip) return std::nullopt;
  return Endpoint{*ip, *port};
}

bool is_this_host_address(std::string_view ip_in, const std::vector<std::string>& local_addresses) {
  auto ip = canonical_address(ip_in);
  if (!ip || is_unspecified_address(*ip)) return false;
  if (is_loopback_address(*ip)) return true;
  return std::any_of(local_addresses.begin(), local_addresses.end(), [&](const std::string& a) {
    auto c = canonical_address(a);
    return c && *c == *ip;
  });
}

// ---- net/if_inet6 ----------------------------------------------------------------

Result<std::vector<std::string>> parse_if_inet6(std::string_view text) {
  std::vector<std::string> out;
  for (auto line : split_lines(text)) {
    auto tokens = split_whitespace(line);
    if (tokens.empty()) continue;
    if (tokens.size() < 6 || tokens[0].size() != 32)
      return parse_error("/proc/net/if_inet6", fmt::format("bad line '{}'", excerpt(line)));
    in6_addr a{};
    for (size_t i = 0; i < 16; ++i) {
      auto byte = parse_int<uint8_t>(tokens[0].substr(i * 2, 2), 16);
      if (!byte) return parse_error("/proc/net/if_inet6", fmt::format("bad address '{}'", excerpt(line)));
      a.s6_addr[i] = *byte;
    }
    char buf[INET6_ADDRSTRLEN];
    if (!inet_ntop(AF_INET6, &a, buf, sizeof buf)) continue;
    if (std::find(out.begin(), out.end(), buf) == out.end()) out.emplace_back(buf);
    if (out.size() >= kMaxHostAddresses) break;
  }
  return out;
}

// ---- net/fib_trie ----------------------------------------------------------------

std::vector<std::string> parse_fib_trie_local(std::string_view text) {
  std::vector<std::string> out;
  std::string leaf;  // the last "|-- ADDR" seen: the routes under it are its
  for (auto line : split_lines(text)) {
    std::string_view t = trim(line);
    if (starts_with(t, "|-- ")) {
      auto c = canonical_address(trim(t.substr(4)));
      leaf = c && c->find(':') == std::string::npos ? *c : "";
      continue;
    }
    if (starts_with(t, "+--") || ends_with(t, ":")) {  // a branch, or the "Main:"/"Local:" table
      leaf.clear();
      continue;
    }
    auto tokens = split_whitespace(t);
    if (leaf.empty() || tokens.size() < 3 || tokens[0] != "/32" || tokens[1] != "host" ||
        tokens[2] != "LOCAL")
      continue;
    if (std::find(out.begin(), out.end(), leaf) == out.end()) out.push_back(leaf);
    if (out.size() >= kMaxHostAddresses) break;
  }
  return out;
}

Result<std::vector<std::string>> ProcFs::host_addresses(int pid, int* err) const {
  std::vector<std::string> out;
  int v6_err = 0, v4_err = 0;
  auto v6_text = read_text_file(pid_path(pid) + "/net/if_inet6", &v6_err, size_t{4} << 20);
  auto v4_text = read_text_file(pid_path(pid) + "/net/fib_trie", &v4_err, size_t{16} << 20);
  if (!v6_text && !v4_text) {
    if (err) *err = v4_err;
    return make_error(v4_text.error());
  }
  if (err) *err = 0;
  if (v4_text) out = parse_fib_trie_local(*v4_text);
  if (v6_text) {
    auto v6 = parse_if_inet6(*v6_text);
    if (v6) {
      for (auto& a : *v6)
        if (std::find(out.begin(), out.end(), a) == out.end() && out.size() < 2 * kMaxHostAddresses)
          out.push_back(std::move(a));
    }
  }
  return out;
}

}  // namespace hangtrace::procfs
