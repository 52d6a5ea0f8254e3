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

// The most one read takes: a length comes from the target's own data (a
// count, an offset table), and the buffer is allocated before the read. The
// largest read hangtrace means to make is the 16 MiB of a runtime scan.
constexpr size_t kMaxProcessReadBytes = size_t{16} << 20;

// Exactly `length` bytes from `address` in `pid`, or an error (also for a
// length over kMaxProcessReadBytes).
Result<std::vector<uint8_t>> read_process_memory(int pid, uint64_t address, size_t length);

// As many bytes as are readable from `address`, up to `length` (at most
// kMaxProcessReadBytes): a range that
// runs into an unmapped page yields the part before it (possibly nothing).
std::vector<uint8_t> read_process_memory_prefix(int pid, uint64_t address, size_t length);

std::optional<uint32_t> read_process_u32(int pid, uint64_t address);

// Where a walker of the target's data structures (the CPython walker) reads:
// the live process, or a memory image (tests/fuzz feeds fuzzed ones), with
// the contracts of read_process_memory and read_process_memory_prefix.
class MemoryReader {
 public:
  virtual ~MemoryReader() = default;
  virtual Result<std::vector<uint8_t>> read(uint64_t address, size_t length) const = 0;
  virtual std::vector<uint8_t> read_prefix(uint64_t address, size_t length) const = 0;
};

class ProcessMemory final : public MemoryReader {
 public:
  explicit ProcessMemory(int pid) : pid_(pid) {}
  Result<std::vector<uint8_t>> read(uint64_t address, size_t length) const override {
    return read_process_memory(pid_, address, length);
  }
  std::vector<uint8_t> read_prefix(uint64_t address, size_t length) const override {
    return read_process_memory_prefix(pid_, address, length);
  }

 private:
  int pid_;
};

}  // namespace hangtrace
