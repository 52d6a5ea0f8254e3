// The bytes of a file under tests/unit/fixtures/ (copied off a real machine).
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

namespace hangtrace::testing {

inline std::string fixture_file(const std::string& relative_path) {
  std::ifstream in(std::string(HANGTRACE_FIXTURES_DIR) + "/" + relative_path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "missing fixture " << relative_path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace hangtrace::testing
