// A CPython process's memory as the walker read it, for the walker's fuzzer:
// the version, _PyRuntime's address, the process's thread ids and every range
// the walk read, recorded from a real interpreter (record_python_image) and
// then mutated. The fuzzer hands the walker an ImageMemory over it, through
// the MemoryReader interface the live walker uses (procmem.h).
//
// Format (little-endian): "HTPYIMG1", u8 major, u8 minor, u16 thread count,
// u64 runtime, that many i32 tids, then regions until the end: u64 address,
// u32 length, the bytes. Parsing is bounded (kMaxRegions, kMaxThreads) and
// stops at the first region that does not fit.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "procmem.h"

namespace hangtrace::fuzz {

struct PythonImage {
  static constexpr size_t kMaxRegions = 4096;
  static constexpr size_t kMaxThreads = 64;
  static constexpr char kMagic[8] = {'H', 'T', 'P', 'Y', 'I', 'M', 'G', '1'};

  int major = 3, minor = 0;
  uint64_t runtime = 0;
  std::vector<int> tids;
  std::map<uint64_t, std::vector<uint8_t>> regions;  // by start address, never overlapping

  // Adds a range read, merged with the ranges it overlaps or touches.
  void add(uint64_t address, const std::vector<uint8_t>& bytes) {
    if (bytes.empty()) return;
    uint64_t start = address, end = address + bytes.size();
    std::vector<uint8_t> merged;
    auto it = regions.upper_bound(start);
    if (it != regions.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second.size() >= start) it = prev;
    }
    while (it != regions.end() && it->first <= end) {
      uint64_t s = std::min(start, it->first);
      uint64_t e = std::max(end, it->first + it->second.size());
      std::vector<uint8_t> joined(e - s);
      std::memcpy(joined.data() + (it->first - s), it->second.data(), it->second.size());
      if (!merged.empty()) std::memcpy(joined.data() + (start - s), merged.data(), merged.size());
      merged = std::move(joined);
      start = s;
      end = e;
      it = regions.erase(it);
    }
    if (merged.empty()) merged.resize(end - start);
    std::memcpy(merged.data() + (address - start), bytes.data(), bytes.size());
    regions.emplace(start, std::move(merged));
  }

  std::string serialize() const {
    std::string out(kMagic, sizeof kMagic);
    auto put = [&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); };
    uint8_t ma = static_cast<uint8_t>(major), mi = static_cast<uint8_t>(minor);
    uint16_t n = static_cast<uint16_t>(std::min(tids.size(), kMaxThreads));
    put(&ma, 1);
    put(&mi, 1);
    put(&n, 2);
    put(&runtime, 8);
    for (size_t i = 0; i < n; ++i) {
      int32_t t = tids[i];
      put(&t, 4);
    }
    for (const auto& [addr, bytes] : regions) {
      uint32_t len = static_cast<uint32_t>(bytes.size());
      put(&addr, 8);
      put(&len, 4);
      put(bytes.data(), bytes.size());
    }
    return out;
  }

  static std::optional<PythonImage> parse(const uint8_t* data, size_t size) {
    size_t pos = 0;
    auto get = [&](void* p, size_t n) {
      if (size - pos < n) return false;
      std::memcpy(p, data + pos, n);
      pos += n;
      return true;
    };
    char magic[8];
    uint8_t ma = 0, mi = 0;
    uint16_t n = 0;
    PythonImage img;
    if (!get(magic, 8) || std::memcmp(magic, kMagic, 8) != 0) return std::nullopt;
    if (!get(&ma, 1) || !get(&mi, 1) || !get(&n, 2) || !get(&img.runtime, 8)) return std::nullopt;
    img.major = ma;
    img.minor = mi;
    for (size_t i = 0; i < n && i < kMaxThreads; ++i) {
      int32_t t = 0;
      if (!get(&t, 4)) return std::nullopt;
      img.tids.push_back(t);
    }
    while (img.regions.size() < kMaxRegions) {
      uint64_t addr = 0;
      uint32_t len = 0;
      if (!get(&addr, 8) || !get(&len, 4) || size - pos < len) break;
      if (addr + len < addr) break;  // wraps around
      img.add(addr, std::vector<uint8_t>(data + pos, data + pos + len));
      pos += len;
    }
    return img;
  }
};

// Reads served from an image: a range is readable when one region holds it
// whole (as process_vm_readv reads a range only when all of it is mapped).
class ImageMemory final : public MemoryReader {
 public:
  explicit ImageMemory(const PythonImage& image) : image_(image) {}

  Result<std::vector<uint8_t>> read(uint64_t address, size_t length) const override {
    std::vector<uint8_t> out = read_prefix(address, length);
    if (out.size() != length) return make_error("failed to read process memory: not mapped");
    return out;
  }

  std::vector<uint8_t> read_prefix(uint64_t address, size_t length) const override {
    auto it = image_.regions.upper_bound(address);
    if (it == image_.regions.begin() || length == 0) return {};
    --it;
    uint64_t off = address - it->first;
    if (off >= it->second.size()) return {};
    size_t n = std::min<uint64_t>(length, it->second.size() - off);
    return std::vector<uint8_t>(it->second.begin() + off, it->second.begin() + off + n);
  }

 private:
  const PythonImage& image_;
};

// The live process's memory, every successful read noted in an image.
class RecordingMemory final : public MemoryReader {
 public:
  RecordingMemory(int pid, PythonImage& image) : live_(pid), image_(image) {}

  Result<std::vector<uint8_t>> read(uint64_t address, size_t length) const override {
    auto bytes = live_.read(address, length);
    if (bytes) image_.add(address, *bytes);
    return bytes;
  }

  std::vector<uint8_t> read_prefix(uint64_t address, size_t length) const override {
    auto bytes = live_.read_prefix(address, length);
    image_.add(address, bytes);
    return bytes;
  }

 private:
  ProcessMemory live_;
  PythonImage& image_;
};

}  // namespace hangtrace::fuzz
