#include "mapped_modules.h"
#include "hangtrace/text.h"

#include <algorithm>
#include <chrono>

#include "live_cupti.h"  // kCuptiInjectionLibraryName

namespace hangtrace {

namespace {

constexpr uint64_t kMaxUntilCudaGapNs = 30'000'000'000ull;
constexpr uint64_t kMinWindowPassGapNs = 500'000'000ull;
// A pass over every traced process's maps may take this share of one core.
constexpr uint64_t kWindowPassCostDivisor = 100;

}  // namespace

ModuleKind module_kind(std::string_view path) {
  const std::string file = basename_of(path);
  if (file.starts_with("libcuda.so")) return ModuleKind::Cuda;
  if (file.starts_with("libnccl.so")) return ModuleKind::Nccl;
  if (file == kCuptiInjectionLibraryName) return ModuleKind::Cupti;
  return ModuleKind::Other;
}

bool maps_libcuda(int pid, const procfs::ProcFs& proc) {
  auto maps = proc.maps(pid);
  if (!maps) return false;
  return std::any_of(maps->begin(), maps->end(),
                     [](const Mapping& m) { return module_kind(m.path) == ModuleKind::Cuda; });
}

uint64_t MappedModules::monotonic_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

MappedModules::MappedModules(ModuleRescan rescan, Notice notice, procfs::ProcFs proc, Clock clock)
    : rescan_(rescan), notice_(std::move(notice)), proc_(std::move(proc)), clock_(std::move(clock)) {}

bool MappedModules::wanted(ModuleKind kind) const {
  switch (kind) {
    case ModuleKind::Cuda:
    case ModuleKind::Nccl:
      return true;
    case ModuleKind::Cupti:
      return rescan_ != ModuleRescan::UntilCuda;
    case ModuleKind::Other:
      break;
  }
  return false;
}

void MappedModules::note_file(int pid, const std::string& path) {
  const ModuleKind kind = module_kind(path);
  if (kind == ModuleKind::Other || !noticed_.insert({pid, path}).second) return;
  if (kind == ModuleKind::Cuda) {
    cuda_pids_.insert(pid);
    if (auto w = watched_.find(pid); w != watched_.end()) w->second.maps_cuda = true;
  }
  if (wanted(kind) && notice_) notice_(pid, path);
}

void MappedModules::read(int tgid) {
  ++maps_reads_;
  std::vector<Mapping> code;
  if (auto maps = proc_.maps(tgid)) {
    for (Mapping& m : *maps)
      if (procfs::is_executable(m)) code.push_back(std::move(m));
  }
  if (code.empty()) return;  // gone (or a kernel thread): keep what was known
  for (const Mapping& m : code)
    if (!m.path.empty() && m.path[0] == '/') note_file(tgid, m.path);
  if (rescan_ != ModuleRescan::Window) return;
  code_maps_[tgid] = std::move(code);
  if (auto tids = proc_.tids(tgid))
    for (int tid : *tids) tgid_of_[tid] = tgid;
}

void MappedModules::read_scheduled(int tgid, Watched& w, uint64_t now) {
  w.gap_ns = std::min(w.gap_ns * 2, kMaxUntilCudaGapNs);
  w.due_ns = now + w.gap_ns;
  // Mapping a library (dlopen of libcuda: tens of MiB) grows the address
  // space; the same size as at the last read is the same mappings. Taken
  // before the read: a library mapped while it reads is seen next time.
  auto statm = proc_.statm(tgid);
  if (statm && w.vm_pages && statm->size_pages == w.vm_pages) {
    ++maps_reads_skipped_;
    return;
  }
  w.vm_pages = statm ? statm->size_pages : 0;
  read(tgid);
}

void MappedModules::watch(int tgid) {
  if (tgid <= 0 || rescan_ == ModuleRescan::Manual) return;
  auto [it, added] = watched_.try_emplace(tgid);
  if (!added) return;
  if (rescan_ == ModuleRescan::UntilCuda) {
    read_scheduled(tgid, it->second, clock_());
    next_due_ns_ = std::min(next_due_ns_, it->second.due_ns);
  } else
    read(tgid);
}

void MappedModules::exec(int tgid) {
  // The daemon's schedule goes on: what matters to it is libcuda appearing.
  if (tgid <= 0 || rescan_ != ModuleRescan::Window) return;
  watched_.try_emplace(tgid);
  read(tgid);
}

void MappedModules::forget(int tgid) {
  watched_.erase(tgid);
  std::erase_if(noticed_, [&](const auto& n) { return n.first == tgid; });
  code_maps_.erase(tgid);
  std::erase_if(tgid_of_, [&](const auto& t) { return t.second == tgid; });
}

void MappedModules::refresh_due() {
  if (rescan_ == ModuleRescan::Manual) return;
  const uint64_t now = clock_();
  if (rescan_ == ModuleRescan::Window) {
    if (now - last_pass_ns_ >= pass_gap_ns_) refresh_all();
    return;
  }
  // Called after every poll of the ring buffer: with 1,000 processes
  // watched, walking them all each time cost more than the reads it found due.
  if (now < next_due_ns_) return;
  next_due_ns_ = UINT64_MAX;
  for (auto& [tgid, w] : watched_) {
    if (w.maps_cuda) continue;
    if (now >= w.due_ns) read_scheduled(tgid, w, now);
    next_due_ns_ = std::min(next_due_ns_, w.due_ns);
  }
}

void MappedModules::refresh_all() {
  if (rescan_ == ModuleRescan::Manual) return;
  const uint64_t start = clock_();
  for (const auto& [tgid, w] : watched_) read(tgid);
  last_pass_ns_ = clock_();
  pass_gap_ns_ = std::max(kMinWindowPassGapNs, (last_pass_ns_ - start) * kWindowPassCostDivisor);
}

bool MappedModules::any_maps_cuda() const {
  return std::any_of(watched_.begin(), watched_.end(), [](const auto& w) { return w.second.maps_cuda; });
}

const std::vector<Mapping>* MappedModules::code_maps(int tgid) const {
  auto it = code_maps_.find(tgid);
  return it == code_maps_.end() ? nullptr : &it->second;
}

int MappedModules::tgid_of(int tid) const {
  auto it = tgid_of_.find(tid);
  return it == tgid_of_.end() ? tid : it->second;
}

}  // namespace hangtrace
