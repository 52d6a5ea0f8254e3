// Micro-benchmark (not a test, not built by CMake): the per-record cost of the
// consumer's decode + aggregate step, fed with records laid out as the BPF
// programs write them (abi.h): futex waits, futex wakes and blocking syscalls
// of 8 threads, the mix an `--min-block-ms 0` storm produces.
//
//   g++ -std=c++20 -O2 -Iinclude bench/aggregator_rate.cpp build/libhangtrace_core.a -lfmt -o /tmp/agg
//   /tmp/agg [RECORDS]          # decode_event + Aggregator::add (every record a TraceEvent)
//   /tmp/agg [RECORDS] --raw    # Aggregator::add_raw (what LiveSession::on_record does)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

#include "hangtrace/abi.h"
#include "hangtrace/live.h"

namespace {

// CPU time of this thread: the figure holds on a busy machine too.
long long now_ns() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

template <class T>
void put(std::vector<std::vector<unsigned char>>& out, const T& r) {
  const auto* p = reinterpret_cast<const unsigned char*>(&r);
  out.emplace_back(p, p + sizeof r);
}

template <class T>
T record(uint32_t type, uint32_t tid, uint64_t ts) {
  T r;
  std::memset(&r, 0, sizeof r);
  r.hdr.type = type;
  r.hdr.size = sizeof r;
  r.hdr.ts_ns = ts;
  r.hdr.tgid = 1000;
  r.hdr.tid = tid;
  std::strncpy(r.hdr.comm, "pt_data_worker", sizeof r.hdr.comm);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  long n = 4'000'000;
  bool raw = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--raw") == 0) {
      raw = true;
    } else {
      n = std::atol(argv[i]);
    }
  }
  std::vector<std::vector<unsigned char>> recs;
  for (uint32_t i = 0; i < 4096; ++i) {
    uint32_t tid = 1000 + i % 8;
    if (i % 4 == 3) {
      auto r = record<ht_syscall_event>(HT_EV_SYSCALL_BLOCK, tid, 1'000'000 + i);
      r.nr = 0;
      r.fd = 3 + static_cast<int>(i % 5);
      r.duration_ns = 100;
      put(recs, r);
    } else {
      auto r = record<ht_futex_event>(i % 4 == 2 ? HT_EV_FUTEX_WAKE : HT_EV_FUTEX_WAIT, tid, 1'000'000 + i);
      r.uaddr = 0x7f0000001000ull + 64 * (i % 16);
      r.duration_ns = 100;
      put(recs, r);
    }
  }
  hangtrace::Aggregator agg;
  uint64_t bad = 0;
  long long t0 = now_ns();
  for (long i = 0; i < n; ++i) {
    const auto& r = recs[static_cast<size_t>(i) & 4095];
#ifdef HT_HAVE_ADD_RAW
    if (raw) {
      if (agg.add_raw(r.data(), r.size()) == hangtrace::Aggregator::Raw::Undecodable) ++bad;
      continue;
    }
#endif
    auto e = hangtrace::decode_event(r.data(), r.size());
    if (!e) {
      ++bad;
      continue;
    }
    agg.add(*e);
  }
  long long dt = now_ns() - t0;
  auto o = agg.finish(0, 1, static_cast<uint64_t>(n), 0);
  std::printf("%s: %ld records in %.3f CPU s: %.1f ns/record, %.2f M records/s (%zu threads kept, %lu bad)\n",
              raw ? "add_raw" : "decode_event+add", n, dt / 1e9, static_cast<double>(dt) / n, n / (dt / 1e3),
              o.blocked.size(), static_cast<unsigned long>(bad));
  return 0;
}
