// Parsers of what /proc says about a process's fds: the link text of
// /proc/PID/fd/N and /proc/PID/fdinfo/N (epoll watch lists included).
#include <fmt/format.h>

#include "fields.h"
#include "hangtrace/procfs.h"

namespace hangtrace::procfs {

using namespace fields;

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
      if (info.epoll.size() >= kMaxEpollWatches) {
        ++info.epoll_watches_left_out;
        continue;
      }
      auto watch = parse_epoll_tfd_line(trimmed);
      if (!watch) return make_error(watch.error());
      info.epoll.push_back(*watch);
      continue;
    }
    std::string_view key, value;
    if (!split_key_value(trimmed, key, value)) continue;
    if (key == "lock") {
      // A lock line another process's use of the file controls: one that
      // does not parse is left out, not an error for the whole fd.
      if (info.locks.size() < kMaxFdLocks)
        if (auto l = parse_lock_line(value)) info.locks.push_back(std::move(*l));
      continue;
    }
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
    } else if (key == "Pid") {
      if (auto v = parse_int<int>(value)) info.pidfd_pid = *v;
    } else if (key == "sigmask") {
      if (auto v = parse_u64(value, 16)) info.signalfd_mask = *v;
    }
  }
  if (!have_pos || !have_flags) return parse_error("fdinfo", "missing pos or flags");
  return info;
}

}  // namespace hangtrace::procfs
