#include "hangtrace/cpu_samples.h"

#include <fmt/format.h>

#include <charconv>

#include "hangtrace/text.h"

namespace hangtrace {

namespace {

// ';' separates frames; control characters would break the folded text.
std::string clean(std::string s) {
  for (char& c : s)
    if (c == ';')
      c = ':';
    else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      c = ' ';
  return s;
}

}  // namespace

std::string sample_frame(const UserFrame& f) {
  if (f.kind == UserFrame::Kind::Python) {
    std::string file = f.file.empty() ? "?" : basename_of(f.file);
    std::string fn = f.function.empty() ? "?" : f.function;
    return clean(f.line > 0 ? fmt::format("{}:{} {}", file, f.line, fn) : fmt::format("{} {}", file, fn));
  }
  if (!f.function.empty()) return clean(f.function);
  if (!f.file.empty())
    return clean(fmt::format("{}+0x{:x}", basename_of(f.file), f.module_offset ? f.module_offset : f.addr));
  return fmt::format("0x{:x}", f.addr);
}

std::string kernel_sample_frame(const std::string& name, uint64_t addr) {
  return name.empty() ? fmt::format("0x{:x}_[k]", addr) : clean(name) + "_[k]";
}

std::string sample_key(const std::vector<std::string>& innermost_first) {
  std::string out;
  for (auto it = innermost_first.rbegin(); it != innermost_first.rend(); ++it) {
    if (!out.empty()) out += ';';
    out += *it;
  }
  return out.empty() ? std::string("[unknown]") : out;
}

void add_cpu_sample(CpuSamples& s, int tid, const std::string& stack, uint64_t n) {
  auto t = s.by_tid.find(tid);
  if (t == s.by_tid.end()) {
    if (s.by_tid.size() >= kMaxSampledThreads) return;  // counted in `samples` only
    t = s.by_tid.emplace(tid, std::map<std::string, uint64_t>{}).first;
  }
  auto& stacks = t->second;
  auto it = stacks.find(stack);
  if (it != stacks.end()) {
    it->second += n;
  } else if (stacks.size() < kMaxSampleStacksPerThread) {
    stacks.emplace(stack, n);
  } else {
    stacks[kOtherStack] += n;  // the bound leaves room for it: one key more at most
  }
}

std::vector<int> parse_cpu_list(std::string_view text) {
  std::vector<int> cpus;
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  if (text.empty()) return cpus;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view part = text.substr(pos, end - pos);
    pos = end + 1;
    int lo = -1, hi = -1;
    size_t dash = part.find('-');
    std::string_view a = part.substr(0, dash);
    auto r = std::from_chars(a.data(), a.data() + a.size(), lo);
    if (r.ec != std::errc() || r.ptr != a.data() + a.size()) return {};
    hi = lo;
    if (dash != std::string_view::npos) {
      std::string_view b = part.substr(dash + 1);
      r = std::from_chars(b.data(), b.data() + b.size(), hi);
      if (r.ec != std::errc() || r.ptr != b.data() + b.size()) return {};
    }
    if (lo < 0 || hi < lo || hi >= 65536) return {};
    for (int c = lo; c <= hi; ++c) cpus.push_back(c);
    if (end == text.size()) break;
  }
  return cpus;
}

}  // namespace hangtrace
