// Wall time by cause (docs/exports.md): the stall profile's main threads as
// folded stacks -- the thread, the cause, the critical path's steps under the
// waits they ended, each step's own causes, the objects waited on, the on-CPU
// samples -- with every thread's values adding up to its window.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "common.h"
#include "hangtrace/exports.h"

namespace hangtrace {
namespace {

using namespace exports_detail;

// `total` split in parts proportional to `weights` out of `whole`: the parts
// add up to total * min(sum of weights, whole) / whole, rounded down, each
// part rounded down first and the rest handed out by largest remainder (so
// weights that make up the whole split the total exactly).
std::vector<uint64_t> apportion(uint64_t total, const std::vector<uint64_t>& weights, uint64_t whole) {
  std::vector<uint64_t> parts(weights.size(), 0);
  if (!whole || !total) return parts;
  unsigned __int128 sum = 0;
  for (uint64_t w : weights) sum += w;
  const uint64_t covered = static_cast<uint64_t>(std::min<unsigned __int128>(sum, whole));
  const uint64_t target = static_cast<uint64_t>(static_cast<unsigned __int128>(total) * covered / whole);
  std::vector<std::pair<uint64_t, size_t>> remainders;  // (remainder, index)
  uint64_t given = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    unsigned __int128 exact = static_cast<unsigned __int128>(total) * weights[i];
    parts[i] = static_cast<uint64_t>(exact / whole);
    remainders.push_back({static_cast<uint64_t>(exact % whole), i});
    given += parts[i];
  }
  if (given > target) {  // weights past the whole: scale the parts down to the target
    std::vector<uint64_t> scaled = apportion(target, parts, given);
    return scaled;
  }
  std::stable_sort(remainders.begin(), remainders.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t k = 0; given < target && k < remainders.size(); ++k, ++given) ++parts[remainders[k].second];
  return parts;
}

// A sampled frame as CpuSamples writes it -- Python "file.py:LINE func" or
// "file.py func", kernel "name_[k]", native the function (or module+0xOFF)
// -- named as the other exports name frames.
FoldedFrame sampled_frame(const std::string& text) {
  if (text.ends_with("_[k]") && text.size() > 4)
    return {clean_frame_name(text.substr(0, text.size() - 4)), FrameKind::Kernel, "", 0};
  size_t space = text.find(' ');
  if (space != std::string::npos && space > 0) {
    std::string file = text.substr(0, space);
    int line = 0;
    if (size_t colon = file.rfind(':'); colon != std::string::npos) {
      std::string digits = file.substr(colon + 1);
      if (!digits.empty() && digits.size() < 10 &&
          std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        line = std::stoi(digits);
        file.resize(colon);
      }
    }
    if (file.ends_with(".py")) {
      UserFrame f;
      f.kind = UserFrame::Kind::Python;
      f.file = file;
      f.line = line;
      f.function = text.substr(space + 1);
      return user_frame(f);
    }
  }
  return {clean_frame_name(text), FrameKind::Native, "", 0};
}

class WallBuilder {
 public:
  explicit WallBuilder(const ThreadProfile& main) : pid_(main.pid), tid_(main.tid) {}

  // A step of the path (the main thread at depth 0) whose window is drawn
  // `budget_us` wide under `frames` (which end with the step's own frame).
  void step(std::vector<FoldedFrame>& frames, const std::vector<CauseShare>& causes, uint64_t window_ns,
            const std::vector<FrameShare>& on_cpu, const std::vector<PathStep>& next, uint64_t budget_us) {
    uint64_t whole = 0;
    std::vector<uint64_t> weights;
    for (const auto& c : causes) {
      weights.push_back(c.ns);
      whole += c.ns;
    }
    whole = std::max(whole, window_ns);
    std::vector<uint64_t> parts = apportion(budget_us, weights, whole);
    uint64_t used = std::accumulate(parts.begin(), parts.end(), uint64_t{0});
    add(frames, budget_us - used);  // time the causes do not cover
    for (size_t i = 0; i < causes.size(); ++i) {
      frames.push_back(synthetic_frame(stall_cause_name(causes[i].cause)));
      cause(frames, causes[i], on_cpu, next, parts[i]);
      frames.pop_back();
    }
  }

  std::map<std::string, FoldedStack> take() { return std::move(merged_); }

 private:
  void cause(std::vector<FoldedFrame>& frames, const CauseShare& c, const std::vector<FrameShare>& on_cpu,
             const std::vector<PathStep>& next, uint64_t budget_us) {
    uint64_t left = budget_us;
    // The path steps that ended these waits, each with its own split.
    std::vector<const PathStep*> steps;
    std::vector<uint64_t> ended;
    for (const auto& s : next)
      if (s.via == c.cause && s.ended_ns) {
        steps.push_back(&s);
        ended.push_back(s.ended_ns);
      }
    std::vector<uint64_t> step_us = apportion(budget_us, ended, c.ns);
    for (size_t i = 0; i < steps.size(); ++i) {
      const PathStep& s = *steps[i];
      frames.push_back(synthetic_frame(s.label));
      step(frames, s.causes, s.window_ns, s.on_cpu_frames, s.next, step_us[i]);
      frames.pop_back();
      left -= step_us[i];
    }
    // The rest: on CPU by sampled stack, a wait by what it waited on.
    std::vector<uint64_t> leaf_us;
    if (c.cause == StallCause::OnCpu) {
      constexpr uint64_t kParts = 1'000'000'000;
      std::vector<uint64_t> shares;
      for (const auto& f : on_cpu)
        shares.push_back(static_cast<uint64_t>(std::clamp(f.share, 0.0, 1.0) * kParts));
      leaf_us = apportion(left, shares, kParts);
      for (size_t i = 0; i < on_cpu.size(); ++i) {
        size_t depth = frames.size();
        size_t from = 0;
        const std::string& st = on_cpu[i].stack;
        while (from <= st.size()) {
          size_t semi = st.find(';', from);
          if (semi == std::string::npos) semi = st.size();
          if (semi > from) frames.push_back(sampled_frame(st.substr(from, semi - from)));
          from = semi + 1;
        }
        add(frames, leaf_us[i]);
        frames.resize(depth);
      }
    } else {
      std::vector<uint64_t> object_ns;
      for (const auto& o : c.objects) object_ns.push_back(o.ns);
      // Objects describe the whole cause; what the steps took is taken from each in proportion.
      leaf_us = apportion(left, object_ns, std::max<uint64_t>(c.ns, 1));
      for (size_t i = 0; i < c.objects.size(); ++i) {
        frames.push_back(synthetic_frame(c.objects[i].what));
        add(frames, leaf_us[i]);
        frames.pop_back();
      }
    }
    for (uint64_t us : leaf_us) left -= us;
    add(frames, left);
  }

  void add(const std::vector<FoldedFrame>& frames, uint64_t us) {
    if (!us) return;
    auto [it, inserted] = merged_.try_emplace(folded_key(frames));
    if (inserted) {
      it->second.frames = frames;
      it->second.pid = pid_;
      it->second.tid = tid_;
    }
    it->second.value_us += us;
  }

  int pid_, tid_;
  std::map<std::string, FoldedStack> merged_;
};

}  // namespace

FoldedProfile build_wall_folded(const StallProfile& profile) {
  std::map<std::string, FoldedStack> merged;
  for (size_t i = 0; i < profile.mains.size(); ++i) {
    const ThreadProfile& main = profile.mains[i];
    const PathStep* path = i < profile.paths.size() ? &profile.paths[i] : nullptr;
    std::string label = path && !path->label.empty()
                            ? path->label
                            : fmt::format("{}/{}", main.comm.empty() ? "?" : main.comm, main.tid);
    std::vector<FoldedFrame> frames = {synthetic_frame(label)};
    WallBuilder b(main);
    static const std::vector<PathStep> kNoSteps;
    b.step(frames, main.causes, main.window_ns, main.on_cpu_frames, path ? path->next : kNoSteps,
           (main.window_ns + 500) / 1000);
    for (auto& [key, s] : b.take()) {
      auto [it, inserted] = merged.emplace(key, s);
      if (!inserted) it->second.value_us += s.value_us;
    }
  }
  FoldedProfile out;
  for (auto& [key, s] : merged) out.stacks.push_back(std::move(s));
  return out;
}

FlameGraphOptions wall_flamegraph_options(const std::string& target, const std::string& subtitle) {
  FlameGraphOptions fo;
  fo.title = target + ": wall time by cause";
  fo.subtitle = subtitle;
  fo.measure = "wall time";
  return fo;
}

}  // namespace hangtrace
