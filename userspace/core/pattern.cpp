#include "hangtrace/pattern.h"

#include <fmt/format.h>
#include <re2/re2.h>

#include "hangtrace/text.h"

namespace hangtrace {

Result<Pattern> Pattern::compile(std::string_view text, std::string_view option) {
  if (text.empty()) return make_error(fmt::format("failed to compile {}: the pattern is empty", option));
  if (text.size() > kMaxPatternBytes)
    return make_error(fmt::format("failed to compile {}: the pattern is {} bytes, more than the {} allowed",
                                  option, text.size(), kMaxPatternBytes));
  RE2::Options options;
  options.set_encoding(RE2::Options::EncodingLatin1);  // bytes
  options.set_log_errors(false);                       // the one line is ours
  options.set_never_capture(true);
  options.set_max_mem(kPatternMemoryBytes);
  auto re = std::make_shared<const RE2>(re2::StringPiece(text.data(), text.size()), options);
  if (!re->ok())
    return make_error(fmt::format("failed to compile {} '{}': {}", option, terminal_escape(text),
                                  terminal_escape(re->error())));
  Pattern p;
  p.text_ = std::string(text);
  p.re_ = std::move(re);
  return p;
}

bool Pattern::search(std::string_view subject) const {
  return RE2::PartialMatch(re2::StringPiece(subject.data(), subject.size()), *re_);
}

}  // namespace hangtrace
