// asyncio tasks of a CPython 3.14+ process, read from outside the way
// `python -m asyncio ps PID` reads them (Modules/_remote_debugging_module.c),
// through the offsets the _asyncio module publishes in its `.AsyncioDebug`
// section:
//   - each thread state embeds the head of a circular list of the C tasks
//     created in it (asyncio_tasks_head, a struct llist_node), linked through
//     each TaskObj's task_node; tasks whose thread is gone move to a list in
//     the interpreter state;
//   - a task's coroutine (task_coro) embeds its frame (gi_iframe); a
//     coroutine suspended in an await (gi_frame_state
//     FRAME_SUSPENDED_YIELD_FROM) has what it awaits on top of its value
//     stack (stackpointer[-1]): another coroutine, followed down, or the
//     iterator of a future or task, whose `future` is what the task waits for;
//   - task_awaited_by is one awaiter or, with task_awaited_by_is_set, a set.
// Every list and chain is bounded and every pointer read back checked; a
// task that does not read back consistently keeps what was read and says why
// in AsyncioTask::error.
#include "python_asyncio.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "procmem.h"

namespace hangtrace::python {

namespace {

constexpr size_t kMaxTasksPerList = 4096;
constexpr size_t kMaxAwaitDepth = 64;
constexpr size_t kMaxAwaiters = 4096;
constexpr uint64_t kMaxTaskObjectBytes = 4096;
constexpr uint64_t kMaxStateBytes = 1 << 20;
constexpr uint64_t kMaxFrameSlots = 4096;  // locals + value stack of one coroutine frame

class TaskReader {
 public:
  TaskReader(Walker& walker, const AsyncioDebugOffsets& a) : w_(walker), o_(walker.offsets()), a_(a) {}

  // The task addresses of the list whose head is embedded at `head`.
  std::vector<uint64_t> list(uint64_t head, std::string& error) {
    std::vector<uint64_t> out;
    std::unordered_set<uint64_t> seen;
    auto node = w_.read_ptr(head + o_.llist_next, "task list head");
    if (!node) {
      error = node.error();
      return out;
    }
    uint64_t at = *node;
    while (at != head) {
      if (at == 0 || !seen.insert(at).second) {
        error = "task list is broken (it changed while read?)";
        break;
      }
      if (out.size() >= kMaxTasksPerList) {
        error = fmt::format("more than {} tasks in one list: the rest not read", kMaxTasksPerList);
        break;
      }
      out.push_back(at - a_.asyncio_task_object.task_node);
      auto next = w_.read_ptr(at + o_.llist_next, "task list node");
      if (!next) {
        error = next.error();
        break;
      }
      at = *next;
    }
    return out;
  }

  AsyncioTask task(uint64_t address, int tid) {
    AsyncioTask t;
    t.address = address;
    t.tid = tid;
    const auto& to = a_.asyncio_task_object;
    auto bytes = w_.read(address, to.size, "task");
    if (!bytes) {
      t.error = bytes.error();
      return t;
    }
    t.name = task_name(objects_, stack_ref_object(load_u64(*bytes, to.task_name)));
    awaiters(stack_ref_object(load_u64(*bytes, to.task_awaited_by)), (*bytes)[to.task_awaited_by_is_set] != 0,
             t);
    read_coroutine_chain(w_, stack_ref_object(load_u64(*bytes, to.task_coro)), t);
    return t;
  }

 private:
  void awaiters(uint64_t awaited_by, bool is_set, AsyncioTask& t) {
    if (awaited_by == 0) return;
    if (!is_set) {
      t.awaited_by.push_back(awaited_by);
      return;
    }
    auto members = objects_.set_members(awaited_by, kMaxAwaiters);
    if (!members) {
      t.error = "awaited_by: " + members.error();
      return;
    }
    t.awaited_by = std::move(*members);
  }

  Walker& w_;
  const PyOffsets& o_;
  const AsyncioDebugOffsets& a_;
  ObjectReader objects_{w_};
};

// Whether a suspended coroutine frame waits in an await (yield from): 3.13+
// say so in its state; 3.11 and 3.12 suspend every yield in one state, and
// the instruction it resumes at, RESUME with an oparg of 2 or more, tells an
// await (what _PyGen_yf checks).
bool suspended_in_await(Walker& w, int8_t state, const std::vector<uint8_t>& frame) {
  const PyOffsets& o = w.offsets();
  if (state != o.frame_suspended_yield_from) return false;
  if (!o.resume_opcode) return true;
  auto next = w.memory().read(load_u64(frame, o.frame_prev_instr) + 2, 2);
  if (!next || next->size() != 2) return false;
  const uint8_t op = (*next)[0], arg = (*next)[1];
  return (op == o.resume_opcode || (o.instrumented_resume_opcode && op == o.instrumented_resume_opcode)) &&
         arg >= 2;
}

// Where a coroutine frame's value stack ends (0: unknown): its stackpointer
// (3.14+), or localsplus plus its stacktop slots (3.11-3.13).
uint64_t stack_end(const PyOffsets& o, uint64_t frame_addr, const std::vector<uint8_t>& frame) {
  if (o.frame_stackpointer) return load_u64(frame, o.frame_stackpointer);
  if (!o.frame_stacktop) return 0;
  const auto top = static_cast<int32_t>(load_u32(frame, o.frame_stacktop));
  if (top <= 0 || static_cast<uint64_t>(top) > kMaxFrameSlots) return 0;
  return frame_addr + o.frame_localsplus + 8 * static_cast<uint64_t>(top);
}

}  // namespace

std::string task_name(ObjectReader& objects, uint64_t object) {
  if (object == 0) return "";
  const std::string type = objects.walker().type_name(object);
  if (type == "str") {
    auto s = objects.walker().read_unicode(object, "task name");
    return s ? *s : "";
  }
  if (type == "int") {
    auto n = objects.unsigned_int(object);
    return n ? fmt::format("Task-{}", *n) : "";
  }
  return "";
}

void read_coroutine_chain(Walker& w, uint64_t coro, AsyncioTask& t) {
  const PyOffsets& o = w.offsets();
  if (o.gen_iframe == 0) return;
  std::vector<UserFrame> outer_first;
  uint64_t coro_type = 0;
  // Each suspended frame's locals and value stack, to count the awaited
  // object's references the chain holds itself.
  std::vector<std::vector<uint8_t>> slots;
  for (size_t depth = 0; coro != 0 && depth < kMaxAwaitDepth; ++depth) {
    auto type = w.read_ptr(coro + o.object_type, "coroutine type");
    if (!type) {
      t.error = type.error();
      break;
    }
    if (depth == 0) coro_type = *type;
    // gi_frame_state is an int8 (not aligned): read it with the frame's bytes' owner.
    auto state = w.memory().read(coro + o.gen_frame_state, 1);
    if (state && state->size() != 1) state = make_error("short read");
    const uint64_t frame_addr = coro + o.gen_iframe;
    auto frame = w.read(frame_addr, o.frame_read_size, "coroutine frame");
    if (!state || !frame) {
      t.error = !state ? "cannot read the coroutine's state" : frame.error();
      break;
    }
    auto uf = w.frame_of(*frame);
    if (!uf) {
      t.error = uf.error();
      break;
    }
    outer_first.push_back(std::move(*uf));
    if (!suspended_in_await(w, static_cast<int8_t>((*state)[0]), *frame)) break;  // running, or not awaiting
    const uint64_t sp = stack_end(o, frame_addr, *frame);
    const uint64_t first_slot = frame_addr + o.frame_localsplus;
    if (!o.frame_localsplus || sp <= first_slot || sp - first_slot > kMaxFrameSlots * 8) break;
    if (auto b = w.memory().read(first_slot, sp - first_slot)) slots.push_back(std::move(*b));
    auto top = w.read_ptr(sp - 8, "coroutine stack");
    if (!top) {
      t.error = top.error();
      break;
    }
    const uint64_t awaitee = stack_ref_object(*top);
    if (awaitee == 0) break;
    auto awaitee_type = w.read_ptr(awaitee + o.object_type, "awaited object type");
    if (!awaitee_type) break;
    const std::string name = w.type_name(awaitee);
    if (*awaitee_type == coro_type || name == "coroutine" || name == "generator") {
      coro = awaitee;
      continue;
    }
    // `await future` suspends on the future's iterator (futureiterobject
    // {PyObject_HEAD; FutureObj *future;}).
    uint64_t awaited = awaitee;
    if (name.size() >= 10 && name.compare(name.size() - 10, 10, "FutureIter") == 0) {
      if (auto f = w.read_ptr(awaitee + o.object_size, "future iterator"); f && plausible_pointer(*f))
        awaited = *f;
    }
    t.awaits = awaited;
    t.awaits_type = w.type_name(awaited);
    t.awaits_refcount = w.refcount(awaited);
    // The task's fut_waiter, and the iterator when there is one.
    int64_t own = awaited == awaitee ? 1 : 2;
    for (const auto& frame_slots : slots)
      for (size_t i = 0; i + 8 <= frame_slots.size(); i += 8)
        own += stack_ref_object(load_u64(frame_slots, i)) == awaited;
    t.awaits_own_refs = own;
    break;
  }
  t.coroutine_stack.assign(outer_first.rbegin(), outer_first.rend());
}

Result<AsyncioDebugOffsets> read_asyncio_offsets(const MemoryReader& mem, uint64_t address,
                                                 const PyOffsets& o) {
  auto bytes = mem.read(address, sizeof(AsyncioDebugOffsets));
  if (!bytes || bytes->size() < sizeof(AsyncioDebugOffsets))
    return make_error("cannot read the _asyncio module's debug offsets");
  AsyncioDebugOffsets a;
  std::memcpy(&a, bytes->data(), sizeof a);
  const auto& to = a.asyncio_task_object;
  const auto& ts = a.asyncio_thread_state;
  const auto& is = a.asyncio_interpreter_state;
  auto inside = [](uint64_t size, std::initializer_list<uint64_t> fields) {
    for (uint64_t f : fields)
      if (f + 8 > size) return false;
    return true;
  };
  if (o.gen_iframe == 0 || to.size < o.object_size || to.size > kMaxTaskObjectBytes ||
      !inside(to.size, {to.task_name, to.task_awaited_by, to.task_coro, to.task_node}) ||
      to.task_awaited_by_is_set >= to.size || to.task_is_task >= to.size || ts.size > kMaxStateBytes ||
      !inside(ts.size, {ts.asyncio_running_loop, ts.asyncio_running_task, ts.asyncio_tasks_head + 8}) ||
      is.size > kMaxStateBytes || !inside(is.size, {is.asyncio_tasks_head + 8}))
    return make_error("the _asyncio module's debug offsets are inconsistent");
  return a;
}

void read_asyncio_tasks(ProcessInfo& p, Walker& walker, const AsyncioDebugOffsets& a,
                        const std::vector<std::pair<uint64_t, int>>& thread_states,
                        const std::vector<uint64_t>& interpreters) {
  TaskReader reader(walker, a);
  const auto& ts = a.asyncio_thread_state;
  std::vector<std::string> errors;
  size_t total = 0;
  auto take = [&](uint64_t head, int tid) {
    std::string error;
    for (uint64_t task : reader.list(head, error)) {
      if (total++ >= kMaxAsyncioTasks) {
        error = fmt::format("more than {} tasks: the rest not read", kMaxAsyncioTasks);
        break;
      }
      p.asyncio_tasks.push_back(reader.task(task, tid));
    }
    if (!error.empty() && errors.size() < 4) errors.push_back(error);
  };
  std::unordered_map<int, ThreadInfo*> by_tid;
  for (auto& t : p.threads) by_tid[t.tid] = &t;
  for (const auto& [tstate, tid] : thread_states) {
    if (auto it = by_tid.find(tid); it != by_tid.end()) {
      ThreadInfo* t = it->second;
      if (auto loop = walker.read_ptr(tstate + ts.asyncio_running_loop, "running loop"))
        t->asyncio_loop = stack_ref_object(*loop);
      if (auto task = walker.read_ptr(tstate + ts.asyncio_running_task, "running task"))
        t->asyncio_running_task = stack_ref_object(*task);
    }
    take(tstate + ts.asyncio_tasks_head, tid);
  }
  for (uint64_t interp : interpreters) take(interp + a.asyncio_interpreter_state.asyncio_tasks_head, 0);
  for (const auto& e : errors) p.asyncio_error += (p.asyncio_error.empty() ? "" : "; ") + e;
}

}  // namespace hangtrace::python
