// Text helpers the /proc parsers share (userspace/core/procfs/*.cpp only):
// whitespace fields, lines, whole-token integers and the error wording.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hangtrace/result.h"
#include "hangtrace/text.h"

namespace hangtrace::procfs::fields {

inline bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

inline bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}
inline bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

using hangtrace::trim;  // hangtrace/text.h
std::vector<std::string_view> split_whitespace(std::string_view s);
std::vector<std::string_view> split_lines(std::string_view s);

// The next whitespace-separated field of `rest`, which moves past it.
std::string_view next_field(std::string_view& rest);
// What is left of a line after its fields: leading blanks and the line end
// cut, inner spaces kept (a path may hold them, " (deleted)" included).
std::string rest_of_line(std::string_view rest);

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

inline std::optional<uint64_t> parse_u64(std::string_view s, int base = 10) {
  return parse_int<uint64_t>(s, base);
}

// "key:\tvalue" -> {key, value}; false when there is no colon.
bool split_key_value(std::string_view line, std::string_view& key, std::string_view& value);

// "failed to parse WHAT: DETAIL".
Error parse_error(std::string_view what, std::string_view detail);
// At most 80 characters of `s` for an error message.
std::string excerpt(std::string_view s);

}  // namespace hangtrace::procfs::fields
