// Records streamed by a LiveTracer, collected for assertions: the live
// integration tests' one collector and poll loop.
#pragma once

#include <time.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "hangtrace/abi.h"
#include "live_tracer.h"

namespace hangtrace::testing {

struct Collected {
  std::vector<std::string> records;  // raw bytes, each starting with ht_event_header
  std::vector<uint64_t> latency_ns;  // per record: CLOCK_MONOTONIC at arrival - ts_ns

  static ht_event_header header(const std::string& r) {
    ht_event_header h;
    std::memcpy(&h, r.data(), sizeof h);
    return h;
  }

  // Records of `type` (of process `tgid`, unless -1) as T.
  template <class T>
  std::vector<T> of_type(uint32_t type, int tgid = -1) const {
    std::vector<T> out;
    for (const auto& r : records) {
      ht_event_header h = header(r);
      if (h.type != type || r.size() < sizeof(T)) continue;
      if (tgid >= 0 && static_cast<int>(h.tgid) != tgid) continue;
      T rec;
      std::memcpy(&rec, r.data(), sizeof rec);
      out.push_back(rec);
    }
    return out;
  }

  size_t count_tgid(int tgid) const {
    size_t n = 0;
    for (const auto& r : records) n += static_cast<int>(header(r).tgid) == tgid;
    return n;
  }

  // "N records: type 6 x2001; type 7 x2000;"
  std::string summary() const {
    std::map<uint32_t, size_t> by_type;
    for (const auto& r : records) by_type[header(r).type]++;
    std::ostringstream os;
    os << records.size() << " records:";
    for (auto [type, n] : by_type) os << " type " << type << " x" << n << ";";
    return os.str();
  }

  // One line per record, for failure messages.
  std::string describe() const {
    std::ostringstream os;
    for (const auto& r : records) {
      ht_event_header h = header(r);
      os << "  type " << h.type << " tgid " << h.tgid << " tid " << h.tid << " comm "
         << std::string(h.comm, strnlen(h.comm, sizeof h.comm)) << "\n";
    }
    return os.str();
  }
};

inline uint64_t monotonic_now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// Polls until `done` holds (checked after every poll) or `timeout` passes;
// true when done.
inline bool poll_until(LiveTracer& t, Collected& c, const std::function<bool()>& done,
                       std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto sink = [&](const void* data, size_t size) {
    uint64_t now = monotonic_now_ns();
    c.records.emplace_back(static_cast<const char*>(data), size);
    c.latency_ns.push_back(now - Collected::header(c.records.back()).ts_ns);
  };
  for (;;) {
    if (t.poll(50, sink) < 0) return false;
    if (done()) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
  }
}

// Polls for `span` more, for records still in flight.
inline void drain(LiveTracer& t, Collected& c,
                  std::chrono::milliseconds span = std::chrono::milliseconds(300)) {
  poll_until(
      t, c, [] { return false; }, span);
}

}  // namespace hangtrace::testing
