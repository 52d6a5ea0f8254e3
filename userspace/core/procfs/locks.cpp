// /proc/locks and the "lock:" lines of /proc/PID/fdinfo/FD: who holds a file
// lock (flock, POSIX fcntl/lockf, OFD) and who queues behind it.
//
//   1: FLOCK  ADVISORY  WRITE 18748 fe:00:10953002 0 EOF
//   1: -> FLOCK  ADVISORY  WRITE 18792 fe:00:10953002 0 EOF
//   2: OFDLCK ADVISORY  READ  -1 08:01:131073 100 199
#include <fmt/format.h>

#include "fields.h"
#include "hangtrace/procfs.h"

namespace hangtrace::procfs {

using namespace fields;

Result<FileLock> parse_lock_line(std::string_view line) {
  auto f = split_whitespace(line);
  FileLock l;
  size_t i = 0;
  auto bad = [&](std::string_view why) {
    return parse_error("lock line", fmt::format("{} in '{}'", why, excerpt(line)));
  };
  if (f.size() < 8 || !ends_with(f[0], ":")) return bad("too few fields");
  auto id = parse_int<int64_t>(f[0].substr(0, f[0].size() - 1));
  if (!id) return bad("bad id");
  l.id = *id;
  ++i;
  if (f[i] == "->") {
    l.waiting = true;
    ++i;
  }
  // TYPE, then ADVISORY/MANDATORY (or a lease's state), then the mode.
  if (f.size() < i + 7) return bad("too few fields");
  l.type = std::string(f[i]);
  l.mode = std::string(f[i + 2]);
  auto pid = parse_int<int>(f[i + 3]);
  if (!pid) return bad("bad pid");
  l.pid = *pid;
  // MAJ:MIN:INODE, the device numbers in hex.
  std::string_view dev = f[i + 4];
  size_t c1 = dev.find(':'), c2 = dev.rfind(':');
  if (c1 == std::string_view::npos || c1 == c2) return bad("bad device:inode");
  auto major = parse_int<uint32_t>(dev.substr(0, c1), 16);
  auto minor = parse_int<uint32_t>(dev.substr(c1 + 1, c2 - c1 - 1), 16);
  auto inode = parse_u64(dev.substr(c2 + 1));
  if (!major || !minor || !inode) return bad("bad device:inode");
  l.dev_major = *major;
  l.dev_minor = *minor;
  l.inode = *inode;
  auto start = parse_u64(f[i + 5]);
  if (!start) return bad("bad start");
  l.start = *start;
  if (f[i + 6] != "EOF") {
    auto end = parse_u64(f[i + 6]);
    if (!end) return bad("bad end");
    l.end = *end;
  }
  return l;
}

Result<std::vector<FileLock>> parse_locks(std::string_view text) {
  std::vector<FileLock> out;
  for (auto line : split_lines(text)) {
    if (trim(line).empty()) continue;
    if (out.size() >= kMaxFileLocks) break;
    auto l = parse_lock_line(line);
    if (!l) return make_error(l.error());
    out.push_back(std::move(*l));
  }
  return out;
}

bool locks_conflict(const FileLock& held, const FileLock& wanted) {
  if (held.dev_major != wanted.dev_major || held.dev_minor != wanted.dev_minor || held.inode != wanted.inode)
    return false;
  if (held.mode == "READ" && wanted.mode == "READ") return false;
  // flock locks and byte-range locks live apart (flock(2): they do not see each other).
  const bool held_flock = held.type == "FLOCK", wanted_flock = wanted.type == "FLOCK";
  if (held_flock != wanted_flock) return false;
  if (held_flock) return true;
  const uint64_t held_end = held.end.value_or(UINT64_MAX), wanted_end = wanted.end.value_or(UINT64_MAX);
  return held.start <= wanted_end && wanted.start <= held_end;
}

}  // namespace hangtrace::procfs
