#include "hangtrace/text.h"

#include <cxxabi.h>

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <algorithm>

namespace hangtrace {

// ---- sizes and durations ------------------------------------------------------

std::string format_bytes(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  double v = static_cast<double>(bytes);
  while (v >= 1024 && unit < 4) v /= 1024, ++unit;
  if (unit == 0) return fmt::format("{} B", bytes);
  if (v == static_cast<double>(static_cast<uint64_t>(v)))
    return fmt::format("{} {}", static_cast<uint64_t>(v), kUnits[unit]);
  return fmt::format("{:.1f} {}", v, kUnits[unit]);
}

std::string for_duration(std::optional<double> s) {
  if (!s) return "for an unknown time";
  if (*s >= 3600) return fmt::format("for {:.1f} h", *s / 3600);
  if (*s >= 120) return fmt::format("for {:.1f} min", *s / 60);
  return fmt::format("for {:.1f} s", *s);
}

std::string format_seconds(double s) {
  if (s >= 3600) return fmt::format("{:.1f} s ({:.1f} h)", s, s / 3600);
  if (s >= 120) return fmt::format("{:.1f} s ({:.1f} min)", s, s / 60);
  return fmt::format("{:.1f} s", s);
}

std::string format_short_duration(double s) {
  if (s >= 120) return fmt::format("{:.0f} s", s);
  if (s >= 1) return fmt::format("{:.1f} s", s);
  return fmt::format("{:.0f} ms", s * 1000);
}

std::string format_ns(uint64_t ns) {
  if (ns >= 1'000'000'000ull) return format_short_duration(static_cast<double>(ns) / 1e9);
  if (ns >= 1'000'000ull) return fmt::format("{:.1f} ms", static_cast<double>(ns) / 1e6);
  return fmt::format("{:.1f} µs", static_cast<double>(ns) / 1e3);
}

// ---- clock times ----------------------------------------------------------------
namespace {

std::string format_time(double unix_seconds, const char* pattern, bool utc) {
  std::time_t t = static_cast<std::time_t>(std::floor(unix_seconds));
  std::tm tm{};
  if (utc)
    gmtime_r(&t, &tm);
  else
    localtime_r(&t, &tm);
  char buf[64];
  size_t n = std::strftime(buf, sizeof buf, pattern, &tm);
  return std::string(buf, n);
}

}  // namespace

std::string format_utc(double unix_seconds) {
  return format_time(unix_seconds, "%Y-%m-%d %H:%M:%S UTC", true);
}
std::string format_local_time(double unix_seconds) {
  return format_time(unix_seconds, "%Y-%m-%d %H:%M:%S %Z", false);
}
std::string format_utc_clock(double unix_seconds) { return format_time(unix_seconds, "%H:%M:%S", true); }
std::string format_utc_stamp(double unix_seconds) {
  return format_time(unix_seconds, "%Y%m%dT%H%M%SZ", true);
}

// ---- plain text -------------------------------------------------------------------

std::vector<std::string_view> command_words(std::string_view s, size_t max_words) {
  std::vector<std::string_view> words;
  for (size_t i = 0; i < s.size() && words.size() < max_words;) {
    size_t end = s.find(' ', i);
    if (end == std::string_view::npos) end = s.size();
    if (end > i) words.push_back(s.substr(i, end - i));
    i = end + 1;
  }
  return words;
}

std::string number_runs(std::vector<int> numbers) {
  std::sort(numbers.begin(), numbers.end());
  numbers.erase(std::unique(numbers.begin(), numbers.end()), numbers.end());
  std::string out;
  for (size_t i = 0; i < numbers.size();) {
    size_t j = i;
    while (j + 1 < numbers.size() && numbers[j + 1] == numbers[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += j == i ? std::to_string(numbers[i]) : fmt::format("{}-{}", numbers[i], numbers[j]);
    i = j + 1;
  }
  return out;
}

std::string_view trim(std::string_view s, std::string_view blanks) {
  size_t b = s.find_first_not_of(blanks);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(blanks) - b + 1);
}

// ---- UTF-8 and XML ----------------------------------------------------------------

size_t utf8_sequence(std::string_view s, size_t i) {
  if (i >= s.size()) return 0;
  unsigned char c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
  return n;
}

std::string utf8_prefix(std::string_view s, size_t n) {
  size_t i = 0, count = 0;
  while (i < s.size() && count < n) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    i += c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    ++count;
  }
  return std::string(s.substr(0, std::min(i, s.size())));
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

namespace {

// Length of the well-formed UTF-8 sequence at s[i] (no overlong form, no
// surrogate, nothing past U+10FFFF), 0 when there is none.
size_t strict_utf8_sequence(std::string_view s, size_t i) {
  size_t n = utf8_sequence(s, i);
  if (n < 2) return n;
  unsigned char c0 = static_cast<unsigned char>(s[i]), c1 = static_cast<unsigned char>(s[i + 1]);
  if ((n == 2 && c0 < 0xC2) || (n == 3 && c0 == 0xE0 && c1 < 0xA0) || (n == 3 && c0 == 0xED && c1 >= 0xA0) ||
      (n == 4 && (c0 > 0xF4 || (c0 == 0xF0 && c1 < 0x90) || (c0 == 0xF4 && c1 >= 0x90))))
    return 0;
  return n;
}

}  // namespace

std::string terminal_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t n = strict_utf8_sequence(s, i);
    unsigned char c = static_cast<unsigned char>(s[i]);
    bool control = (n == 1 && (c < 0x20 || c == 0x7F)) ||
                   (n == 2 && c == 0xC2 && static_cast<unsigned char>(s[i + 1]) < 0xA0);  // C1
    if (n == 0 || control) {
      for (size_t k = 0; k < std::max<size_t>(n, 1); ++k)
        out += fmt::format("\\x{:02x}", static_cast<unsigned char>(s[i + k]));
      i += std::max<size_t>(n, 1);
      continue;
    }
    out.append(s, i, n);
    i += n;
  }
  return out;
}

std::string xml_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t n = utf8_sequence(s, i);
    if (n == 0) {
      out += '?';
      ++i;
      continue;
    }
    if (n > 1) {
      out.append(s, i, n);
      i += n;
      continue;
    }
    char c = s[i++];
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += static_cast<unsigned char>(c) < 0x20 ? ' ' : c;
    }
  }
  return out;
}

// ---- paths ------------------------------------------------------------------------

std::string basename_of(std::string_view path) {
  size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

// ---- symbols ------------------------------------------------------------------------

std::string demangle(std::string_view symbol, size_t max_chars) {
  std::string out(symbol);
  // Dynamic symbols carry their version: noise to a reader, and it breaks
  // matching by name.
  if (auto at = out.find('@'); at != std::string::npos && at > 0) out.resize(at);
  // The demangler recurses as deep as the name nests, and a name comes from
  // a file the target mapped: a longer one is shown as it is (cut below).
  if (out.size() > 2 && out.size() <= kMaxDemangledBytes && out[0] == '_' && out[1] == 'Z') {
    int status = 0;
    std::unique_ptr<char, decltype(&std::free)> d(abi::__cxa_demangle(out.c_str(), nullptr, nullptr, &status),
                                                  &std::free);
    if (status == 0 && d) out = d.get();
  }
  if (max_chars > 3 && out.size() > max_chars) out = out.substr(0, max_chars - 3) + "...";
  return out;
}

// ---- errno and signals --------------------------------------------------------------

std::string errno_text(int err) { return std::strerror(err < 0 ? -err : err); }

const char* signal_name(int sig) {
  switch (sig) {
    case 1:
      return "SIGHUP";
    case 2:
      return "SIGINT";
    case 3:
      return "SIGQUIT";
    case 6:
      return "SIGABRT";
    case 7:
      return "SIGBUS";
    case 8:
      return "SIGFPE";
    case 9:
      return "SIGKILL";
    case 10:
      return "SIGUSR1";
    case 11:
      return "SIGSEGV";
    case 12:
      return "SIGUSR2";
    case 13:
      return "SIGPIPE";
    case 14:
      return "SIGALRM";
    case 15:
      return "SIGTERM";
    case 17:
      return "SIGCHLD";
    case 18:
      return "SIGCONT";
    case 19:
      return "SIGSTOP";
    case 20:
      return "SIGTSTP";
    case 21:
      return "SIGTTIN";
    case 22:
      return "SIGTTOU";
    default:
      return nullptr;
  }
}

std::string signal_set_text(uint64_t mask) {
  std::string out;
  for (int sig = 1; sig <= 64; ++sig) {
    if (!(mask & (uint64_t{1} << (sig - 1)))) continue;
    const char* name = signal_name(sig);
    if (!out.empty()) out += ", ";
    out += name ? std::string(name) : fmt::format("signal {}", sig);
  }
  return out.empty() ? "no signal" : out;
}

// ---- enum names -----------------------------------------------------------------------

const char* role_name(ProcessRole role) {
  switch (role) {
    case ProcessRole::Target:
      return "target";
    case ProcessRole::Descendant:
      return "descendant";
    case ProcessRole::Peer:
      return "peer";
  }
  return "descendant";
}

ProcessRole role_from_name(std::string_view name) {
  return name == "target" ? ProcessRole::Target
         : name == "peer" ? ProcessRole::Peer
                          : ProcessRole::Descendant;
}

std::string tcp_state_name(int state) {
  static const char* const kNames[] = {nullptr,     "ESTABLISHED", "SYN_SENT",    "SYN_RECV",   "FIN_WAIT1",
                                       "FIN_WAIT2", "TIME_WAIT",   "CLOSE",       "CLOSE_WAIT", "LAST_ACK",
                                       "LISTEN",    "CLOSING",     "NEW_SYN_RECV"};
  if (state > 0 && state < static_cast<int>(std::size(kNames))) return kNames[state];
  return fmt::format("STATE_{}", state);
}

}  // namespace hangtrace
