// One user stack per thread out of two: the native frames unwound from the
// thread's registers and the Python frames read from the interpreter. Each
// C-level call of CPython's eval loop runs one or more Python frames; merged,
// those Python frames stand where that eval-loop frame stood, so a reader sees
// `pthread_cond_timedwait <- PyThread_acquire_lock_timed <- lock_acquire <-
// Queue.get (queue.py:180) <- _try_get_data (dataloader.py:1133)` in one line.
#pragma once

#include <string_view>
#include <functional>
#include <vector>

#include "hangtrace/model.h"

namespace hangtrace {

// A native frame of CPython's bytecode interpreter loop (any version 3.8+).
bool is_python_eval_frame(std::string_view function);

// Innermost first, like both inputs. Every eval-loop frame of `native` is
// replaced by the run of Python frames it executed: from the next unconsumed
// Python frame up to and including the next one marked python_entry. Python
// frames left over (the native walk stopped early) go at the outer end; an
// eval-loop frame with no Python frames left stays as it is. With no native
// frames the Python stack is returned, and vice versa.
std::vector<UserFrame> merge_user_stack(const std::vector<UserFrame>& native,
                                        const std::vector<UserFrame>& python);

// The merged stack of a thread (merge_user_stack of its native and Python stacks).
std::vector<UserFrame> merged_user_stack(const ThreadInfo& thread);

// The interactive debugger or console the thread's Python frames are in --
// "pdb" (pdb, bdb, breakpoint()), "ipdb", "pudb", "code.interact", "an
// interactive command loop (cmd.Cmd)" -- or "" when none. What such a
// thread reads from stdin, a person types.
std::string_view interactive_console(const ThreadInfo& thread);

// A terminal's path: /dev/pts/N, /dev/ttyN, /dev/console.
bool is_terminal_path(std::string_view path);

// "name (file:line)" for Python, "name" for native ("0x<addr>" when unnamed).
std::string user_frame_text(const UserFrame& frame);

// Frames innermost first, " <- " between them, at most `limit` of them (then
// "<- ... (N more)"), each as `text` writes it.
std::string frames_text(const std::vector<UserFrame>& frames, size_t limit,
                        const std::function<std::string(const UserFrame&)>& text = user_frame_text);

}  // namespace hangtrace
