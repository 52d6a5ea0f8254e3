#include "cpu_sampler.h"

#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <cstring>

#include "hangtrace/cpu_samples.h"
#include "python_stacks.h"

namespace hangtrace {

namespace {

uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

CpuSampler::CpuSampler(uint32_t hz, std::string proc_root) : hz_(hz), fs_(std::move(proc_root)) {
  counted_.hz = hz_;
  worker_ = std::thread([this] { run(); });
  // Named, so that top -H and the benchmark tell its CPU from the consumer's.
  pthread_setname_np(worker_.native_handle(), "ht-py-sampler");
}

CpuSampler::~CpuSampler() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    queue_.clear();
  }
  cv_.notify_one();
  if (worker_.joinable()) worker_.join();
}

void CpuSampler::add(const void* data, size_t size) {
  if (size < sizeof(ht_cpu_sample_event)) return;
  // The fields the walk needs, not the whole record.
  ht_cpu_sample_event e;
  std::memcpy(&e, data, sizeof e);
  Sample s;
  s.tgid = static_cast<int>(e.hdr.tgid);
  s.tid = static_cast<int>(e.hdr.tid);
  s.kstack_id = e.kstack_id;
  s.ustack_len = std::min<uint32_t>(e.ustack_len, HT_SAMPLE_USER_FRAMES);
  std::memcpy(s.ustack, e.ustack, s.ustack_len * sizeof(uint64_t));
  {
    std::lock_guard lock(mu_);
    if (stop_) return;
    if (queue_.size() >= kQueueSamples) {
      ++overflow_;
      return;
    }
    queue_.push_back(s);
  }
  cv_.notify_one();
}

void CpuSampler::forget(int tgid) {
  std::lock_guard lock(mu_);
  forgotten_.push_back(tgid);
}

void CpuSampler::run() {
  std::vector<Sample> batch;
  std::vector<int> forgotten;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty() && stop_) return;
      batch.assign(queue_.begin(), queue_.end());
      queue_.clear();
      forgotten.swap(forgotten_);
    }
    for (int tgid : forgotten) processes_.erase(tgid);
    forgotten.clear();
    for (const Sample& s : batch) count(s, monotonic_ns());
  }
}

void CpuSampler::count(const Sample& s, uint64_t now_ns) {
  ++counted_.samples;
  Process& p = processes_[s.tgid];
  if (!p.python && now_ns >= p.retry_ns) {
    auto opened = PythonThreadStacks::open(fs_, s.tgid);
    if (opened) {
      p.python = std::move(*opened);
    } else {
      p.backoff_ns = p.backoff_ns ? std::min(2 * p.backoff_ns, kMaxRetryOpenNs) : kRetryOpenNs;
      p.retry_ns = now_ns + p.backoff_ns;
    }
  }
  if (p.python) {
    if (now_ns - window_start_ns_ >= 1'000'000'000ull) {
      window_start_ns_ = now_ns;
      window_walks_ = 0;
    }
    if (window_walks_ >= kMaxWalksPerSecond) {
      ++counted_.unreadable;
      return;
    }
    ++window_walks_;
    auto frames = p.python->stack(s.tid, now_ns);
    if (frames && !frames->empty()) {
      std::vector<std::string> names;
      names.reserve(frames->size());
      for (const UserFrame& f : *frames) names.push_back(sample_frame(f));
      add_cpu_sample(counted_, s.tid, sample_key(names));
      return;
    }
    // No thread state (a native pool thread), no Python frame, or a walk
    // that failed: what the kernel saw.
  }
  count_native(s);
}

void CpuSampler::count_native(const Sample& s) {
  if (s.ustack_len == 0 && s.kstack_id < 0) {
    ++counted_.unreadable;
    return;
  }
  auto it = native_.find(s.tid);
  if (it == native_.end()) {
    if (native_.size() >= kMaxSampledThreads) {
      ++counted_.unreadable;
      return;
    }
    it = native_.emplace(s.tid, std::make_pair(s.tgid, std::map<NativeKey, uint64_t>{})).first;
  }
  auto& counts = it->second.second;
  NativeKey key{s.kstack_id, std::vector<uint64_t>(s.ustack, s.ustack + s.ustack_len)};
  auto c = counts.find(key);
  if (c != counts.end()) {
    ++c->second;
  } else if (counts.size() < kMaxSampleStacksPerThread && native_keys_ < kMaxNativeStacks) {
    counts.emplace(std::move(key), 1);
    ++native_keys_;
  } else {
    add_cpu_sample(counted_, s.tid, kOtherStack);
  }
}

CpuSampler::Taken CpuSampler::take() {
  Taken out;
  if (taken_) return out;
  taken_ = true;
  {
    std::lock_guard lock(mu_);
    stop_ = true;  // the worker counts what is queued, then returns
  }
  cv_.notify_one();
  if (worker_.joinable()) worker_.join();
  {
    std::lock_guard lock(mu_);
    counted_.samples += overflow_;
    counted_.unreadable += overflow_;
  }
  out.samples = std::move(counted_);
  for (auto& [tid, entry] : native_)
    for (auto& [key, n] : entry.second) out.native.push_back({entry.first, tid, key.first, key.second, n});
  native_.clear();
  processes_.clear();
  return out;
}

}  // namespace hangtrace
