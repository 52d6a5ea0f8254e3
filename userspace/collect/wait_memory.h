// What a blocked syscall points at in its process's memory: the futex word,
// the pollfd array, the fd_sets, the timeout. Decoded from the syscall
// arguments with hangtrace/syscalls.h, read with process_vm_readv.
#pragma once

#include <cstdint>
#include <vector>

#include "hangtrace/model.h"

namespace hangtrace {

struct WaitMemoryRead {
  WaitMemory memory;
  // Every futex address the call waits on (futex_waitv has several); the
  // collector keeps the mappings that hold them.
  std::vector<uint64_t> futex_addresses;
};

// Reads what `syscall` (of a thread of `pid`) waits on. Fields that cannot
// be read stay empty.
WaitMemoryRead read_wait_memory(int pid, const SyscallState& syscall);

// Seconds on `clock_id` now.
double clock_now_s(int clock_id);

}  // namespace hangtrace
