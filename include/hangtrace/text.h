// Text helpers every output shares: sizes, durations, clock times, UTF-8 and
// XML escaping, C++ symbol names, errno and signal text, and the names of the
// enums that more than one output prints. One rendering of each, so the text
// report, the JSON, the exports and the daemon agree.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>
#include <string_view>

#include "hangtrace/model.h"

namespace hangtrace {

// ---- sizes and durations ------------------------------------------------------
// "17 B", "64 MiB", "1.5 GiB": binary units, one decimal unless whole.
std::string format_bytes(uint64_t bytes);
// A wait's length in a sentence: "for 12.3 s", "for 2.5 min", "for 1.2 h";
// "for an unknown time" without one.
std::string for_duration(std::optional<double> seconds);
// A duration with its seconds first: "12.3 s", "130.0 s (2.2 min)", "7200.0 s (2.0 h)".
std::string format_seconds(double seconds);
// A short duration: "250 ms", "1.5 s", "150 s".
std::string format_short_duration(double seconds);
// Nanoseconds: "12.0 µs", "3.5 ms", then as format_short_duration.
std::string format_ns(uint64_t ns);

// ---- clock times ----------------------------------------------------------------
// "2024-05-01 12:00:00 UTC".
std::string format_utc(double unix_seconds);
// "2024-05-01 14:00:00 CEST" (the local zone).
std::string format_local_time(double unix_seconds);
// "12:00:00" (UTC).
std::string format_utc_clock(double unix_seconds);
// "20240501T120000Z": sorts as text, safe in a file name.
std::string format_utc_stamp(double unix_seconds);

// ---- plain text -------------------------------------------------------------------
// Numbers as runs, ascending and each once: {0, 1, 2, 4, 7, 6} -> "0-2, 4, 6-7".
std::string number_runs(std::vector<int> numbers);

// The first `max_words` words of a command line as ProcessInfo keeps it
// (arguments joined by single spaces; empty ones dropped). Views into `s`.
std::vector<std::string_view> command_words(std::string_view s, size_t max_words);

inline constexpr std::string_view kWhitespace = " \t\n\r\v\f";
// `s` without the leading and trailing characters of `blanks`.
std::string_view trim(std::string_view s, std::string_view blanks = kWhitespace);

// ---- UTF-8 and XML ----------------------------------------------------------------
// Length of the valid UTF-8 sequence at s[i], 0 when it is not one.
size_t utf8_sequence(std::string_view s, size_t i);
// The first `n` code points of `s`, never cutting a sequence.
std::string utf8_prefix(std::string_view s, size_t n);
// Code points in `s` (continuation bytes not counted).
size_t utf8_length(std::string_view s);
// Text for XML: escaped, control characters and invalid UTF-8 (a comm is raw
// bytes) replaced, so one odd name cannot make a whole document unreadable.
std::string xml_escape(std::string_view s);
// Text for a terminal: control characters (C0, DEL, C1) and bytes that are
// not well-formed UTF-8 (a comm, a command line, a file name or a Python
// name is raw bytes from the target) written as \xNN, so that nothing a
// target names can move the cursor, retitle the window or garble the page.
std::string terminal_escape(std::string_view s);

// ---- paths ------------------------------------------------------------------------
// What follows the last '/': "/usr/lib/libc.so.6" -> "libc.so.6"; the whole
// of a path without one.
std::string basename_of(std::string_view path);

// ---- symbols ------------------------------------------------------------------------
// A symbol as people read it: the version of a dynamic symbol
// ("__libc_start_main@@GLIBC_2.34") dropped, a C++ name demangled, and, with
// max_chars, names longer than that cut to max_chars ending in "...".
// A mangled name longer than kMaxDemangledBytes is not demangled (the
// demangler's recursion follows the name's nesting).
constexpr size_t kMaxDemangledBytes = size_t{8} << 10;
std::string demangle(std::string_view symbol, size_t max_chars = 0);

// ---- errno and signals --------------------------------------------------------------
// strerror of an errno, positive or negated (libbpf returns -errno).
std::string errno_text(int err);
// "SIGBUS" for the signals a training job dies of; nullptr for the rest.
const char* signal_name(int sig);
// A kernel signal set (bit N-1 for signal N): "SIGUSR1, SIGTERM".
std::string signal_set_text(uint64_t mask);

// ---- enum names -----------------------------------------------------------------------
// "target", "descendant", "peer" (the snapshot's and the report's word).
const char* role_name(ProcessRole role);
ProcessRole role_from_name(std::string_view name);
// The kernel's TCP_* states: "ESTABLISHED", "LISTEN", ...; "STATE_N" for others.
// UDP reuses the numbers (07 is "CLOSE").
std::string tcp_state_name(int state);

}  // namespace hangtrace
