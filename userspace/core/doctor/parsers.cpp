// The parsers doctor reads its figures with: /proc/PID/limits rows, environ
// values, the kernel release, torch's version.py, CapEff.
#include <charconv>

#include <fmt/format.h>

#include "internal.h"

namespace hangtrace::doctor {
namespace detail {

std::optional<uint64_t> parse_u64(std::string_view s) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

std::optional<uint64_t> cap_eff(std::string_view status) {
  auto pos = status.find("CapEff:");
  if (pos == std::string_view::npos) return std::nullopt;
  std::string_view rest = status.substr(pos + 7);
  auto end = rest.find('\n');
  std::string hex = trim_line(rest.substr(0, end));
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), v, 16);
  if (ec != std::errc() || p != hex.data() + hex.size()) return std::nullopt;
  return v;
}

}  // namespace detail

using detail::parse_u64;

Result<Limit> parse_limit(std::string_view text, std::string_view row) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    std::string_view line =
        text.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos);
    pos = end == std::string_view::npos ? text.size() : end + 1;
    if (!line.starts_with(row) || line.size() == row.size() || line[row.size()] != ' ') continue;
    std::string_view rest = line.substr(row.size());
    std::vector<std::string> words;
    size_t i = 0;
    while (i < rest.size()) {
      while (i < rest.size() && rest[i] == ' ') ++i;
      size_t j = i;
      while (j < rest.size() && rest[j] != ' ') ++j;
      if (j > i) words.emplace_back(rest.substr(i, j - i));
      i = j;
    }
    if (words.size() < 2) return make_error(fmt::format("malformed limits row: {}", line));
    auto value = [](const std::string& w) -> Result<std::optional<uint64_t>> {
      if (w == "unlimited") return std::optional<uint64_t>{};
      auto v = parse_u64(w);
      if (!v) return make_error("bad limit value " + w);
      return std::optional<uint64_t>{*v};
    };
    auto soft = value(words[0]), hard = value(words[1]);
    if (!soft) return make_error(soft.error());
    if (!hard) return make_error(hard.error());
    return Limit{*soft, *hard};
  }
  return make_error(fmt::format("no \"{}\" row in limits", row));
}

std::optional<std::string> environ_value(std::string_view env, std::string_view key) {
  while (!env.empty()) {
    auto end = env.find('\0');
    std::string_view entry = env.substr(0, end);
    env = end == std::string_view::npos ? std::string_view() : env.substr(end + 1);
    if (entry.size() > key.size() && entry.starts_with(key) && entry[key.size()] == '=')
      return std::string(entry.substr(key.size() + 1));
  }
  return std::nullopt;
}

std::optional<std::pair<int, int>> parse_kernel_release(std::string_view release) {
  int major = 0, minor = 0;
  const char* b = release.data();
  const char* e = b + release.size();
  auto r1 = std::from_chars(b, e, major);
  if (r1.ec != std::errc() || r1.ptr == e || *r1.ptr != '.') return std::nullopt;
  auto r2 = std::from_chars(r1.ptr + 1, e, minor);
  if (r2.ec != std::errc()) return std::nullopt;
  return std::pair{major, minor};
}

std::optional<std::string> parse_torch_version_py(std::string_view text) {
  auto pos = text.find("__version__");
  if (pos == std::string_view::npos) return std::nullopt;
  auto q = text.find_first_of("'\"", pos);
  if (q == std::string_view::npos) return std::nullopt;
  auto q2 = text.find(text[q], q + 1);
  if (q2 == std::string_view::npos || q2 == q + 1) return std::nullopt;
  return std::string(text.substr(q + 1, q2 - q - 1));
}

}  // namespace hangtrace::doctor
