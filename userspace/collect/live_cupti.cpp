// The "cupti" concern: one USDT attachment per injection library file (any
// process that maps it; the BPF program keeps the traced ones), made when a
// traced process is seen mapping it, so a job started with
// CUDA_INJECTION64_PATH is covered from its cuInit on.
#include "live_cupti.h"

#include <bpf/libbpf.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <utility>
#include <vector>

#include "cupti.skel.h"
#include "hangtrace/abi.h"
#include "hangtrace/procfs.h"
#include "live_modules.h"
#include "mapped_modules.h"

namespace hangtrace {

static_assert(sizeof(ht_gpu_activity_event) == sizeof(ht_event_header) + sizeof(ht_gpu_activity));

namespace {

bool regular_file(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

class CuptiModule : public TracerModule {
 public:
  ~CuptiModule() override {
    for (Attached& a : attached_) bpf_link__destroy(a.link);
    cupti_bpf__destroy(skel_);
  }
  const char* name() const override { return "cupti"; }

  Result<bool> load(const SharedMaps& maps, const LiveOptions& options) override {
    skel_ = cupti_bpf__open();
    if (!skel_) return make_error(fmt::format("failed to open cupti: {}", std::strerror(errno)));
    auto shared = maps.reuse_in(skel_->obj);
    if (!shared) return make_error(shared.error());
    skel_->rodata->ht_wakeup_bytes = options.wakeup_bytes;
    if (int err = cupti_bpf__load(skel_)) {
      cupti_bpf__destroy(skel_);
      skel_ = nullptr;
      return make_error(fmt::format("failed to load cupti: {}", std::strerror(err < 0 ? -err : err)));
    }
    return true;
  }

  // Nothing to attach until a traced process maps the library.
  Result<bool> attach() override { return true; }

  void notice_mapped_file(int pid, const std::string& path) override {
    if (!skel_ || module_kind(path) != ModuleKind::Cupti) return;
    // Through the process's root: it may live in another mount namespace.
    std::string host_path = procfs::ProcFs().root_path(pid, path);
    auto file = procfs::stat_file(host_path);
    if (!file) return;  // gone already: another process mapping it tries again
    if (!files_.insert(*file).second) return;
    Attached a;
    a.path = path;
    a.link = bpf_program__attach_usdt(skel_->progs.cupti_gpu_activity, -1, host_path.c_str(), "hangtrace",
                                      "gpu_activity", nullptr);
    if (!a.link) a.error = std::strerror(errno);
    attached_.push_back(std::move(a));
  }

  std::vector<HookStatus> hooks() const override {
    std::vector<HookStatus> out;
    for (const Attached& a : attached_) {
      HookStatus h;
      h.concern = "cupti";
      h.program = "cupti_gpu_activity";
      h.attach = fmt::format("usdt:{}:hangtrace:gpu_activity", a.path);
      h.active = a.link != nullptr;
      if (!h.active) h.reason = "attach failed: " + a.error + " (no GPU activity from this library)";
      out.push_back(std::move(h));
    }
    if (out.empty()) {
      HookStatus h;
      h.concern = "cupti";
      h.program = "cupti_gpu_activity";
      h.attach = "usdt:libhangtrace_cupti.so:hangtrace:gpu_activity";
      h.reason =
          "standby: no traced process loaded hangtrace's CUPTI injection library (launch mode sets "
          "CUDA_INJECTION64_PATH)";
      out.push_back(std::move(h));
    }
    return out;
  }

  void contribute(LiveObservation& o) const override {
    for (const Attached& a : attached_) {
      o.gpu.libraries.push_back(a.link ? fmt::format("{}: USDT hangtrace:gpu_activity", a.path)
                                       : fmt::format("{}: USDT attach failed: {}", a.path, a.error));
    }
  }

 private:
  struct Attached {
    std::string path;  // as the process that mapped it first sees it
    bpf_link* link = nullptr;
    std::string error;
  };
  cupti_bpf* skel_ = nullptr;
  std::set<procfs::FileId> files_;  // attached or tried
  std::vector<Attached> attached_;
};

}  // namespace

std::optional<std::string> find_cupti_injection_library(const std::string& exe_path) {
  size_t slash = exe_path.rfind('/');
  if (slash == std::string::npos) return std::nullopt;
  std::string bindir = exe_path.substr(0, slash);
  std::string lib = kCuptiInjectionLibraryName;
  for (const std::string& candidate : {bindir + "/lib/" + lib, bindir + "/../lib/hangtrace/" + lib}) {
    if (!regular_file(candidate)) continue;
    char resolved[PATH_MAX];
    if (realpath(candidate.c_str(), resolved)) return std::string(resolved);
    return candidate;
  }
  return std::nullopt;
}

std::optional<std::string> find_cupti_injection_library() {
  auto exe = procfs::ProcFs().self_exe();
  if (!exe || exe->empty()) return std::nullopt;
  return find_cupti_injection_library(*exe);
}

std::unique_ptr<TracerModule> make_cupti_module() { return std::make_unique<CuptiModule>(); }

}  // namespace hangtrace
