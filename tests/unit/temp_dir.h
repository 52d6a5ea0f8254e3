// A fresh directory under /tmp for one test, removed with all it holds.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>

namespace hangtrace::testing {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix = "hangtrace-test") {
    std::string tmpl = "/tmp/" + prefix + ".XXXXXX";
    path = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path / name).string(); }
};

}  // namespace hangtrace::testing
