// Stack frames for fixture snapshots built in code.
#pragma once

#include <string>

#include "hangtrace/model.h"

namespace hangtrace::testing {

// A Python frame: function, file, line.
inline UserFrame py(const std::string& function, const std::string& file, int line) {
  UserFrame f;
  f.kind = UserFrame::Kind::Python;
  f.function = function;
  f.file = file;
  f.line = line;
  return f;
}

}  // namespace hangtrace::testing
