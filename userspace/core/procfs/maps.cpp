// The parser of /proc/PID/maps.
#include <fmt/format.h>

#include "fields.h"
#include "hangtrace/procfs.h"

namespace hangtrace::procfs {

using namespace fields;

// ---- maps -----------------------------------------------------------------------

Result<Mapping> parse_maps_line(std::string_view line) {
  // "start-end perms offset major:minor inode    path": the path starts after
  // the whitespace that follows the inode and runs to the end of the line
  // (spaces and " (deleted)" included).
  Mapping m;
  std::string_view rest = line;
  std::string_view range = next_field(rest), perms = next_field(rest), offset = next_field(rest),
                   dev = next_field(rest), inode = next_field(rest);
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
  m.path = rest_of_line(rest);
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
}  // namespace hangtrace::procfs
