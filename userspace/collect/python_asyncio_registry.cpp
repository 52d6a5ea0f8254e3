// The asyncio tasks of CPython 3.11-3.13, read from outside. Their _asyncio
// module publishes no table of its own (3.14's .AsyncioDebug), but it
// registers every task where asyncio.all_tasks() finds it, in the
// asyncio.tasks module:
//   - _all_tasks (3.11) / _scheduled_tasks (3.12+): a weakref.WeakSet whose
//     `data` set holds a weak reference to each task;
//   - _eager_tasks (3.12+): a set of the tasks started eagerly;
//   - _current_tasks: {loop: the task that loop runs now}.
// The module is found in each interpreter's sys.modules and read with
// python_objects.cpp; each task (a C TaskObj, or a subclass's instance) with
// the layouts below, and its coroutines with read_coroutine_chain, as on
// 3.14. What 3.14 records and these versions do not is derived:
//   - a task's thread: the one that runs its loop (the loop's _thread_id, a
//     pthread_t, set while run_forever runs);
//   - awaited-by: a task is awaited by the tasks that await it; the
//     children of a gather by the task that awaits the gather's future (its
//     _children); the tasks of a TaskGroup by the task the group belongs to
//     (each child's done callback is the group's _on_task_done, the group's
//     _parent_task that task).
// Tasks of the pure-Python Task class (no _asyncio module) are not read.
#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "python_asyncio.h"
#include "python_objects.h"

namespace hangtrace::python {

namespace {

// TaskObj (Modules/_asynciomodule.c), measured with gdb (`ptype /o TaskObj`)
// on the _asyncio extensions of pyenv's 3.11.7, 3.12.1 and 3.13.0. 3.13
// moved the future's dict and weak references out of the object.
struct TaskLayout {
  uint64_t size, loop, callback0, callbacks, fut_waiter, coro, name;
};
constexpr TaskLayout kTask311 = {176, 16, 24, 40, 128, 136, 144};  // 3.11 and 3.12
constexpr TaskLayout kTask313 = {144, 16, 24, 40, 112, 120, 128};

constexpr const char* kTaskType = "_asyncio.Task";
constexpr size_t kMaxCallbacks = 64;
constexpr size_t kMaxChildren = 4096;
constexpr size_t kMaxRunningLoops = 1024;

class RegistryReader {
 public:
  RegistryReader(ProcessInfo& p, Walker& walker, const std::unordered_map<uint64_t, int>& tid_of_pthread)
      : p_(p),
        w_(walker),
        o_(walker.offsets()),
        objects_(walker),
        layout_(o_.minor >= 13 ? kTask313 : kTask311),
        tid_of_pthread_(tid_of_pthread) {}

  // The tasks registered in one interpreter.
  void read_interpreter(uint64_t interp) {
    auto module = objects_.module_dict(interp, "asyncio.tasks");
    if (!module) return note(module.error());
    if (*module == 0) return;  // asyncio not imported
    std::vector<uint64_t> found;
    auto registry = objects_.dict_get(*module, o_.minor >= 12 ? "_scheduled_tasks" : "_all_tasks");
    if (registry && *registry) {
      auto data = objects_.attribute(*registry, "data");
      if (data && *data) {
        if (auto refs = objects_.set_members(*data, kMaxAsyncioTasks)) {
          for (uint64_t ref : *refs)
            if (auto task = objects_.weakref_target(ref); task && *task) found.push_back(*task);
        } else {
          note(refs.error());
        }
      } else if (!data) {
        note(data.error());
      }
    } else if (!registry) {
      note(registry.error());
    }
    if (o_.minor >= 12) {
      if (auto eager = objects_.dict_get(*module, "_eager_tasks"); eager && *eager)
        if (auto tasks = objects_.set_members(*eager, kMaxAsyncioTasks))
          found.insert(found.end(), tasks->begin(), tasks->end());
    }
    size_t pure_python = 0;
    for (uint64_t task : found) {
      if (!seen_.insert(task).second) continue;
      if (!objects_.is_instance(task, kTaskType)) {
        ++pure_python;
        continue;
      }
      if (p_.asyncio_tasks.size() >= kMaxAsyncioTasks) {
        note(fmt::format("more than {} tasks: the rest not read", kMaxAsyncioTasks));
        break;
      }
      p_.asyncio_tasks.push_back(task_at(task));
    }
    if (pure_python)
      note(fmt::format("{} task{} of a class other than {} not read", pure_python,
                       pure_python == 1 ? "" : "s", kTaskType));
    running_tasks(*module);
  }

  // Who awaits whom where these versions do not record it.
  void derive_awaiters() {
    std::unordered_map<uint64_t, AsyncioTask*> by_address;
    for (auto& t : p_.asyncio_tasks) by_address[t.address] = &t;
    auto add = [](AsyncioTask& child, uint64_t parent) {
      if (child.address != parent &&
          std::find(child.awaited_by.begin(), child.awaited_by.end(), parent) == child.awaited_by.end())
        child.awaited_by.push_back(parent);
    };
    for (auto& t : p_.asyncio_tasks) {
      if (auto it = by_address.find(t.awaits); it != by_address.end()) add(*it->second, t.address);
      if (t.awaits && objects_.is_instance(t.awaits, "_GatheringFuture")) {
        if (auto children = objects_.attribute(t.awaits, "_children"); children && *children)
          if (auto items = objects_.sequence_items(*children, kMaxChildren))
            for (uint64_t c : *items)
              if (auto it = by_address.find(c); it != by_address.end()) add(*it->second, t.address);
      }
      for (uint64_t owner : callback_owners(t.address))
        if (auto parent = objects_.attribute(owner, "_parent_task"); parent && by_address.count(*parent))
          add(t, *parent);
    }
  }

  void finish() {
    for (const auto& e : errors_) p_.asyncio_error += (p_.asyncio_error.empty() ? "" : "; ") + e;
  }

 private:
  void note(const std::string& error) {
    if (errors_.size() < 4 && std::find(errors_.begin(), errors_.end(), error) == errors_.end())
      errors_.push_back(error);
  }

  AsyncioTask task_at(uint64_t address) {
    AsyncioTask t;
    t.address = address;
    auto bytes = w_.read(address, layout_.size, "task");
    if (!bytes) {
      t.error = bytes.error();
      return t;
    }
    t.name = task_name(objects_, load_u64(*bytes, layout_.name));
    t.tid = loop_tid(load_u64(*bytes, layout_.loop));
    read_coroutine_chain(w_, load_u64(*bytes, layout_.coro), t);
    // The future the task is parked on, should its coroutines not say (an
    // await of something else than a future's iterator); how many of its
    // references the task holds is then unknown.
    if (const uint64_t waiter = load_u64(*bytes, layout_.fut_waiter);
        !t.awaits && plausible_pointer(waiter)) {
      t.awaits = waiter;
      t.awaits_type = w_.type_name(waiter);
      t.awaits_refcount = w_.refcount(waiter);
    }
    return t;
  }

  // The thread running `loop` now (0: it does not run, or its thread is not
  // a Python thread state's).
  int loop_tid(uint64_t loop) {
    if (!plausible_pointer(loop)) return 0;
    if (auto it = loop_tids_.find(loop); it != loop_tids_.end()) return it->second;
    int tid = 0;
    if (auto id = objects_.attribute(loop, "_thread_id"); id && *id)
      if (auto pthread = objects_.unsigned_int(*id))
        if (auto it = tid_of_pthread_.find(*pthread); it != tid_of_pthread_.end()) tid = it->second;
    if (loop_tids_.size() < kMaxRunningLoops) loop_tids_[loop] = tid;
    return tid;
  }

  // _current_tasks: the task each running loop is inside of, on the thread
  // that runs the loop.
  void running_tasks(uint64_t module) {
    auto current = objects_.dict_get(module, "_current_tasks");
    if (!current || !*current) return;
    auto items = objects_.dict_items(*current, kMaxRunningLoops);
    if (!items) return note(items.error());
    for (const auto& [loop, task] : *items) {
      const int tid = loop_tid(loop);
      for (auto& th : p_.threads)
        if (tid && th.tid == tid) {
          th.asyncio_loop = loop;
          th.asyncio_running_task = task;
        }
    }
    // Loops that run with no task inside (idle in their selector).
    for (const auto& [loop, tid] : loop_tids_)
      for (auto& th : p_.threads)
        if (tid && th.tid == tid && !th.asyncio_loop) th.asyncio_loop = loop;
  }

  // The objects whose bound methods are the done callbacks of future
  // `future` (fut_callback0, then the (callback, context) pairs of
  // fut_callbacks).
  std::vector<uint64_t> callback_owners(uint64_t future) {
    std::vector<uint64_t> callbacks, out;
    auto bytes = w_.read(future, layout_.callbacks + 8, "future callbacks");
    if (!bytes) return out;
    if (uint64_t first = load_u64(*bytes, layout_.callback0)) callbacks.push_back(first);
    if (uint64_t list = load_u64(*bytes, layout_.callbacks); plausible_pointer(list))
      if (auto pairs = objects_.sequence_items(list, kMaxCallbacks))
        for (uint64_t pair : *pairs)
          if (auto items = objects_.sequence_items(pair, 2); items && !items->empty())
            callbacks.push_back(items->front());
    for (uint64_t cb : callbacks) {
      if (!plausible_pointer(cb) || w_.type_name(cb) != "method") continue;
      if (auto self = w_.read_ptr(cb + o_.method_self, "bound method"); self && plausible_pointer(*self))
        out.push_back(*self);
    }
    return out;
  }

  ProcessInfo& p_;
  Walker& w_;
  const PyOffsets& o_;
  ObjectReader objects_;
  const TaskLayout& layout_;
  const std::unordered_map<uint64_t, int>& tid_of_pthread_;
  std::unordered_set<uint64_t> seen_;
  std::unordered_map<uint64_t, int> loop_tids_;
  std::vector<std::string> errors_;
};

}  // namespace

void read_asyncio_registry(ProcessInfo& p, Walker& walker, const std::vector<uint64_t>& interpreters,
                           const std::unordered_map<uint64_t, int>& tid_of_pthread) {
  const PyOffsets& o = walker.offsets();
  if (o.minor < 11 || o.minor > 13 || !o.interp_modules || !o.gen_iframe ||
      o.managed_dict == ManagedDict::None)
    return;
  RegistryReader reader(p, walker, tid_of_pthread);
  for (uint64_t interp : interpreters) reader.read_interpreter(interp);
  reader.derive_awaiters();
  reader.finish();
}

}  // namespace hangtrace::python
