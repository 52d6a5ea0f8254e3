// A FoldedProfile in speedscope's file format
// (https://www.speedscope.app/file-format-schema.json; docs/exports.md).
#include <fmt/format.h>

#include <map>
#include <utility>
#include <vector>

#include "hangtrace/exports.h"

namespace hangtrace {

nlohmann::json render_speedscope(const FoldedProfile& profile, const std::string& name) {
  using nlohmann::json;
  json frames = json::array();
  std::map<FoldedFrame, size_t> index;
  auto frame_index = [&](const FoldedFrame& f) {
    auto [it, inserted] = index.emplace(f, frames.size());
    if (inserted) {
      json fj = {{"name", f.name}};
      if (f.kind == FrameKind::Python && !f.file.empty()) {
        fj["file"] = f.file;
        if (f.line > 0) fj["line"] = f.line;
      } else if (f.kind == FrameKind::Native && !f.file.empty()) {
        fj["file"] = f.file;
      }
      frames.push_back(fj);
    }
    return it->second;
  };
  // One profile per thread: its stacks without the process frame.
  std::map<std::pair<int, int>, std::vector<const FoldedStack*>> by_thread;
  for (const auto& s : profile.stacks) by_thread[{s.pid, s.tid}].push_back(&s);
  json profiles = json::array();
  for (const auto& [key, stacks] : by_thread) {
    json samples = json::array(), weights = json::array();
    uint64_t sum = 0;
    std::string title;
    for (const FoldedStack* s : stacks) {
      json stack = json::array();
      for (size_t i = 1; i < s->frames.size(); ++i) stack.push_back(frame_index(s->frames[i]));
      if (title.empty() && s->frames.size() >= 2)
        title = fmt::format("{} in {}", s->frames[1].name, s->frames[0].name);
      samples.push_back(stack);
      weights.push_back(s->value_us);
      sum += s->value_us;
    }
    profiles.push_back({{"type", "sampled"},
                        {"name", title.empty() ? fmt::format("thread {}", key.second) : title},
                        {"unit", "microseconds"},
                        {"startValue", 0},
                        {"endValue", sum},
                        {"samples", samples},
                        {"weights", weights}});
  }
  return {{"$schema", "https://www.speedscope.app/file-format-schema.json"},
          {"shared", {{"frames", frames}}},
          {"profiles", profiles},
          {"name", name},
          {"activeProfileIndex", 0},
          {"exporter", fmt::format("hangtrace {}", HANGTRACE_VERSION)}};
}

}  // namespace hangtrace
