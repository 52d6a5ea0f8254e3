// Which Python-level lock a thread of a CPython 3.14+ process sleeps on:
// python_locks.cpp says how it is found.
#pragma once

#include <cstdint>
#include <unordered_map>

#include "hangtrace/model.h"
#include "python_walker.h"

namespace hangtrace::python {

// Sets ThreadInfo::python_lock of each thread of `p` parked on a PyMutex
// (its syscall state read already). `tid_of_pthread`: the process's threads
// by the pthread_t their thread states record, for an RLock's owner.
void find_lock_waits(ProcessInfo& p, Walker& walker, const std::unordered_map<uint64_t, int>& tid_of_pthread);

}  // namespace hangtrace::python
