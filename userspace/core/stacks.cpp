#include "hangtrace/stacks.h"
#include "hangtrace/text.h"

#include <fmt/format.h>

namespace hangtrace {

bool is_python_eval_frame(std::string_view function) {
  // 3.8-3.13 all run bytecode in _PyEval_EvalFrameDefault; a build with
  // computed gotos may add a ".cold" part, and LTO a ".lto_priv.N" suffix.
  std::string_view base = function.substr(0, function.find('.'));
  return base == "_PyEval_EvalFrameDefault";
}

std::vector<UserFrame> merge_user_stack(const std::vector<UserFrame>& native,
                                        const std::vector<UserFrame>& python) {
  if (native.empty()) return python;
  if (python.empty()) return native;
  bool has_entries = false;
  for (const auto& f : python) has_entries = has_entries || f.python_entry;
  std::vector<UserFrame> out;
  out.reserve(native.size() + python.size());
  size_t next = 0;
  for (const auto& f : native) {
    if (!is_python_eval_frame(f.function) || next >= python.size()) {
      out.push_back(f);
      continue;
    }
    // Without entry marks (a snapshot from before they were recorded) one
    // Python frame per eval-loop frame is the best guess.
    do {
      out.push_back(python[next]);
    } while (!python[next++].python_entry && has_entries && next < python.size());
  }
  for (; next < python.size(); ++next) out.push_back(python[next]);
  return out;
}

std::vector<UserFrame> merged_user_stack(const ThreadInfo& thread) {
  return merge_user_stack(thread.native_stack, thread.python_stack);
}

std::string user_frame_text(const UserFrame& f) {
  if (f.kind == UserFrame::Kind::Python) {
    std::string file = basename_of(f.file);
    if (f.line > 0) return fmt::format("{} ({}:{})", f.function, file, f.line);
    return fmt::format("{} ({})", f.function, file);
  }
  if (!f.function.empty()) return f.function;
  return fmt::format("0x{:x}", f.addr);
}

}  // namespace hangtrace
