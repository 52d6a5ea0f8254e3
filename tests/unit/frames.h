// Stack frames for fixture snapshots built in code.
#pragma once

#include <cstdint>
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

// A native frame: function, module file, address, offset in the module, build-id.
inline UserFrame native(const std::string& function, const std::string& file, uint64_t addr,
                        uint64_t module_offset, const std::string& build_id) {
  UserFrame f;
  f.kind = UserFrame::Kind::Native;
  f.function = function;
  f.file = file;
  f.addr = addr;
  f.module_offset = module_offset;
  f.build_id = build_id;
  return f;
}

}  // namespace hangtrace::testing
