// The asyncio tasks of a CPython 3.14+ process, read from outside:
// python_asyncio.cpp says how.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "hangtrace/model.h"
#include "hangtrace/python_debug_offsets.h"
#include "hangtrace/result.h"
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

}  // namespace hangtrace::python
