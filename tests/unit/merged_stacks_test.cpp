#include <gtest/gtest.h>

#include "hangtrace/stacks.h"

namespace hangtrace {
namespace {

UserFrame native(const std::string& fn) {
  UserFrame f;
  f.function = fn;
  f.file = "/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0";
  return f;
}

UserFrame py(const std::string& fn, int line, bool entry) {
  UserFrame f;
  f.kind = UserFrame::Kind::Python;
  f.function = fn;
  f.file = "/usr/lib/python3.11/queue.py";
  f.line = line;
  f.python_entry = entry;
  return f;
}

std::vector<std::string> names(const std::vector<UserFrame>& s) {
  std::vector<std::string> out;
  for (const auto& f : s) out.push_back(f.function);
  return out;
}

TEST(MergedStacks, EvalFramesAreReplacedByTheirRunOfPythonFrames) {
  // 3.11: get() and _try_get_data() ran inlined in one eval-loop call, entered
  // from the C call in method_vectorcall; run() has its own eval-loop call.
  std::vector<UserFrame> n = {native("pthread_cond_timedwait"),   native("PyThread_acquire_lock_timed"),
                              native("_PyEval_EvalFrameDefault"), native("method_vectorcall"),
                              native("_PyEval_EvalFrameDefault"), native("main")};
  std::vector<UserFrame> p = {py("Queue.get", 180, false), py("_try_get_data", 1133, true),
                              py("run", 12, true)};
  EXPECT_EQ(names(merge_user_stack(n, p)),
            (std::vector<std::string>{"pthread_cond_timedwait", "PyThread_acquire_lock_timed", "Queue.get",
                                      "_try_get_data", "method_vectorcall", "run", "main"}));
}

TEST(MergedStacks, TailCallHandlersAreOneActivationWithTheirLoop) {
  // 3.14 --with-tail-call-interp: the running handler above the loop that
  // entered it; one activation, replaced once. A handler alone (the loop
  // function tail-called away) is one too.
  std::vector<UserFrame> n = {native("read"),
                              native("_TAIL_CALL_CALL"),
                              native("_PyEval_EvalFrameDefault"),
                              native("method_vectorcall"),
                              native("_TAIL_CALL_CALL_KW"),
                              native("main")};
  std::vector<UserFrame> p = {py("Queue.get", 180, false), py("_try_get_data", 1133, true),
                              py("run", 12, true)};
  EXPECT_EQ(names(merge_user_stack(n, p)), (std::vector<std::string>{"read", "Queue.get", "_try_get_data",
                                                                     "method_vectorcall", "run", "main"}));
  EXPECT_TRUE(is_python_eval_frame("_TAIL_CALL_LOAD_ATTR"));
}

TEST(MergedStacks, LeftoverPythonFramesGoOutermost) {
  std::vector<UserFrame> n = {native("read"), native("_PyEval_EvalFrameDefault")};
  std::vector<UserFrame> p = {py("inner", 3, true), py("outer", 9, true)};
  EXPECT_EQ(names(merge_user_stack(n, p)), (std::vector<std::string>{"read", "inner", "outer"}));
}

TEST(MergedStacks, EvalFrameWithoutPythonFramesStays) {
  std::vector<UserFrame> n = {native("_PyEval_EvalFrameDefault"), native("_PyEval_EvalFrameDefault.cold")};
  std::vector<UserFrame> p = {py("only", 1, true)};
  EXPECT_EQ(names(merge_user_stack(n, p)),
            (std::vector<std::string>{"only", "_PyEval_EvalFrameDefault.cold"}));
}

TEST(MergedStacks, WithoutEntryMarksOnePythonFramePerEvalFrame) {
  std::vector<UserFrame> n = {native("_PyEval_EvalFrameDefault"), native("call"),
                              native("_PyEval_EvalFrameDefault")};
  std::vector<UserFrame> p = {py("a", 1, false), py("b", 2, false), py("c", 3, false)};
  EXPECT_EQ(names(merge_user_stack(n, p)), (std::vector<std::string>{"a", "call", "b", "c"}));
}

TEST(MergedStacks, OneSideEmptyReturnsTheOther) {
  std::vector<UserFrame> n = {native("read")};
  std::vector<UserFrame> p = {py("f", 1, true)};
  EXPECT_EQ(names(merge_user_stack(n, {})), (std::vector<std::string>{"read"}));
  EXPECT_EQ(names(merge_user_stack({}, p)), (std::vector<std::string>{"f"}));
}

TEST(MergedStacks, FrameText) {
  EXPECT_EQ(user_frame_text(py("Queue.get", 180, false)), "Queue.get (queue.py:180)");
  UserFrame unnamed;
  unnamed.addr = 0x7f00dead;
  EXPECT_EQ(user_frame_text(unnamed), "0x7f00dead");
  EXPECT_TRUE(is_python_eval_frame("_PyEval_EvalFrameDefault.lto_priv.0"));
  EXPECT_FALSE(is_python_eval_frame("_PyEval_EvalFrame"));
}

}  // namespace
}  // namespace hangtrace
