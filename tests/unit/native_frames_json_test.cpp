// Native frames (and the Python frames' entry flag) survive
// --save-snapshot / --from-snapshot: every UserFrame field that offline
// symbolization or the stack merge needs.
#include <gtest/gtest.h>

#include "hangtrace/snapshot_json.h"

namespace hangtrace {
namespace {

Snapshot with_stacks() {
  Snapshot s;
  s.target_pid = 42;
  ProcessInfo p;
  p.pid = 42;
  p.comm = "python3";
  ThreadInfo t;
  t.tid = 42;
  t.state = 'S';
  UserFrame read_frame;
  read_frame.kind = UserFrame::Kind::Native;
  read_frame.function = "read";
  read_frame.file = "/usr/lib/x86_64-linux-gnu/libc.so.6";
  read_frame.addr = 0x7f3a1c2e4f1d;
  read_frame.module_offset = 0xf4f1d;
  read_frame.build_id = "d4b2b0c7e2d0e1f1a6b3c0d2e7f8a9b0c1d2e3f4";
  UserFrame eval;
  eval.kind = UserFrame::Kind::Native;
  eval.function = "_PyEval_EvalFrameDefault";
  eval.file = "/usr/bin/python3.11";
  eval.addr = 0x55d0c0a1b2c3;
  eval.module_offset = 0x1b2c3;
  eval.build_id = "00ff";
  UserFrame unknown;  // no module found: only the address
  unknown.kind = UserFrame::Kind::Native;
  unknown.addr = 0x1234;
  t.native_stack = {read_frame, eval, unknown};
  UserFrame py;
  py.kind = UserFrame::Kind::Python;
  py.function = "inner";
  py.file = "/tmp/x.py";
  py.line = 7;
  py.python_entry = true;
  t.python_stack = {py};
  p.threads.push_back(t);
  ThreadInfo failed;
  failed.tid = 43;
  failed.native_stack_error = "failed to unwind: no frames";
  p.threads.push_back(failed);
  s.processes.push_back(p);
  return s;
}

void expect_same(const UserFrame& a, const UserFrame& b) {
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.function, b.function);
  EXPECT_EQ(a.file, b.file);
  EXPECT_EQ(a.line, b.line);
  EXPECT_EQ(a.addr, b.addr);
  EXPECT_EQ(a.module_offset, b.module_offset);
  EXPECT_EQ(a.build_id, b.build_id);
  EXPECT_EQ(a.python_entry, b.python_entry);
}

TEST(NativeFramesJson, RoundTrips) {
  Snapshot s = with_stacks();
  auto text = snapshot_to_json(s).dump();
  auto back = snapshot_from_json_text(text);
  ASSERT_TRUE(back.ok()) << back.error();
  ASSERT_EQ(back->processes.size(), 1u);
  const auto& threads = back->processes[0].threads;
  ASSERT_EQ(threads.size(), 2u);
  const auto& want = s.processes[0].threads[0];
  ASSERT_EQ(threads[0].native_stack.size(), want.native_stack.size());
  for (size_t i = 0; i < want.native_stack.size(); ++i)
    expect_same(threads[0].native_stack[i], want.native_stack[i]);
  ASSERT_EQ(threads[0].python_stack.size(), 1u);
  expect_same(threads[0].python_stack[0], want.python_stack[0]);
  EXPECT_EQ(threads[0].native_stack_error, "");
  EXPECT_TRUE(threads[1].native_stack.empty());
  EXPECT_EQ(threads[1].native_stack_error, "failed to unwind: no frames");
  // Saving what was loaded gives the same document.
  EXPECT_EQ(snapshot_to_json(*back).dump(), text);
}

TEST(NativeFramesJson, OlderSnapshotsHaveNoNativeStacks) {
  Snapshot s = with_stacks();
  auto j = snapshot_to_json(s);
  for (auto& t : j["processes"][0]["threads"]) {
    t.erase("native_stack");
    t.erase("native_stack_error");
  }
  auto back = snapshot_from_json(j);
  ASSERT_TRUE(back.ok()) << back.error();
  for (const auto& t : back->processes[0].threads) {
    EXPECT_TRUE(t.native_stack.empty());
    EXPECT_EQ(t.native_stack_error, "");
  }
  // Python frames written before kinds existed still load as Python.
  ASSERT_EQ(back->processes[0].threads[0].python_stack.size(), 1u);
  EXPECT_EQ(back->processes[0].threads[0].python_stack[0].kind, UserFrame::Kind::Python);
}

}  // namespace
}  // namespace hangtrace
