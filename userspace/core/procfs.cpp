#include "hangtrace/procfs.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fmt/format.h>

namespace hangtrace::procfs {

namespace {

// ---- small text helpers ------------------------------------------------------

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split_whitespace(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && is_space(s[i])) ++i;
    size_t start = i;
    while (i < s.size() && !is_space(s[i])) ++i;
    if (i > start) out.push_back(s.substr(start, i - start));
  }
  return out;
}

std::vector<std::string_view> split_lines(std::string_view s) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (start < s.size()) {
    size_t nl = s.find('\n', start);
    if (nl == std::string_view::npos) nl = s.size();
    out.push_back(s.substr(start, nl - start));
    start = nl + 1;
  }
  return out;
}

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }
bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Whole-token integer parsing: trailing garbage makes it fail, so a truncated
// field is caught instead of read as a smaller number.
template <class T>
std::optional<T> parse_int(std::string_view s, int base = 10) {
  if (s.empty()) return std::nullopt;
  if (base == 16 && (starts_with(s, "0x") || starts_with(s, "0X"))) s.remove_prefix(2);
  if (s.empty()) return std::nullopt;
  T value{};
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value, base);
  if (ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return value;
}

std::optional<uint64_t> parse_u64(std::string_view s, int base = 10) { return parse_int<uint64_t>(s, base); }

// "key:\tvalue" -> {key, value}; false when there is no colon.
bool split_key_value(std::string_view line, std::string_view& key, std::string_view& value) {
  size_t colon = line.find(':');
  if (colon == std::string_view::npos) return false;
  key = trim(line.substr(0, colon));
  value = trim(line.substr(colon + 1));
  return true;
}

Error parse_error(std::string_view what, std::string_view detail) {
  return make_error(fmt::format("failed to parse {}: {}", what, detail));
}

std::string excerpt(std::string_view s) {
  constexpr size_t kMax = 80;
  std::string out(s.substr(0, kMax));
  if (s.size() > kMax) out += "...";
  return out;
}

}  // namespace

// ---- stat -------------------------------------------------------------------

Result<ProcStat> parse_stat(std::string_view text) {
  // The comm may hold spaces, parentheses and even newlines, so it is cut
  // between the first '(' and the LAST ')'; everything after is fields.
  size_t open = text.find('(');
  size_t close = text.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open)
    return parse_error("stat", fmt::format("no (comm) in '{}'", excerpt(text)));
  ProcStat st;
  auto pid = parse_int<int>(trim(text.substr(0, open)));
  if (!pid) return parse_error("stat", fmt::format("bad pid in '{}'", excerpt(text)));
  st.pid = *pid;
  st.comm = std::string(text.substr(open + 1, close - open - 1));
  auto fields = split_whitespace(text.substr(close + 1));
  // fields[i] is stat field i+3 (1-based, as proc(5) numbers them).
  auto field = [&](int number) -> std::string_view {
    size_t index = static_cast<size_t>(number - 3);
    return index < fields.size() ? fields[index] : std::string_view{};
  };
  constexpr int kStartTimeField = 22;
  if (fields.size() < static_cast<size_t>(kStartTimeField - 2))
    return parse_error("stat", fmt::format("only {} fields after the comm", fields.size()));
  if (field(3).size() != 1) return parse_error("stat", fmt::format("bad state '{}'", field(3)));
  st.state = field(3)[0];
  auto ppid = parse_int<int>(field(4));
  auto pgrp = parse_int<int>(field(5));
  auto session = parse_int<int>(field(6));
  auto flags = parse_int<uint32_t>(field(9));
  auto utime = parse_u64(field(14));
  auto stime = parse_u64(field(15));
  auto threads = parse_int<int>(field(20));
  auto start = parse_u64(field(kStartTimeField));
  if (!ppid || !pgrp || !session || !flags || !utime || !stime || !threads || !start)
    return parse_error("stat", fmt::format("a numeric field does not parse in '{}'", excerpt(text)));
  st.ppid = *ppid;
  st.pgrp = *pgrp;
  st.session = *session;
  st.flags = *flags;
  st.utime_ticks = *utime;
  st.stime_ticks = *stime;
  st.num_threads = *threads;
  st.start_time_ticks = *start;
  if (auto sig = parse_int<int>(field(38))) st.exit_signal = *sig;
  if (auto code = parse_int<int>(field(52))) st.exit_code = *code;
  return st;
}

// ---- status -----------------------------------------------------------------

Result<ProcStatus> parse_status(std::string_view text) {
  ProcStatus st;
  bool have_name = false, have_tgid = false, have_ppid = false;
  for (auto line : split_lines(text)) {
    std::string_view key, value;
    // Name may contain ':' itself, so the key is cut at the FIRST colon.
    if (!split_key_value(line, key, value)) continue;
    if (key == "Name") {
      st.name = std::string(value);
      have_name = true;
    } else if (key == "State") {
      if (!value.empty()) st.state = value[0];
    } else if (key == "Tgid") {
      auto v = parse_int<int>(value);
      if (!v) return parse_error("status", fmt::format("bad Tgid '{}'", value));
      st.tgid = *v;
      have_tgid = true;
    } else if (key == "Pid") {
      if (auto v = parse_int<int>(value)) st.pid = *v;
    } else if (key == "PPid") {
      auto v = parse_int<int>(value);
      if (!v) return parse_error("status", fmt::format("bad PPid '{}'", value));
      st.ppid = *v;
      have_ppid = true;
    } else if (key == "Threads") {
      if (auto v = parse_int<int>(value)) st.threads = *v;
    } else if (key == "voluntary_ctxt_switches") {
      auto v = parse_u64(value);
      if (!v) return parse_error("status", fmt::format("bad voluntary_ctxt_switches '{}'", value));
      st.voluntary_ctxt_switches = *v;
    } else if (key == "nonvoluntary_ctxt_switches") {
      auto v = parse_u64(value);
      if (!v) return parse_error("status", fmt::format("bad nonvoluntary_ctxt_switches '{}'", value));
      st.nonvoluntary_ctxt_switches = *v;
    }
  }
  if (!have_name || !have_tgid || !have_ppid) return parse_error("status", "missing Name, Tgid or PPid");
  return st;
}

// ---- syscall ------------------------------------------------------------------

Result<SyscallState> parse_syscall(std::string_view text) {
  SyscallState sc;
  std::string_view t = trim(text);
  if (t == "running") {
    sc.mode = SyscallState::Mode::Running;
    return sc;
  }
  auto tokens = split_whitespace(t);
  if (tokens.empty()) return parse_error("syscall", "empty");
  auto nr = parse_int<int64_t>(tokens[0]);
  if (!nr) return parse_error("syscall", fmt::format("bad syscall number in '{}'", excerpt(t)));
  if (*nr < 0) {
    // Blocked (or stopped) in user mode: only the user stack and pc.
    if (tokens.size() != 3)
      return parse_error("syscall", fmt::format("expected '-1 SP PC', got '{}'", excerpt(t)));
    auto sp = parse_u64(tokens[1], 16), pc = parse_u64(tokens[2], 16);
    if (!sp || !pc) return parse_error("syscall", fmt::format("bad sp/pc in '{}'", excerpt(t)));
    sc.mode = SyscallState::Mode::User;
    sc.nr = -1;
    sc.sp = *sp;
    sc.pc = *pc;
    return sc;
  }
  if (tokens.size() != 9)
    return parse_error("syscall", fmt::format("expected 'NR A0..A5 SP PC', got '{}'", excerpt(t)));
  for (size_t i = 0; i < 8; ++i) {
    auto v = parse_u64(tokens[i + 1], 16);
    if (!v) return parse_error("syscall", fmt::format("bad hex '{}'", tokens[i + 1]));
    if (i < 6)
      sc.args[i] = *v;
    else if (i == 6)
      sc.sp = *v;
    else
      sc.pc = *v;
  }
  sc.mode = SyscallState::Mode::InSyscall;
  sc.nr = *nr;
  return sc;
}

// ---- fd links -----------------------------------------------------------------

FdLinkInfo classify_fd_link(std::string_view link) {
  FdLinkInfo info;
  auto bracketed_inode = [](std::string_view s, std::string_view prefix) -> std::optional<uint64_t> {
    if (!starts_with(s, prefix) || !ends_with(s, "]")) return std::nullopt;
    return parse_u64(s.substr(prefix.size(), s.size() - prefix.size() - 1));
  };
  if (auto ino = bracketed_inode(link, "pipe:[")) {
    info.kind = FdKind::Pipe;
    info.inode = *ino;
    return info;
  }
  if (auto ino = bracketed_inode(link, "socket:[")) {
    info.kind = FdKind::Socket;
    info.inode = *ino;
    return info;
  }
  if (starts_with(link, "anon_inode:")) {
    std::string_view type = link.substr(std::string_view("anon_inode:").size());
    if (starts_with(type, "[") && ends_with(type, "]")) type = type.substr(1, type.size() - 2);
    info.anon_type = std::string(type);
    if (type == "eventfd")
      info.kind = FdKind::EventFd;
    else if (type == "eventpoll")
      info.kind = FdKind::Epoll;
    else if (type == "timerfd")
      info.kind = FdKind::TimerFd;
    else if (type == "signalfd")
      info.kind = FdKind::SignalFd;
    else if (type == "pidfd")
      info.kind = FdKind::PidFd;
    else
      info.kind = FdKind::OtherAnon;
    return info;
  }
  // pidfs kernels may name pidfds "pidfd:[INODE]".
  if (auto ino = bracketed_inode(link, "pidfd:[")) {
    info.kind = FdKind::PidFd;
    info.anon_type = "pidfd";
    return info;
  }
  if (starts_with(link, "/")) {
    std::string_view path = link;
    constexpr std::string_view kDeleted = " (deleted)";
    if (ends_with(path, kDeleted)) {
      info.deleted = true;
      path.remove_suffix(kDeleted.size());
    }
    info.path = std::string(path);
    if (starts_with(path, "/dev/shm/"))
      info.kind = FdKind::ShmFile;
    else if (starts_with(path, "/dev/"))
      info.kind = FdKind::Device;
    else
      info.kind = FdKind::File;
    return info;
  }
  return info;  // "net:[...]", "mnt:[...]" and whatever comes next
}

// ---- fdinfo -------------------------------------------------------------------

namespace {

// "tfd:        3 events:       19 data:                3  pos:0 ino:2208 sdev:f"
Result<EpollWatch> parse_epoll_tfd_line(std::string_view line) {
  auto tokens = split_whitespace(line);
  EpollWatch watch;
  bool have_tfd = false, have_events = false;
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::string_view tok = tokens[i];
    size_t colon = tok.find(':');
    if (colon == std::string_view::npos) continue;
    std::string_view key = tok.substr(0, colon);
    std::string_view value = tok.substr(colon + 1);
    if (value.empty()) {  // "key:" then the value as the next token
      if (i + 1 >= tokens.size())
        return parse_error("epoll fdinfo", fmt::format("'{}' without a value", key));
      value = tokens[++i];
    }
    if (key == "tfd") {
      auto v = parse_int<int>(value);
      if (!v) return parse_error("epoll fdinfo", fmt::format("bad tfd '{}'", value));
      watch.target_fd = *v;
      have_tfd = true;
    } else if (key == "events") {
      auto v = parse_int<uint32_t>(value, 16);
      if (!v) return parse_error("epoll fdinfo", fmt::format("bad events '{}'", value));
      watch.events = *v;
      have_events = true;
    } else if (key == "ino") {
      auto v = parse_u64(value, 16);
      if (!v) return parse_error("epoll fdinfo", fmt::format("bad ino '{}'", value));
      watch.inode = *v;
    }
  }
  if (!have_tfd || !have_events)
    return parse_error("epoll fdinfo", fmt::format("incomplete line '{}'", excerpt(line)));
  return watch;
}

}  // namespace

Result<FdInfo> parse_fdinfo(std::string_view text) {
  FdInfo info;
  bool have_pos = false, have_flags = false;
  for (auto line : split_lines(text)) {
    std::string_view trimmed = trim(line);
    if (starts_with(trimmed, "tfd:")) {
      auto watch = parse_epoll_tfd_line(trimmed);
      if (!watch) return make_error(watch.error());
      info.epoll.push_back(*watch);
      continue;
    }
    std::string_view key, value;
    if (!split_key_value(trimmed, key, value)) continue;
    if (key == "pos") {
      auto v = parse_u64(value);
      if (!v) return parse_error("fdinfo", fmt::format("bad pos '{}'", value));
      info.pos = *v;
      have_pos = true;
    } else if (key == "flags") {
      auto v = parse_int<uint32_t>(value, 8);
      if (!v) return parse_error("fdinfo", fmt::format("bad flags '{}'", value));
      info.flags = *v;
      have_flags = true;
    } else if (key == "mnt_id") {
      if (auto v = parse_int<int>(value)) info.mnt_id = *v;
    } else if (key == "ino") {
      if (auto v = parse_u64(value)) info.inode = *v;
    } else if (key == "eventfd-id") {
      if (auto v = parse_u64(value)) info.eventfd_id = *v;
    } else if (key == "eventfd-count") {
      // printed with %16llx
      if (auto v = parse_u64(value, 16)) info.eventfd_count = *v;
    }
  }
  if (!have_pos || !have_flags) return parse_error("fdinfo", "missing pos or flags");
  return info;
}

// ---- maps -----------------------------------------------------------------------

Result<Mapping> parse_maps_line(std::string_view line) {
  // "start-end perms offset major:minor inode    path": the path starts after
  // the whitespace that follows the inode and runs to the end of the line
  // (spaces and " (deleted)" included).
  Mapping m;
  std::string_view rest = line;
  auto next_token = [&rest]() -> std::string_view {
    while (!rest.empty() && is_space(rest.front())) rest.remove_prefix(1);
    size_t end = 0;
    while (end < rest.size() && !is_space(rest[end])) ++end;
    std::string_view tok = rest.substr(0, end);
    rest.remove_prefix(end);
    return tok;
  };
  std::string_view range = next_token(), perms = next_token(), offset = next_token(), dev = next_token(),
                   inode = next_token();
  size_t dash = range.find('-');
  size_t colon = dev.find(':');
  if (inode.empty() || dash == std::string_view::npos || colon == std::string_view::npos || perms.size() != 4)
    return parse_error("maps line", fmt::format("'{}'", excerpt(line)));
  auto start = parse_u64(range.substr(0, dash), 16), end = parse_u64(range.substr(dash + 1), 16);
  auto off = parse_u64(offset, 16);
  auto major = parse_int<uint32_t>(dev.substr(0, colon), 16),
       minor = parse_int<uint32_t>(dev.substr(colon + 1), 16);
  auto ino = parse_u64(inode);
  if (!start || !end || !off || !major || !minor || !ino || *end < *start)
    return parse_error("maps line", fmt::format("'{}'", excerpt(line)));
  m.start = *start;
  m.end = *end;
  m.offset = *off;
  m.perms = std::string(perms);
  m.dev_major = *major;
  m.dev_minor = *minor;
  m.inode = *ino;
  while (!rest.empty() && is_space(rest.front())) rest.remove_prefix(1);
  while (!rest.empty() && (rest.back() == '\n' || rest.back() == '\r')) rest.remove_suffix(1);
  m.path = std::string(rest);
  return m;
}

Result<std::vector<Mapping>> parse_maps(std::string_view text) {
  std::vector<Mapping> out;
  for (auto line : split_lines(text)) {
    if (trim(line).empty()) continue;
    auto m = parse_maps_line(line);
    if (!m) return make_error(m.error());
    out.push_back(std::move(*m));
  }
  return out;
}

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

bool is_loopback_address(const std::string& ip_in) {
  std::string ip = unmap_ipv4(ip_in);
  if (ip == "::1") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, ip.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  return false;
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
    auto next_token = [&rest]() -> std::string_view {
      while (!rest.empty() && is_space(rest.front())) rest.remove_prefix(1);
      size_t end = 0;
      while (end < rest.size() && !is_space(rest[end])) ++end;
      std::string_view tok = rest.substr(0, end);
      rest.remove_prefix(end);
      return tok;
    };
    std::string_view num = next_token(), refcount = next_token(), protocol = next_token(),
                     flags = next_token(), type = next_token(), st = next_token(), inode = next_token();
    (void)refcount;
    (void)protocol;
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
    while (!rest.empty() && is_space(rest.front())) rest.remove_prefix(1);
    while (!rest.empty() && (rest.back() == '\n' || rest.back() == '\r')) rest.remove_suffix(1);
    e.path = std::string(rest);
    out.push_back(std::move(e));
  }
  return out;
}

// ---- io, schedstat, cmdline, namespaces ---------------------------------------

Result<ProcIo> parse_io(std::string_view text) {
  ProcIo io;
  bool have_rchar = false, have_wchar = false;
  for (auto line : split_lines(text)) {
    std::string_view key, value;
    if (!split_key_value(line, key, value)) continue;
    uint64_t* slot = nullptr;
    if (key == "rchar")
      slot = &io.rchar, have_rchar = true;
    else if (key == "wchar")
      slot = &io.wchar, have_wchar = true;
    else if (key == "syscr")
      slot = &io.syscr;
    else if (key == "syscw")
      slot = &io.syscw;
    else if (key == "read_bytes")
      slot = &io.read_bytes;
    else if (key == "write_bytes")
      slot = &io.write_bytes;
    if (!slot) continue;
    auto v = parse_u64(value);
    if (!v) return parse_error("io", fmt::format("bad {} '{}'", key, value));
    *slot = *v;
  }
  if (!have_rchar || !have_wchar) return parse_error("io", "missing rchar or wchar");
  return io;
}

Result<uint64_t> parse_schedstat(std::string_view text) {
  auto tokens = split_whitespace(text);
  // "run_ns wait_ns timeslices"; a line with fewer is truncated.
  if (tokens.size() < 3) return parse_error("schedstat", fmt::format("'{}'", excerpt(text)));
  auto v = parse_u64(tokens[0]);
  if (!v) return parse_error("schedstat", fmt::format("bad run time '{}'", tokens[0]));
  return *v;
}

std::string parse_cmdline(std::string_view text) {
  while (!text.empty() && text.back() == '\0') text.remove_suffix(1);
  std::string out(text);
  std::replace(out.begin(), out.end(), '\0', ' ');
  return out;
}

Result<uint64_t> parse_namespace_link(std::string_view link) {
  size_t open = link.find('['), close = link.rfind(']');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open)
    return parse_error("namespace link", fmt::format("'{}'", excerpt(link)));
  auto v = parse_u64(link.substr(open + 1, close - open - 1));
  if (!v) return parse_error("namespace link", fmt::format("'{}'", excerpt(link)));
  return *v;
}

// ---- readers -----------------------------------------------------------------------

Result<std::string> read_text_file(const std::string& path, int* errno_out, size_t max_bytes) {
  if (errno_out) *errno_out = 0;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    if (errno_out) *errno_out = e;
    return make_error(fmt::format("failed to read {}: {}", path, std::strerror(e)));
  }
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      if (errno_out) *errno_out = e;
      return make_error(fmt::format("failed to read {}: {}", path, std::strerror(e)));
    }
    if (n == 0) break;
    if (out.size() + static_cast<size_t>(n) > max_bytes) {
      ::close(fd);
      if (errno_out) *errno_out = EFBIG;
      return make_error(fmt::format("failed to read {}: larger than {} bytes", path, max_bytes));
    }
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

Result<std::string> read_link(const std::string& path, int* errno_out) {
  if (errno_out) *errno_out = 0;
  char buf[4096];
  ssize_t n = ::readlink(path.c_str(), buf, sizeof buf);
  if (n < 0) {
    int e = errno;
    if (errno_out) *errno_out = e;
    return make_error(fmt::format("failed to read link {}: {}", path, std::strerror(e)));
  }
  return std::string(buf, static_cast<size_t>(n));
}

Result<std::vector<int>> list_numeric_dir(const std::string& path, int* errno_out, size_t max_entries) {
  if (errno_out) *errno_out = 0;
  DIR* dir = ::opendir(path.c_str());
  if (!dir) {
    int e = errno;
    if (errno_out) *errno_out = e;
    return make_error(fmt::format("failed to list {}: {}", path, std::strerror(e)));
  }
  std::vector<int> out;
  errno = 0;
  while (dirent* entry = ::readdir(dir)) {
    if (auto n = parse_int<int>(entry->d_name)) {
      if (*n >= 0) out.push_back(*n);
    }
    if (out.size() >= max_entries) break;
    errno = 0;
  }
  int e = errno;
  ::closedir(dir);
  if (e != 0) {
    if (errno_out) *errno_out = e;
    return make_error(fmt::format("failed to list {}: {}", path, std::strerror(e)));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// ---- ProcFs ----------------------------------------------------------------------------

namespace {

template <class T, class Parse>
Result<T> read_and_parse(const std::string& path, int* err, Parse parse) {
  auto text = read_text_file(path, err);
  if (!text) return make_error(text.error());
  auto parsed = parse(*text);
  if (!parsed) return make_error(fmt::format("{} ({})", parsed.error(), path));
  return std::move(*parsed);
}

}  // namespace

std::string ProcFs::pid_path(int pid) const { return fmt::format("{}/{}", root_, pid); }
std::string ProcFs::task_path(int pid, int tid) const {
  return fmt::format("{}/{}/task/{}", root_, pid, tid);
}

Result<ProcStat> ProcFs::stat(int pid, int* err) const {
  return read_and_parse<ProcStat>(pid_path(pid) + "/stat", err, parse_stat);
}
Result<ProcStat> ProcFs::thread_stat(int pid, int tid, int* err) const {
  return read_and_parse<ProcStat>(task_path(pid, tid) + "/stat", err, parse_stat);
}
Result<ProcStatus> ProcFs::status(int pid, int* err) const {
  return read_and_parse<ProcStatus>(pid_path(pid) + "/status", err, parse_status);
}
Result<ProcStatus> ProcFs::thread_status(int pid, int tid, int* err) const {
  return read_and_parse<ProcStatus>(task_path(pid, tid) + "/status", err, parse_status);
}
Result<SyscallState> ProcFs::thread_syscall(int pid, int tid, int* err) const {
  return read_and_parse<SyscallState>(task_path(pid, tid) + "/syscall", err, parse_syscall);
}
Result<ProcIo> ProcFs::thread_io(int pid, int tid, int* err) const {
  return read_and_parse<ProcIo>(task_path(pid, tid) + "/io", err, parse_io);
}
Result<uint64_t> ProcFs::thread_schedstat(int pid, int tid, int* err) const {
  return read_and_parse<uint64_t>(task_path(pid, tid) + "/schedstat", err, parse_schedstat);
}
Result<std::string> ProcFs::cmdline(int pid, int* err) const {
  auto text = read_text_file(pid_path(pid) + "/cmdline", err, size_t{1} << 20);
  if (!text) return make_error(text.error());
  return parse_cmdline(*text);
}
Result<std::string> ProcFs::exe(int pid, int* err) const { return read_link(pid_path(pid) + "/exe", err); }
Result<uint64_t> ProcFs::namespace_inode(int pid, const std::string& ns, int* err) const {
  auto link = read_link(fmt::format("{}/ns/{}", pid_path(pid), ns), err);
  if (!link) return make_error(link.error());
  return parse_namespace_link(*link);
}
Result<std::vector<int>> ProcFs::pids(int* err) const { return list_numeric_dir(root_, err); }
Result<std::vector<int>> ProcFs::tids(int pid, int* err) const {
  return list_numeric_dir(pid_path(pid) + "/task", err);
}
Result<std::vector<int>> ProcFs::fds(int pid, int* err) const {
  return list_numeric_dir(pid_path(pid) + "/fd", err);
}
Result<std::string> ProcFs::fd_link(int pid, int fd, int* err) const {
  return read_link(fmt::format("{}/fd/{}", pid_path(pid), fd), err);
}
Result<FdInfo> ProcFs::fdinfo(int pid, int fd, int* err) const {
  return read_and_parse<FdInfo>(fmt::format("{}/fdinfo/{}", pid_path(pid), fd), err, parse_fdinfo);
}
Result<std::vector<Mapping>> ProcFs::maps(int pid, int* err) const {
  return read_and_parse<std::vector<Mapping>>(pid_path(pid) + "/maps", err, parse_maps);
}
Result<std::vector<InetSocketEntry>> ProcFs::inet_sockets(int pid, const std::string& table, int* err) const {
  return read_and_parse<std::vector<InetSocketEntry>>(
      fmt::format("{}/net/{}", pid_path(pid), table), err,
      [&table](std::string_view text) { return parse_inet_sockets(text, table); });
}
Result<std::vector<UnixSocketEntry>> ProcFs::unix_sockets(int pid, int* err) const {
  return read_and_parse<std::vector<UnixSocketEntry>>(pid_path(pid) + "/net/unix", err, parse_unix_sockets);
}

}  // namespace hangtrace::procfs
