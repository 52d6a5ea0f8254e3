// Native (C/C++) user stacks of blocked threads, unwound with elfutils libdw
// from the registers the BPF task snapshot saved: CFI (.eh_frame /
// .debug_frame) first, frame pointers as libdw's own fallback, and memory read
// with process_vm_readv -- the target is never ptrace-attached or stopped.
//
// What costs time is per module, not per thread: reporting a process's
// modules, opening their ELFs, loading CFI and symbol tables (libtorch_cpu.so
// alone is ~120 MB). So one NativeStackCache keeps a Dwfl per distinct set of
// executable mappings (forked DataLoader workers share their parent's) and a
// symbol cache keyed by (build-id, offset in module); it outlives a capture so
// the next one in the same hangtrace process starts warm. The names come
// from native_symbols (on elf_symbols' sorted address index).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hangtrace/model.h"

namespace hangtrace {

// Cumulative counters, for benchmarks and -vvv debugging.
struct NativeStackStats {
  uint64_t threads_unwound = 0;  // threads that got at least one frame
  uint64_t threads_failed = 0;   // attempted, no frame (see native_stack_error)
  uint64_t frames = 0;
  uint64_t frames_symbolized = 0;
  uint64_t dwfl_created = 0;  // process module maps reported from scratch
  uint64_t dwfl_reused = 0;   // processes served by an existing Dwfl
  uint64_t symbol_cache_hits = 0;
  uint64_t symbol_cache_misses = 0;
  uint64_t remote_reads = 0;  // memory words not served by the stack copy
  double report_ms = 0;       // maps + dwfl_linux_proc_report + attach
  double unwind_ms = 0;       // dwfl_getthread_frames (CFI loading included)
  double symbolize_ms = 0;    // module/build-id lookup + symbol names
};

class NativeStackCache {
 public:
  NativeStackCache();
  ~NativeStackCache();
  NativeStackCache(const NativeStackCache&) = delete;
  NativeStackCache& operator=(const NativeStackCache&) = delete;

  // Fills native_stack (or native_stack_error) of every thread of `p` that
  // was off CPU with saved user registers when the BPF snapshot ran.
  // `mem_pid` is the id whose /proc entry and memory are live (the leader's
  // pid, or a live thread's where the leader exited). Returns "" or why the
  // whole process could not be unwound ("failed to X: reason"). `maps`: its
  // mappings if the caller read them already, else they are read here.
  std::string unwind_process(ProcessInfo& p, int mem_pid, const std::vector<Mapping>* maps = nullptr);

  // Names native frames known only by module file and file offset (`file`,
  // `module_offset`: user stacks the kernel walked during live tracing, whose
  // process may be gone). Each named frame's module_offset becomes the ELF
  // virtual address, like unwound frames', and gets the build-id; the same
  // build-id symbol cache serves both. The first frame is taken as the
  // current instruction, the others as return addresses.
  void symbolize_file_frames(std::vector<UserFrame>& frames);

  NativeStackStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The one cache of this hangtrace process, shared by every capture.
NativeStackCache& process_native_stack_cache();

}  // namespace hangtrace
