// A FoldedProfile in speedscope's file format
// (https://www.speedscope.app/file-format-schema.json; docs/exports.md).
#include <fmt/format.h>

#include <map>
#include <utility>
#include <vector>

#include "hangtrace/exports.h"

namespace hangtrace {

nlohmann::json render_speedscope(const FoldedProfile& profile, const std::string& name,
                                 const FoldedProfile* wall_time) {
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
  json profiles = json::array();
  // One profile per thread, its stacks from frame `first` on, titled by `title_of` a stack.
  auto add_profiles = [&](const FoldedProfile& p, size_t first, auto title_of) {
    std::map<std::pair<int, int>, std::vector<const FoldedStack*>> by_thread;
    for (const auto& s : p.stacks) by_thread[{s.pid, s.tid}].push_back(&s);
    for (const auto& [key, stacks] : by_thread) {
      json samples = json::array(), weights = json::array();
      uint64_t sum = 0;
      std::string title;
      for (const FoldedStack* s : stacks) {
        json stack = json::array();
        for (size_t i = first; i < s->frames.size(); ++i) stack.push_back(frame_index(s->frames[i]));
        if (title.empty()) title = title_of(*s);
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
  };
  // Blocked time: without the process frame.
  add_profiles(profile, 1, [](const FoldedStack& s) {
    return s.frames.size() >= 2 ? fmt::format("{} in {}", s.frames[1].name, s.frames[0].name) : std::string();
  });
  // Wall time by cause: the main thread's frame first.
  if (wall_time)
    add_profiles(*wall_time, 0, [](const FoldedStack& s) {
      return s.frames.empty() ? std::string() : fmt::format("wall time by cause: {}", s.frames[0].name);
    });
  return {{"$schema", "https://www.speedscope.app/file-format-schema.json"},
          {"shared", {{"frames", frames}}},
          {"profiles", profiles},
          {"name", name},
          {"activeProfileIndex", 0},
          {"exporter", fmt::format("hangtrace {}", HANGTRACE_VERSION)}};
}

}  // namespace hangtrace
