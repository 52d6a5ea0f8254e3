// The "gpu" concern (bpf/gpu.bpf.c): host-side CUDA driver and NCCL calls,
// from uprobes on the libcuda and libnccl that traced processes map. Nothing
// is attached at start: a library is probed when a traced process is first
// seen mapping it (notice_mapped_file), which also covers the libcuda that
// PyTorch dlopen()s long after the process started.
#include <bpf/bpf.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <set>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "elf_symbols.h"
#include "gpu.skel.h"
#include "hangtrace/abi.h"
#include "hangtrace/gpu.h"
#include "hangtrace/procfs.h"
#include "live_modules.h"
#include "mapped_modules.h"

namespace hangtrace {

static_assert(sizeof(ht_gpu_call_event) == 104);
static_assert(offsetof(ht_gpu_call_event, fn) == 40);
static_assert(offsetof(ht_gpu_call_event, start_ns) == 48);
static_assert(offsetof(ht_gpu_call_event, seq) == 80);
static_assert(offsetof(ht_gpu_call_event, ustack_id) == 96);
static_assert(sizeof(ht_gpu_thread) == 168);
static_assert(offsetof(ht_gpu_thread, launches) == 32);
static_assert(offsetof(ht_gpu_thread, last_collective_fn) == 96);
static_assert(offsetof(ht_gpu_thread, nccl_group_depth) == 104);
static_assert(offsetof(ht_gpu_thread, in_count) == 112);
static_assert(offsetof(ht_gpu_thread, in_ustack_id) == 128);
static_assert(offsetof(ht_gpu_thread, comm) == 136);

namespace {

// Threads that ever called CUDA or NCCL, across all traced processes.
constexpr uint32_t kGpuThreadEntries = 16384;

struct GpuFunction {
  const char* name;
  uint64_t cookie;
};

// HT_GPU_COOKIE(fn, stream, count, count_shift, handle, datatype, peer/root),
// argument positions as in cuda.h and nccl.h. The _ptsz / _ptds twins are what
// code built for the per-thread default stream calls.
constexpr uint64_t kLaunch = HT_GPU_COOKIE(HT_GPU_LAUNCH_KERNEL, 9, 0, 0, 0, 0, 0);
constexpr uint64_t kLaunchEx =
    HT_GPU_COOKIE(HT_GPU_LAUNCH_KERNEL_EX, 0, 0, 0, 0, 0, 0) | HT_GPU_COOKIE_STREAM_IN_CONFIG;
constexpr uint64_t kLaunchCooperative = HT_GPU_COOKIE(HT_GPU_LAUNCH_COOPERATIVE, 9, 0, 0, 0, 0, 0);
constexpr uint64_t kStreamSync = HT_GPU_COOKIE(HT_GPU_STREAM_SYNCHRONIZE, 1, 0, 0, 0, 0, 0);
constexpr uint64_t kStreamWaitEvent = HT_GPU_COOKIE(HT_GPU_STREAM_WAIT_EVENT, 1, 0, 0, 2, 0, 0);
constexpr uint64_t kMemcpy = HT_GPU_COOKIE(HT_GPU_MEMCPY, 0, 3, 0, 0, 0, 0);
constexpr uint64_t kMemcpyAsync = HT_GPU_COOKIE(HT_GPU_MEMCPY_ASYNC, 4, 3, 0, 0, 0, 0);
constexpr uint64_t kMemcpyPeer = HT_GPU_COOKIE(HT_GPU_MEMCPY, 0, 5, 0, 0, 0, 0);
constexpr uint64_t kMemcpyPeerAsync = HT_GPU_COOKIE(HT_GPU_MEMCPY_ASYNC, 6, 5, 0, 0, 0, 0);
constexpr uint64_t memset_cookie(int shift) { return HT_GPU_COOKIE(HT_GPU_MEMSET, 0, 3, shift, 0, 0, 0); }
constexpr uint64_t memset_async_cookie(int shift) {
  return HT_GPU_COOKIE(HT_GPU_MEMSET_ASYNC, 4, 3, shift, 0, 0, 0);
}
// (sendbuff, recvbuff, count, datatype, op, comm, stream) and kin.
constexpr uint64_t kAllReduce = HT_GPU_COOKIE(HT_GPU_NCCL_ALL_REDUCE, 7, 3, 0, 6, 4, 0);
constexpr uint64_t point_to_point_cookie(uint32_t fn) { return HT_GPU_COOKIE(fn, 6, 2, 0, 5, 3, 4); }

const GpuFunction kFunctions[] = {
    {"cuLaunchKernel", kLaunch},
    {"cuLaunchKernel_ptsz", kLaunch},
    {"cuLaunchKernelEx", kLaunchEx},
    {"cuLaunchKernelEx_ptsz", kLaunchEx},
    {"cuLaunchCooperativeKernel", kLaunchCooperative},
    {"cuLaunchCooperativeKernel_ptsz", kLaunchCooperative},
    {"cuCtxSynchronize", HT_GPU_COOKIE(HT_GPU_CTX_SYNCHRONIZE, 0, 0, 0, 0, 0, 0)},
    // CUDA 13: cuCtxSynchronize_v2(CUcontext).
    {"cuCtxSynchronize_v2", HT_GPU_COOKIE(HT_GPU_CTX_SYNCHRONIZE, 0, 0, 0, 1, 0, 0)},
    {"cuStreamSynchronize", kStreamSync},
    {"cuStreamSynchronize_ptsz", kStreamSync},
    {"cuEventSynchronize", HT_GPU_COOKIE(HT_GPU_EVENT_SYNCHRONIZE, 0, 0, 0, 1, 0, 0)},
    {"cuStreamWaitEvent", kStreamWaitEvent},
    {"cuStreamWaitEvent_ptsz", kStreamWaitEvent},
    {"cuMemcpy", kMemcpy},
    {"cuMemcpy_ptds", kMemcpy},
    {"cuMemcpyHtoD_v2", kMemcpy},
    {"cuMemcpyHtoD_v2_ptds", kMemcpy},
    {"cuMemcpyDtoH_v2", kMemcpy},
    {"cuMemcpyDtoH_v2_ptds", kMemcpy},
    {"cuMemcpyDtoD_v2", kMemcpy},
    {"cuMemcpyDtoD_v2_ptds", kMemcpy},
    {"cuMemcpyPeer", kMemcpyPeer},
    {"cuMemcpyPeer_ptds", kMemcpyPeer},
    {"cuMemcpyAsync", kMemcpyAsync},
    {"cuMemcpyAsync_ptsz", kMemcpyAsync},
    {"cuMemcpyHtoDAsync_v2", kMemcpyAsync},
    {"cuMemcpyHtoDAsync_v2_ptsz", kMemcpyAsync},
    {"cuMemcpyDtoHAsync_v2", kMemcpyAsync},
    {"cuMemcpyDtoHAsync_v2_ptsz", kMemcpyAsync},
    {"cuMemcpyDtoDAsync_v2", kMemcpyAsync},
    {"cuMemcpyDtoDAsync_v2_ptsz", kMemcpyAsync},
    {"cuMemcpyPeerAsync", kMemcpyPeerAsync},
    {"cuMemcpyPeerAsync_ptsz", kMemcpyPeerAsync},
    {"cuMemsetD8_v2", memset_cookie(0)},
    {"cuMemsetD8_v2_ptds", memset_cookie(0)},
    {"cuMemsetD16_v2", memset_cookie(1)},
    {"cuMemsetD16_v2_ptds", memset_cookie(1)},
    {"cuMemsetD32_v2", memset_cookie(2)},
    {"cuMemsetD32_v2_ptds", memset_cookie(2)},
    {"cuMemsetD8Async", memset_async_cookie(0)},
    {"cuMemsetD8Async_ptsz", memset_async_cookie(0)},
    {"cuMemsetD16Async", memset_async_cookie(1)},
    {"cuMemsetD16Async_ptsz", memset_async_cookie(1)},
    {"cuMemsetD32Async", memset_async_cookie(2)},
    {"cuMemsetD32Async_ptsz", memset_async_cookie(2)},
    {"ncclAllReduce", kAllReduce},
    // (sendbuff, recvbuff, count, datatype, root, comm, stream)
    {"ncclBroadcast", HT_GPU_COOKIE(HT_GPU_NCCL_BROADCAST, 7, 3, 0, 6, 4, 5)},
    // (buff, count, datatype, root, comm, stream)
    {"ncclBcast", HT_GPU_COOKIE(HT_GPU_NCCL_BROADCAST, 6, 2, 0, 5, 3, 4)},
    // (sendbuff, recvbuff, count, datatype, op, root, comm, stream)
    {"ncclReduce", HT_GPU_COOKIE(HT_GPU_NCCL_REDUCE, 8, 3, 0, 7, 4, 6)},
    // (sendbuff, recvbuff, sendcount, datatype, comm, stream)
    {"ncclAllGather", HT_GPU_COOKIE(HT_GPU_NCCL_ALL_GATHER, 6, 3, 0, 5, 4, 0)},
    // (sendbuff, recvbuff, recvcount, datatype, op, comm, stream)
    {"ncclReduceScatter", HT_GPU_COOKIE(HT_GPU_NCCL_REDUCE_SCATTER, 7, 3, 0, 6, 4, 0)},
    // (buff, count, datatype, peer, comm, stream)
    {"ncclSend", point_to_point_cookie(HT_GPU_NCCL_SEND)},
    {"ncclRecv", point_to_point_cookie(HT_GPU_NCCL_RECV)},
    {"ncclGroupStart", HT_GPU_COOKIE(HT_GPU_NCCL_GROUP_START, 0, 0, 0, 0, 0, 0)},
    {"ncclGroupEnd", HT_GPU_COOKIE(HT_GPU_NCCL_GROUP_END, 0, 0, 0, 0, 0, 0)},
};

// Which of kFunctions `file` defines in its .dynsym (what a caller
// resolves; a stripped library has no .symtab anyway).
Result<std::unordered_set<std::string>> defined_functions(const std::string& file) {
  auto elf = elf::ElfFile::open(file);
  if (!elf) return make_error(elf.error());
  std::vector<std::string> wanted;
  for (const GpuFunction& f : kFunctions) wanted.emplace_back(f.name);
  std::unordered_set<std::string> names;
  for (auto& [name, sym] : elf->find_symbols(elf::Tables::Dynsym, wanted, [](const elf::Symbol& sym) {
         return sym.defined() && sym.is_function();
       }))
    names.insert(name);
  return names;
}

// pid -1: every process mapping the file; the programs keep to the traced ones.
bpf_link* attach_uprobe(bpf_program* prog, const std::string& file, const GpuFunction& f, bool retprobe) {
  bpf_uprobe_opts opts{};
  opts.sz = sizeof(opts);
  opts.bpf_cookie = f.cookie;
  opts.retprobe = retprobe;
  opts.func_name = f.name;
  return bpf_program__attach_uprobe_opts(prog, -1, file.c_str(), 0, &opts);
}

class GpuModule : public TracerModule {
 public:
  // Each uprobe's removal waits for a grace period (~0.1 s here, serialized
  // in the kernel): a real libcuda's ~90 hold the teardown for seconds.
  ~GpuModule() override {
    for (auto& lib : libraries_)
      for (bpf_link* link : lib.links) bpf_link__destroy(link);
    gpu_bpf__destroy(skel_);
  }
  const char* name() const override { return "gpu"; }

  Result<bool> load(const SharedMaps& maps, const LiveOptions& options) override {
    skel_ = gpu_bpf__open();
    if (!skel_) return make_error(std::string("failed to open the gpu programs: ") + std::strerror(errno));
    auto shared = maps.reuse_in(skel_->obj);
    if (!shared) return make_error(shared.error());
    skel_->rodata->ht_wakeup_bytes = options.wakeup_bytes;
    skel_->rodata->ht_min_block_ns = options.min_block_ns;
    bpf_map__set_max_entries(skel_->maps.gpu_threads, kGpuThreadEntries);
    if (int err = gpu_bpf__load(skel_))
      return make_error(fmt::format("failed to load the gpu programs: {}", std::strerror(-err)));
    return true;
  }

  // Nothing to attach before a traced process is seen mapping a library.
  Result<bool> attach() override { return true; }

  std::vector<HookStatus> hooks() const override {
    std::vector<HookStatus> out;
    if (libraries_.empty()) {
      HookStatus h;
      h.concern = "gpu";
      h.program = "gpu_call_enter";
      h.attach = "uprobe:libcuda.so*,libnccl.so*";
      h.reason = "standby: no traced process maps libcuda or libnccl (yet)";
      out.push_back(std::move(h));
    }
    for (const auto& lib : libraries_) {
      HookStatus h;
      h.concern = "gpu";
      h.program = "gpu_call_enter";
      h.attach = fmt::format("uprobe:{} ({} functions)", lib.path, lib.functions);
      h.active = lib.functions > 0;
      h.reason = lib.error;
      out.push_back(std::move(h));
    }
    return out;
  }

  void notice_mapped_file(int pid, const std::string& path) override {
    const ModuleKind kind = module_kind(path);
    if (!skel_ || (kind != ModuleKind::Cuda && kind != ModuleKind::Nccl)) return;
    // As the process sees it: it may live in another mount namespace.
    std::string file = procfs::ProcFs().root_path(pid, path);
    auto id = procfs::stat_file(file);
    if (!id) return;  // gone, or " (deleted)": nothing to probe
    // One library is probed once, for every process that maps it.
    if (!seen_.insert(*id).second) return;

    Library lib;
    lib.path = path;
    auto names = defined_functions(file);
    if (!names) {
      lib.error = names.error();
      libraries_.push_back(std::move(lib));
      return;
    }
    int failed = 0;
    std::string first_error;
    for (const GpuFunction& f : kFunctions) {
      if (!names->count(f.name)) continue;
      // Both or neither, the return first: a call that enters between the
      // two attachments then has its return seen and its entry not (ignored),
      // never the other way round, which would leave the thread "in" the
      // call (the job runs while the probes go in).
      bpf_link* ret = attach_uprobe(skel_->progs.gpu_call_return, file, f, true);
      bpf_link* enter = ret ? attach_uprobe(skel_->progs.gpu_call_enter, file, f, false) : nullptr;
      if (!enter) {
        if (first_error.empty())
          first_error = fmt::format("{}{}: {}", f.name, ret ? "" : " (return)", std::strerror(errno));
        bpf_link__destroy(ret);
        ++failed;
        continue;
      }
      lib.links.push_back(enter);
      lib.links.push_back(ret);
      ++lib.functions;
    }
    if (lib.functions == 0 && failed == 0)
      lib.error = "none of the CUDA / NCCL functions probed is defined here";
    if (failed) lib.error = fmt::format("{} functions failed to attach, first {}", failed, first_error);
    libraries_.push_back(std::move(lib));
  }

  void contribute(LiveObservation& o) const override {
    for (const auto& lib : libraries_)
      o.gpu.libraries.push_back(fmt::format("{}: {} uprobes", lib.path, lib.functions));
    if (!skel_) return;
    int fd = bpf_map__fd(skel_->maps.gpu_threads);
    uint32_t key = 0, next = 0;
    uint32_t* prev = nullptr;
    while (bpf_map_get_next_key(fd, prev, &next) == 0) {
      key = next;
      prev = &key;
      ht_gpu_thread t{};
      if (bpf_map_lookup_elem(fd, &key, &t) != 0) continue;
      GpuThreadState s;
      s.pid = static_cast<int>(t.tgid);
      s.tid = static_cast<int>(key);
      s.comm = std::string(t.comm, strnlen(t.comm, sizeof t.comm));
      s.in_fn = t.in_fn;
      s.in_since_ns = t.in_fn ? t.in_since_ns : 0;
      s.in_stream = t.in_fn ? t.in_stream : 0;
      s.in_handle = t.in_fn ? t.in_handle : 0;
      s.launches = t.launches;
      s.last_launch_ns = t.last_launch_ns;
      s.syncs = t.syncs;
      s.last_sync_end_ns = t.last_sync_end_ns;
      s.collectives = t.collectives;
      s.last_collective_ns = t.last_collective_ns;
      s.last_collective_count = t.last_collective_count;
      s.last_collective_comm = t.last_collective_comm;
      s.last_collective_fn = t.last_collective_fn;
      s.last_collective_datatype = t.last_collective_datatype;
      s.nccl_group_depth = t.nccl_group_depth;
      o.gpu.threads.push_back(std::move(s));
    }
  }

 private:
  struct Library {
    std::string path;  // as the traced process maps it
    std::vector<bpf_link*> links;
    int functions = 0;  // probed at entry and return
    std::string error;
  };
  gpu_bpf* skel_ = nullptr;
  std::set<procfs::FileId> seen_;
  std::vector<Library> libraries_;
};

}  // namespace

std::unique_ptr<TracerModule> make_gpu_module() { return std::make_unique<GpuModule>(); }

}  // namespace hangtrace
