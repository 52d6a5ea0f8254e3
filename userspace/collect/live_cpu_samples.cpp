// The "cpu_samples" concern (bpf/cpu_samples.bpf.c): a software cpu-clock
// perf event per online CPU at LiveOptions::sample_hz, each running
// cpu_sample, which streams an HT_EV_CPU_SAMPLE when the task on the CPU is
// traced. The records go to the tracer's CpuSampler (cpu_sampler.h). Perf
// events that cannot be opened (perf_event_paranoid, a VM without the
// software clock, seccomp) leave the concern inactive with the reason.
#include <bpf/libbpf.h>
#include <fmt/format.h>
#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "hangtrace/abi.h"
#include "hangtrace/cpu_samples.h"
#include "hangtrace/text.h"
#include "cpu_samples.skel.h"
#include "live_modules.h"

namespace hangtrace {

static_assert(sizeof(ht_cpu_sample_event) == 56 + 8 * HT_SAMPLE_USER_FRAMES);
static_assert(offsetof(ht_cpu_sample_event, kstack_id) == 40);
static_assert(offsetof(ht_cpu_sample_event, ustack_len) == 48);
static_assert(offsetof(ht_cpu_sample_event, ustack) == 56);

namespace {

std::vector<int> online_cpus() {
  std::ifstream in("/sys/devices/system/cpu/online");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<int> cpus = parse_cpu_list(text);
  if (cpus.empty()) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    for (long c = 0; c < n; ++c) cpus.push_back(static_cast<int>(c));
  }
  return cpus;
}

class CpuSamplesModule : public TracerModule {
 public:
  ~CpuSamplesModule() override {
    detach();
    cpu_samples_bpf__destroy(skel_);
  }
  const char* name() const override { return "cpu_samples"; }

  Result<bool> load(const SharedMaps& maps, const LiveOptions& options) override {
    hz_ = options.sample_hz;
    on_demand_ = options.sample_on_demand;
    status_.concern = name();
    status_.program = "cpu_sample";
    status_.attach = fmt::format("perf_event/cpu-clock@{}Hz", hz_);
    if (hz_ == 0) {
      status_.attach = "perf_event/cpu-clock";
      status_.reason = "not needed: sampling is off (--sample-hz 0)";
      return true;
    }
    skel_ = cpu_samples_bpf__open();
    if (!skel_) return make_error(std::string("open: ") + std::strerror(errno));
    auto shared = maps.reuse_in(skel_->obj);
    if (!shared) return make_error(shared.error());
    if (int err = cpu_samples_bpf__load(skel_)) {
      status_.reason = "load: " + errno_text(err < 0 ? -err : err);
      cpu_samples_bpf__destroy(skel_);
      skel_ = nullptr;
    }
    return true;
  }

  Result<bool> attach() override {
    if (!skel_) return true;  // off, or not loaded: said in status_
    if (on_demand_) {
      status_.reason = "opened on demand (the daemon's on-demand profile)";
      return true;
    }
    open_events();
    return true;
  }

  Result<bool> set_cpu_sampling(bool on) override {
    if (!skel_) return make_error("the cpu_samples concern did not load: " + status_.reason);
    if (!on) {
      detach();
      status_.active = false;
      status_.reason = "opened on demand (the daemon's on-demand profile)";
      return true;
    }
    if (links_.empty()) open_events();
    if (links_.empty()) return make_error(status_.reason);
    return true;
  }

  std::vector<HookStatus> hooks() const override { return {status_}; }

 private:
  // One cpu-clock perf event per online CPU, each running cpu_sample.
  void open_events() {
    perf_event_attr attr{};
    attr.size = sizeof attr;
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_CPU_CLOCK;
    attr.freq = 1;
    attr.sample_freq = hz_;
    std::string first_error;
    for (int cpu : online_cpus()) {
      int fd = static_cast<int>(syscall(__NR_perf_event_open, &attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC));
      if (fd < 0) {
        if (first_error.empty())
          first_error = fmt::format("perf_event_open on CPU {}: {}", cpu, errno_text(errno));
        continue;
      }
      bpf_link* link = bpf_program__attach_perf_event(skel_->progs.cpu_sample, fd);
      if (!link) {
        int err = errno;
        close(fd);
        if (first_error.empty()) first_error = fmt::format("attach on CPU {}: {}", cpu, errno_text(err));
        continue;
      }
      // The link owns the fd from here (bpf_link__destroy closes it).
      links_.push_back(link);
    }
    status_.active = !links_.empty();
    if (links_.empty()) {
      status_.reason = first_error.empty() ? "no online CPU" : first_error;
    } else if (!first_error.empty()) {
      status_.reason = fmt::format("on {} CPUs; {}", links_.size(), first_error);
    } else {
      status_.reason.clear();
    }
  }

  void detach() {
    for (bpf_link* l : links_) bpf_link__destroy(l);
    links_.clear();
  }
  cpu_samples_bpf* skel_ = nullptr;
  uint32_t hz_ = 0;
  bool on_demand_ = false;
  HookStatus status_;
  std::vector<bpf_link*> links_;
};

}  // namespace

std::unique_ptr<TracerModule> make_cpu_samples_module() { return std::make_unique<CpuSamplesModule>(); }

}  // namespace hangtrace
