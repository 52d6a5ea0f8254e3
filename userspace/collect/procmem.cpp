#include "procmem.h"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>

namespace hangtrace {

namespace {

constexpr uint64_t kPageSize = 4096;

// One process_vm_readv call; returns the bytes transferred or -errno.
ssize_t read_once(int pid, uint64_t address, void* buffer, size_t length) {
  iovec local{buffer, length};
  iovec remote{reinterpret_cast<void*>(address), length};
  for (int attempt = 0; attempt < 3; ++attempt) {
    ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n >= 0) return n;
    if (errno != EINTR) return -errno;
  }
  return -EINTR;
}

}  // namespace

Result<std::vector<uint8_t>> read_process_memory(int pid, uint64_t address, size_t length) {
  if (length > kMaxProcessReadBytes)
    return make_error(fmt::format("failed to read {} bytes at {:#x} in {}: more than the {} one read takes",
                                  length, address, pid, kMaxProcessReadBytes));
  std::vector<uint8_t> out(length);
  if (length == 0) return out;
  if (address == 0) return make_error("failed to read process memory: NULL address");
  ssize_t n = read_once(pid, address, out.data(), length);
  if (n < 0)
    return make_error(fmt::format("failed to read {} bytes at {:#x} in {}: {}", length, address, pid,
                                  std::strerror(static_cast<int>(-n))));
  if (static_cast<size_t>(n) != length)
    return make_error(
        fmt::format("failed to read {} bytes at {:#x} in {}: only {} readable", length, address, pid, n));
  return out;
}

std::vector<uint8_t> read_process_memory_prefix(int pid, uint64_t address, size_t length) {
  std::vector<uint8_t> out;
  if (address == 0 || length == 0) return out;
  length = std::min(length, kMaxProcessReadBytes);
  out.resize(length);
  ssize_t n = read_once(pid, address, out.data(), length);
  if (n < 0) {
    // The kernel fails the whole iovec when its first page is fine but a
    // later one is not mapped; retry up to the page boundary.
    uint64_t to_page_end = kPageSize - (address % kPageSize);
    if (to_page_end >= length) return {};
    n = read_once(pid, address, out.data(), static_cast<size_t>(to_page_end));
    if (n < 0) return {};
  }
  out.resize(static_cast<size_t>(n));
  return out;
}

std::optional<uint32_t> read_process_u32(int pid, uint64_t address) {
  if (address % alignof(uint32_t) != 0) return std::nullopt;  // the kernel rejects unaligned futexes too
  auto bytes = read_process_memory(pid, address, sizeof(uint32_t));
  if (!bytes) return std::nullopt;
  uint32_t value;
  std::memcpy(&value, bytes->data(), sizeof value);
  return value;
}

}  // namespace hangtrace
