// Reads another process's memory with process_vm_readv (needs
// CAP_SYS_PTRACE or the same credentials). The target may unmap the range or
// exit at any moment, so every read can fail; callers treat failure as
// "unknown", never as an error of the snapshot.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "hangtrace/result.h"

namespace hangtrace {

// Exactly `length` bytes from `address` in `pid`, or an error.
Result<std::vector<uint8_t>> read_process_memory(int pid, uint64_t address, size_t length);

// As many bytes as are readable from `address`, up to `length`: a range that
// runs into an unmapped page yields the part before it (possibly nothing).
std::vector<uint8_t> read_process_memory_prefix(int pid, uint64_t address, size_t length);

std::optional<uint32_t> read_process_u32(int pid, uint64_t address);

}  // namespace hangtrace
