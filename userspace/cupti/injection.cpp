// hangtrace's CUPTI injection library (CUDA_INJECTION64_PATH): the CUDA
// driver loads it at cuInit and calls InitializeInjection. It hands CUPTI
// activity records, on CLOCK_MONOTONIC, to the USDT probe
// hangtrace:gpu_activity, which bpf/cupti.bpf.c copies into hangtrace's ring
// buffer.
//
// Costs ~nothing while no hangtrace is attached: the probe has a semaphore,
// which the kernel raises in every process mapping this library while a
// uprobe is on it, and CUPTI activity is enabled only while it is raised (a
// thread looks every half second). A process without a GPU gets at most one
// line on stderr, never a crash or an abort.
#include <cupti.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "hangtrace/gpu_clock.h"
#include "records.h"

#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

#define HT_EXPORT extern "C" __attribute__((visibility("default")))

// Named as sys/sdt.h expects (<provider>_<probe>_semaphore); the kernel
// counts attached uprobes in it. Exported so that tests can wait for it.
extern "C" {
__extension__ unsigned short hangtrace_gpu_activity_semaphore __attribute__((unused))
__attribute__((section(".probes"))) __attribute__((visibility("default")));
}

namespace hangtrace::cupti {
namespace {

constexpr uint32_t kFlushPeriodMs = 1000;
constexpr auto kSemaphorePoll = std::chrono::milliseconds(500);
constexpr size_t kBufferBytes = 4u << 20;
constexpr int kReadingsPerCalibration = 7;

struct ActivityKind {
  CUpti_ActivityKind kind;
  const char* name;
};
constexpr std::array<ActivityKind, 6> kKinds = {{
    {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, "CONCURRENT_KERNEL"},
    {CUPTI_ACTIVITY_KIND_MEMCPY, "MEMCPY"},
    {CUPTI_ACTIVITY_KIND_MEMSET, "MEMSET"},
    {CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, "SYNCHRONIZATION"},
    {CUPTI_ACTIVITY_KIND_DRIVER, "DRIVER"},
    {CUPTI_ACTIVITY_KIND_RUNTIME, "RUNTIME"},
}};

// Never destroyed: exit handlers and CUPTI's own threads may still use it
// while static destructors run.
struct State {
  std::mutex mu;  // clock, enabled
  GpuClock clock;
  bool enabled = false;
  bool thread_id_type_set = false;
  std::mutex watch_mu;
  std::condition_variable watch_cv;
  bool stopping = false;
  std::thread watcher;
  pid_t owner = 0;  // the process that started the watcher (a fork child has none)
  std::atomic<bool> complained{false};
};
State& state() {
  static State* s = new State();
  return *s;
}

bool attached() { return __atomic_load_n(&hangtrace_gpu_activity_semaphore, __ATOMIC_RELAXED) != 0; }

void fire(const ht_gpu_activity& a) {
  if (attached()) STAP_PROBE1(hangtrace, gpu_activity, &a);
}

std::string result_string(CUptiResult r) {
  const char* s = nullptr;
  if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || !s) return "CUPTI error " + std::to_string(r);
  return s;
}

// One line per process: a job without a GPU must not fill its log.
void complain(const std::string& what) {
  if (state().complained.exchange(true)) return;
  std::fprintf(stderr, "hangtrace-cupti: %s\n", what.c_str());
}

uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// Takes a few bracketed readings, adds the tightest to the clock and reports
// it. Caller holds mu.
void calibrate(State& s) {
  std::array<ClockReading, kReadingsPerCalibration> readings{};
  size_t n = 0;
  for (auto& r : readings) {
    r.mono_before_ns = monotonic_ns();
    CUptiResult res = cuptiGetTimestamp(&r.cupti_ns);
    r.mono_after_ns = monotonic_ns();
    if (res != CUPTI_SUCCESS) break;
    ++n;
  }
  auto best = tightest_reading(std::span<const ClockReading>(readings.data(), n));
  if (!best) return;
  s.clock.add(*best);
  fire(clock_record(*best));
}

void enable(State& s) {
  if (!s.thread_id_type_set) {
    // ht_gpu_activity.tid is a gettid() id, as in every other record.
    s.thread_id_type_set = cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM) == CUPTI_SUCCESS;
  }
  calibrate(s);
  for (const ActivityKind& k : kKinds) {
    CUptiResult r = cuptiActivityEnable(k.kind);
    if (r != CUPTI_SUCCESS) {
      std::string why = std::string("cuptiActivityEnable(") + k.name + ") failed: " + result_string(r);
      fire(status_record(why));
      complain(why);
      for (const ActivityKind& undo : kKinds) {
        if (undo.kind == k.kind) break;
        cuptiActivityDisable(undo.kind);
      }
      // Not retried: a process whose CUPTI refuses once refuses every time.
      s.enabled = false;
      return;
    }
  }
  s.enabled = true;
  fire(status_record(
      "CUPTI activity enabled (kernel, memcpy, memset, synchronization, driver, runtime; flush " +
      std::to_string(kFlushPeriodMs) + " ms)"));
}

void disable(State& s) {
  for (const ActivityKind& k : kKinds) cuptiActivityDisable(k.kind);
  s.enabled = false;
}

void watch() {
  State& s = state();
  bool refused = false;
  std::unique_lock<std::mutex> lock(s.watch_mu);
  while (!s.stopping) {
    s.watch_cv.wait_for(lock, kSemaphorePoll, [&] { return s.stopping; });
    if (s.stopping) break;
    bool want = attached();
    bool flush = false;
    {
      std::lock_guard<std::mutex> g(s.mu);
      if (want && !s.enabled && !refused) {
        enable(s);
        refused = !s.enabled;
      } else if (!want && s.enabled) {
        disable(s);
        flush = true;
      } else if (!want) {
        refused = false;  // a later hangtrace may try again
      }
    }
    // Frees what CUPTI still holds (nobody listens now); outside mu, which
    // the buffer callback takes, possibly on this very thread.
    if (flush) cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  }
}

void at_exit() {
  State& s = state();
  if (s.owner != getpid() || !s.watcher.joinable()) return;
  {
    std::lock_guard<std::mutex> g(s.watch_mu);
    s.stopping = true;
  }
  s.watch_cv.notify_all();
  s.watcher.join();
  bool enabled;
  {
    std::lock_guard<std::mutex> g(s.mu);
    enabled = s.enabled;
  }
  // The last second of activity, which a hang investigation wants most.
  if (enabled) cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
}

}  // namespace
}  // namespace hangtrace::cupti

using namespace hangtrace::cupti;

// CUPTI's buffer callbacks, exported so that tests can drive the real path
// with records they build (CUPTI walks any well-formed buffer).
HT_EXPORT void CUPTIAPI hangtrace_cupti_buffer_requested(uint8_t** buffer, size_t* size,
                                                         size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

HT_EXPORT void CUPTIAPI hangtrace_cupti_buffer_completed(CUcontext context, uint32_t stream_id,
                                                         uint8_t* buffer, size_t /*size*/,
                                                         size_t valid_size) {
  State& s = state();
  if (buffer && valid_size > 0 && attached()) {
    std::lock_guard<std::mutex> g(s.mu);
    // Each buffer recalibrates: CUPTI's clock is CLOCK_REALTIME, which NTP slews and steps.
    calibrate(s);
    CUpti_Activity* record = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid_size, &record) == CUPTI_SUCCESS) {
      if (auto a = convert_record(*record, s.clock)) fire(*a);
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(context, stream_id, &dropped) == CUPTI_SUCCESS && dropped > 0)
      fire(status_record("CUPTI dropped " + std::to_string(dropped) + " records (buffers full)"));
  }
  std::free(buffer);
}

HT_EXPORT int InitializeInjection(void) {
  State& s = state();
  {
    std::lock_guard<std::mutex> g(s.watch_mu);
    if (s.watcher.joinable()) return 1;  // the driver calls it once; a test may call it again
  }
  CUptiResult r =
      cuptiActivityRegisterCallbacks(hangtrace_cupti_buffer_requested, hangtrace_cupti_buffer_completed);
  if (r != CUPTI_SUCCESS) {
    complain("cuptiActivityRegisterCallbacks failed: " + result_string(r) + "; GPU activity is not traced");
    return 1;  // never fail the job's cuInit
  }
  // Records reach hangtrace within about a second even when buffers stay small.
  r = cuptiActivityFlushPeriod(kFlushPeriodMs);
  if (r != CUPTI_SUCCESS) complain("cuptiActivityFlushPeriod failed: " + result_string(r));
  s.owner = getpid();
  try {
    std::lock_guard<std::mutex> g(s.watch_mu);
    s.watcher = std::thread(watch);
  } catch (const std::exception& e) {
    complain(std::string("cannot start the attach watcher: ") + e.what());
    return 1;
  }
  pthread_setname_np(s.watcher.native_handle(), "hangtrace-cupti");
  std::atexit(at_exit);
  return 1;
}
