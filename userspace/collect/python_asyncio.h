// The asyncio tasks of a CPython process, read from outside: 3.14+ through
// the _asyncio module's own table (python_asyncio.cpp), 3.11-3.13 from the
// asyncio.tasks module's registries (python_asyncio_registry.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "hangtrace/model.h"
#include "hangtrace/python_debug_offsets.h"
#include "hangtrace/result.h"
#include "python_objects.h"
#include "python_walker.h"

namespace hangtrace::python {

constexpr size_t kMaxAsyncioTasks = 16384;  // per process

// The _asyncio module's table at `address` (its .AsyncioDebug section),
// checked against itself and the interpreter's layout `o`.
Result<AsyncioDebugOffsets> read_asyncio_offsets(const MemoryReader& mem, uint64_t address,
                                                 const PyOffsets& o);

// Fills p.asyncio_tasks (every thread state's list, then the interpreters'),
// p.asyncio_error and each thread's asyncio_loop / asyncio_running_task.
// `thread_states`: (PyThreadState address, its thread's TID).
void read_asyncio_tasks(ProcessInfo& p, Walker& walker, const AsyncioDebugOffsets& a,
                        const std::vector<std::pair<uint64_t, int>>& thread_states,
                        const std::vector<uint64_t>& interpreters);

// 3.11-3.13: the tasks asyncio.tasks keeps (the weak set of scheduled
// tasks, 3.12+ the eager ones too) and which loop runs which task now
// (_current_tasks), into the same fields. `tid_of_pthread`: each thread
// state's pthread_t and TID (a loop records the thread that runs it by the
// former).
void read_asyncio_registry(ProcessInfo& p, Walker& walker, const std::vector<uint64_t>& interpreters,
                           const std::unordered_map<uint64_t, int>& tid_of_pthread);

// Shared by both readers.
// A task's name: a str, or the int N of a default name not made yet ("Task-N").
std::string task_name(ObjectReader& objects, uint64_t name_object);
// The coroutines from `coro` (a task's own) down to the innermost, and what
// that one awaits: t.coroutine_stack, awaits, awaits_type, awaits_refcount,
// awaits_own_refs (and t.error when some of it could not be read).
void read_coroutine_chain(Walker& walker, uint64_t coro, AsyncioTask& t);

}  // namespace hangtrace::python
