// Regular expressions a user gives hangtrace (--match), searched in text
// another user's process controls (its command line). RE2: time linear in
// the subject, memory bounded by kPatternMemoryBytes, no recursion (the
// std::regex it replaces matched `.*` recursively and overflowed the stack
// on a 1 MiB command line). Bytes, not UTF-8: a command line need not be
// valid UTF-8, and `.` matches any byte but a newline, as std::regex's did.
// Perl syntax without what needs backtracking: backreferences and
// lookarounds are refused at start, with the reason.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "hangtrace/result.h"

namespace re2 {
class RE2;
}

namespace hangtrace {

// A pattern longer than this is refused (no --match needs it; RE2's own
// program-size limit would refuse most of them anyway).
constexpr size_t kMaxPatternBytes = 4096;
// RE2's max_mem: its compiled program and the DFA's cache. A search that
// outgrows the cache falls back to RE2's NFA (slower, still linear).
constexpr int64_t kPatternMemoryBytes = int64_t{8} << 20;

class Pattern {
 public:
  // `option` names where the pattern came from in the error:
  // "failed to compile --match '(a)\1': invalid escape sequence: \1".
  static Result<Pattern> compile(std::string_view text, std::string_view option);
  // Whether the pattern matches anywhere in `subject` (unanchored, like
  // grep or std::regex_search).
  bool search(std::string_view subject) const;
  const std::string& text() const { return text_; }

 private:
  std::string text_;
  std::shared_ptr<const re2::RE2> re_;  // immutable and thread-safe: copies share it
};

}  // namespace hangtrace
