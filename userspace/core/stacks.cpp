#include "hangtrace/stacks.h"
#include "hangtrace/text.h"

#include <fmt/format.h>

namespace hangtrace {

namespace {

// 3.14's tail-call interpreter (--with-tail-call-interp, clang 19+) runs each
// instruction in a handler of its own, _TAIL_CALL_<OP>, the handlers
// tail-calling each other: the one running stands in the stack above the
// _PyEval_EvalFrameDefault that entered them (or in its place).
bool tail_call_handler(std::string_view function) { return function.substr(0, 11) == "_TAIL_CALL_"; }

}  // namespace

bool is_python_eval_frame(std::string_view function) {
  // 3.8-3.14 run bytecode in _PyEval_EvalFrameDefault; a build with
  // computed gotos may add a ".cold" part, and LTO a ".lto_priv.N" suffix.
  std::string_view base = function.substr(0, function.find('.'));
  return base == "_PyEval_EvalFrameDefault" || tail_call_handler(function);
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
  for (size_t i = 0; i < native.size(); ++i) {
    const UserFrame& f = native[i];
    // One activation of the loop: its handler and the loop function, or the
    // handler alone; the outermost of them takes the Python frames.
    if (tail_call_handler(f.function) && i + 1 < native.size() &&
        is_python_eval_frame(native[i + 1].function))
      continue;
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

std::string frames_text(const std::vector<UserFrame>& frames, size_t limit,
                        const std::function<std::string(const UserFrame&)>& text) {
  std::string out;
  for (size_t i = 0; i < frames.size() && i < limit; ++i) {
    if (i) out += " <- ";
    out += text(frames[i]);
  }
  if (frames.size() > limit) out += fmt::format(" <- ... ({} more)", frames.size() - limit);
  return out;
}

namespace {

struct Console {
  std::string_view file;  // ends the frame's path
  std::string_view name;
};
// In order of preference: pdb reads through cmd.Cmd, and the debugger names it.
constexpr Console kConsoles[] = {
    {"/pdb.py", "pdb"},
    {"/bdb.py", "pdb"},
    {"/ipdb/__main__.py", "ipdb"},
    {"/IPython/core/debugger.py", "ipdb"},
    {"/IPython/terminal/debugger.py", "ipdb"},
    {"/pudb/debugger.py", "pudb"},
    {"/code.py", "code.interact"},
    {"/cmd.py", "an interactive command loop (cmd.Cmd)"},
};

}  // namespace

std::string_view interactive_console(const ThreadInfo& thread) {
  for (const auto& c : kConsoles)
    for (const auto& frame : thread.python_stack)
      if (frame.file.ends_with(c.file)) return c.name;
  return "";
}

bool is_terminal_path(std::string_view path) {
  return path.starts_with("/dev/pts/") || path.starts_with("/dev/tty") || path == "/dev/console";
}

}  // namespace hangtrace
