// The bytes of a file under tests/unit/fixtures/ (copied off a real machine),
// and the truncation sweep the parser tests run over them.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

namespace hangtrace::testing {

inline std::string fixture_file(const std::string& relative_path) {
  std::ifstream in(std::string(HANGTRACE_FIXTURES_DIR) + "/" + relative_path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "missing fixture " << relative_path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// fixtures/procfs/NAME: files copied from /proc.
inline std::string procfs_fixture(const std::string& name) { return fixture_file("procfs/" + name); }

// Every prefix of a valid text must parse or fail cleanly, never crash (the
// ones cut before the required parts must fail: the callers check those).
template <class Parse>
void for_each_truncation(const std::string& text, Parse parse) {
  for (size_t n = 0; n < text.size(); ++n) parse(std::string_view(text).substr(0, n));
}

}  // namespace hangtrace::testing
