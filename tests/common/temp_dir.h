// A fresh directory under /tmp for one test, removed with all it holds: the
// one temp-dir helper of the unit and integration tests.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>

namespace hangtrace::testing {

struct TempDir {
  std::filesystem::path path;  // empty when mkdtemp failed
  explicit TempDir(const std::string& prefix = "hangtrace-test") {
    std::string tmpl = "/tmp/" + prefix + ".XXXXXX";
    if (mkdtemp(tmpl.data())) path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path.empty()) std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  // PATH/name.
  std::string file(const std::string& name) const { return (path / name).string(); }
};

}  // namespace hangtrace::testing
