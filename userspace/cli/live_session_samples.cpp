// LiveSession's share of the on-CPU sampler (cpu_sampler.h): the samples that
// were counted by native stack get their names when the window closes, as
// the blocked intervals' stacks do, and join the Python ones in
// LiveObservation::cpu_samples.
#include <map>
#include <optional>

#include "hangtrace/cpu_samples.h"
#include "live_session.h"

namespace hangtrace {

void LiveSession::resolve_cpu_samples(LiveObservation& o, const std::vector<CpuSampler::NativeSample>& native,
                                      const UserSymbolizer& symbolize_user) {
  if (native.empty()) return;
  std::optional<KernelSymbols> symbols;
  std::map<int32_t, std::vector<std::string>> kernel_names;  // innermost first
  for (const auto& s : native) {
    std::vector<std::string> names;  // innermost first: kernel frames, then user ones
    if (s.kstack_id >= 0) {
      auto k = kernel_names.find(s.kstack_id);
      if (k == kernel_names.end()) {
        if (!symbols) {
          auto loaded = KernelSymbols::load();
          symbols = loaded ? std::move(*loaded) : KernelSymbols();
        }
        std::vector<std::string> kn;
        for (const KernelFrame& f : kernel_frames(s.kstack_id, &*symbols))
          kn.push_back(kernel_sample_frame(symbols->function(f.addr), f.addr));
        k = kernel_names.emplace(s.kstack_id, std::move(kn)).first;
      }
      names = k->second;
    }
    std::vector<UserFrame> frames = user_frames(s.tgid, s.ustack);
    if (symbolize_user && !frames.empty()) symbolize_user(frames);
    for (const UserFrame& f : frames) names.push_back(sample_frame(f));
    add_cpu_sample(o.cpu_samples, s.tid, sample_key(names), s.count);
  }
}

}  // namespace hangtrace
