// The libraries live concerns attach to inside the traced processes -- the
// uprobes on libcuda and libnccl (live_gpu.cpp), the USDT probe of
// hangtrace's CUPTI injection library (live_cupti.cpp) -- found by the live
// tracer itself in /proc/PID/maps (through procfs.h), when they are mapped:
// CUDA is initialised a while after start, often in a worker, and PyTorch
// dlopen()s libcuda late. In the live window it also keeps each traced
// process's executable mappings and threads, which user stack addresses are
// resolved against after the process is gone.
//
// No libbpf here: what is found goes to a callback (LiveTracer hands it to
// its concerns), so the discovery is unit-tested on fixture maps files.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hangtrace/model.h"
#include "hangtrace/procfs.h"

namespace hangtrace {

// What a concern attaches to, told by the file name: libcuda.so.1 or
// libcuda.so.570.86.15; libnccl.so.2 (also the copy a PyTorch wheel carries
// in nvidia/nccl/lib), not libnccl-net.so and the like; and
// libhangtrace_cupti.so (kCuptiInjectionLibraryName).
enum class ModuleKind { Other, Cuda, Nccl, Cupti };
ModuleKind module_kind(std::string_view path);

// Whether `pid` maps libcuda now (any of its mappings).
bool maps_libcuda(int pid, const procfs::ProcFs& proc = procfs::ProcFs());

// When the tracer reads the traced processes' mappings (LiveOptions::module_rescan).
enum class ModuleRescan {
  // Never by itself: files come in by hand (LiveTracer::notice_mapped_file),
  // as in the concerns' tests and a tracer started only to list its hooks.
  Manual,
  // The live window (LiveSession): a process when it is traced, forks or
  // execs, and every traced process again every 500 ms -- rarer when a pass
  // would take over 1 % of a core (a PyTorch process's maps take ~3 ms to
  // read). Every module kind; executable mappings and threads are kept.
  Window,
  // The daemon: a process when it is traced or forked, then again at
  // doubling intervals (0.5 s up to 30 s) until it maps libcuda: every
  // process's maps on every scan would cost a steady ~0.1 % of a core per
  // process. A due read whose process's address space has the size it had
  // at the last read (/proc/PID/statm, a few us against ~2 ms for a
  // PyTorch process's maps) is skipped: mapping a library grows it, and an
  // idle process's stays put (1,000 idle processes' maps every 30 s were
  // ~5 % of a core). libcuda and libnccl only: the steady state records no
  // GPU activity, so the CUPTI probe would cost the job for nothing.
  UntilCuda,
};

class MappedModules {
 public:
  // A module file `pid` maps, with its path as that process sees it (open
  // it through ProcFs::root_path); called once per (process, file).
  using Notice = std::function<void(int pid, const std::string& path)>;
  using Clock = std::function<uint64_t()>;  // CLOCK_MONOTONIC ns
  static uint64_t monotonic_ns();

  MappedModules(ModuleRescan rescan, Notice notice, procfs::ProcFs proc = procfs::ProcFs(),
                Clock clock = monotonic_ns);

  // A traced process (at start, traced later, forked): read now, unless it
  // is watched already.
  void watch(int tgid);
  // Its image was replaced (exec): the live window reads it again now.
  void exec(int tgid);
  // No longer traced: forgotten (a reused pid is another process).
  void forget(int tgid);
  // Reads what the rescan policy says is due (the tracer calls it on each poll).
  void refresh_due();
  // Every watched process, now: the live window's last look at the living.
  void refresh_all();
  // A file `pid` maps executable, found by a read or handed in by hand:
  // libcuda makes `pid` a CUDA process, and a module kind of the policy goes
  // to the notice callback, once per (pid, path).
  void note_file(int pid, const std::string& path);

  ModuleRescan rescan() const { return rescan_; }
  // Processes ever seen mapping libcuda (gone ones included).
  const std::set<int>& cuda_pids() const { return cuda_pids_; }
  // Whether a watched process maps libcuda.
  bool any_maps_cuda() const;
  // Window: a process's executable mappings at its last read that found
  // any (kept after it exits); null when never read.
  const std::vector<Mapping>* code_maps(int tgid) const;
  // Window: the process a thread belonged to when its process was read; the
  // tid itself when unknown.
  int tgid_of(int tid) const;
  uint64_t maps_reads() const { return maps_reads_; }
  // UntilCuda: due reads skipped, the address space's size unchanged.
  uint64_t maps_reads_skipped() const { return maps_reads_skipped_; }

 private:
  struct Watched {
    uint64_t due_ns = 0;            // UntilCuda: the next read
    uint64_t gap_ns = 250'000'000;  // UntilCuda: doubled at each read
    uint64_t vm_pages = 0;          // UntilCuda: statm's size at the last read (0: unknown)
    bool maps_cuda = false;
  };
  void read(int tgid);
  void read_scheduled(int tgid, Watched& w, uint64_t now);
  bool wanted(ModuleKind kind) const;

  ModuleRescan rescan_;
  Notice notice_;
  procfs::ProcFs proc_;
  Clock clock_;
  std::map<int, Watched> watched_;
  std::set<std::pair<int, std::string>> noticed_;  // (pid, path) given to notice_
  std::set<int> cuda_pids_;
  std::map<int, std::vector<Mapping>> code_maps_;  // Window: tgid -> executable mappings
  std::map<int, int> tgid_of_;                     // Window: tid -> tgid
  uint64_t last_pass_ns_ = 0;                      // Window: the last pass over every process
  uint64_t pass_gap_ns_ = 500'000'000;
  uint64_t next_due_ns_ = 0;  // UntilCuda: no read is due before (0: unknown)
  uint64_t maps_reads_ = 0, maps_reads_skipped_ = 0;
};

}  // namespace hangtrace
