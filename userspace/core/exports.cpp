#include "hangtrace/exports.h"

#include "hangtrace/text.h"
#include "hangtrace/stacks.h"
#include "hangtrace/abi.h"
#include "hangtrace/gpu.h"


#include <cstdlib>
#include <string_view>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

namespace hangtrace {
namespace {

using nlohmann::json;

// Folded text uses ';' between frames and a newline between stacks.
std::string clean(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) out += c == ';' ? ':' : (c == '\n' || c == '\r' || c == '\t') ? ' ' : c;
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out.empty() ? "?" : out;
}

std::string basename_of(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

FoldedFrame synthetic(const std::string& name) { return {clean(name), FrameKind::Synthetic, "", 0}; }

FoldedFrame user_frame(const UserFrame& f) {
  FoldedFrame out;
  out.kind = f.kind == UserFrame::Kind::Python ? FrameKind::Python : FrameKind::Native;
  out.file = f.file;
  out.line = f.line;
  if (f.kind == UserFrame::Kind::Python) {
    std::string fn = f.function.empty() ? "?" : f.function;
    out.name = f.file.empty() ? clean(fn)
               : f.line > 0   ? clean(fmt::format("{} ({}:{})", fn, basename_of(f.file), f.line))
                              : clean(fmt::format("{} ({})", fn, basename_of(f.file)));
  } else if (!f.function.empty()) {
    out.name = clean(f.function);
  } else if (!f.file.empty()) {
    out.name =
        clean(fmt::format("{}+0x{:x}", basename_of(f.file), f.module_offset ? f.module_offset : f.addr));
  } else {
    out.name = fmt::format("0x{:x}", f.addr);
  }
  return out;
}

std::string folded_key(const std::vector<FoldedFrame>& frames) {
  std::string key;
  for (size_t i = 0; i < frames.size(); ++i) {
    if (i) key += ';';
    key += frames[i].name;
  }
  return key;
}

// Who a thread is, from the snapshot or else from what was seen live.
struct Who {
  int pid = 0;
  std::string process_comm = "?", thread_comm = "?";
  bool in_snapshot = false;
};

class Identities {
 public:
  Identities(const Snapshot& snap, const LiveObservation* live) : snap_(snap), live_(live) {
    for (const auto& p : snap.processes)
      for (const auto& t : p.threads)
        by_tid_[t.tid] = {p.pid, p.comm.empty() ? "?" : p.comm, t.comm.empty() ? "?" : t.comm, true};
  }
  Who of(int tid) const {
    if (auto it = by_tid_.find(tid); it != by_tid_.end()) return it->second;
    Who w;
    w.pid = tid;
    if (live_) {
      for (const auto& [wakee, e] : live_->last_waker) {
        if (wakee == tid && e.tgid) {
          w.pid = e.tgid;
          if (!e.comm.empty()) w.thread_comm = e.comm;
        }
        if (e.waker_tid == tid && e.waker_tgid) {
          w.pid = e.waker_tgid;
          if (!e.waker_comm.empty()) w.thread_comm = e.waker_comm;
        }
      }
      for (const auto& d : live_->deaths)
        if (d.pid == tid && !d.comm.empty() && w.thread_comm == "?") w.thread_comm = d.comm;
    }
    w.process_comm = process_comm(w.pid);
    if (w.pid == tid && w.thread_comm == "?") w.thread_comm = w.process_comm;
    return w;
  }
  std::string process_comm(int pid) const {
    if (const ProcessInfo* p = snap_.process(pid); p && !p->comm.empty()) return p->comm;
    if (live_) {
      if (auto it = live_->meta.find(pid); it != live_->meta.end() && !it->second.comm.empty())
        return it->second.comm;
      for (const auto& d : live_->deaths)
        if (d.pid == pid && !d.comm.empty()) return d.comm;
      if (auto it = live_->last_waker.find(pid); it != live_->last_waker.end() && !it->second.comm.empty())
        return it->second.comm;
    }
    return "?";
  }

 private:
  const Snapshot& snap_;
  const LiveObservation* live_;
  std::map<int, Who> by_tid_;
};

// A thread counts as blocked now when the analysis says it waits (or, without
// one, when the kernel has it off CPU and not runnable).
std::optional<double> current_blocked_s(const ThreadInfo& t, const Diagnosis* d, const ThreadWait** wait) {
  *wait = nullptr;
  if (d) {
    auto it = d->graph.threads.find(t.tid);
    if (it == d->graph.threads.end()) return std::nullopt;
    *wait = &it->second;
    Activity a = it->second.activity;
    if (a == Activity::Running || a == Activity::Dead || a == Activity::Unknown) return std::nullopt;
    return it->second.blocked_s;
  }
  if (!t.kernel || t.kernel->on_cpu || t.state == 'R' || t.state == 'Z' || t.state == 'X')
    return std::nullopt;
  return static_cast<double>(t.kernel->off_cpu_ns) / 1e9;
}

std::string waker_frame_name(const TraceEvent& e) {
  if (e.waker_tgid == 0 && e.waker_tid == 0) return "interrupt";
  return fmt::format("{}/{}", e.waker_comm.empty() ? (e.waker_tgid == 0 ? "interrupt" : "?") : e.waker_comm,
                     e.waker_tid);
}

FoldedFrame kernel_frame(const KernelFrame& k) {
  std::string name =
      k.symbol.empty() ? fmt::format("0x{:x}", k.addr) : k.symbol.substr(0, k.symbol.find('+'));
  return {clean(name), FrameKind::Kernel, "", 0};
}

// x86 and arm64 entry points of hard and soft interrupts.
bool is_interrupt_entry(std::string_view fn) {
  return fn.starts_with("asm_sysvec_") || fn.starts_with("asm_common_interrupt") ||
         fn.starts_with("common_interrupt") || fn == "handle_softirqs" || fn == "__do_softirq" ||
         fn == "irq_exit_rcu" || fn.starts_with("el1_interrupt") || fn.starts_with("el0_interrupt");
}

// The frames of a live stack id, innermost first; empty when it was not resolved.
template <typename Map, typename Key>
const auto* live_stack(const Map& stacks, const Key& key) {
  auto it = stacks.find(key);
  return it == stacks.end() ? nullptr : &it->second;
}

uint32_t fnv1a(const std::string& s) {
  uint32_t h = 2166136261u;
  for (unsigned char c : s) h = (h ^ c) * 16777619u;
  return h;
}

// Deterministic colours: the hue says the kind, the name varies the shade.
std::string frame_colour(const FoldedFrame& f) {
  uint32_t h = fnv1a(f.name);
  double a = (h & 0xffff) / 65535.0, b = (h >> 16) / 65535.0;
  int r = 0, g = 0, bl = 0;
  switch (f.kind) {
    case FrameKind::Kernel:  // orange
      r = 235 + static_cast<int>(20 * a), g = 135 + static_cast<int>(55 * b),
      bl = 30 + static_cast<int>(30 * a);
      break;
    case FrameKind::Native:  // red
      r = 205 + static_cast<int>(50 * a), g = 60 + static_cast<int>(60 * b),
      bl = 55 + static_cast<int>(25 * a);
      break;
    case FrameKind::Python:  // green
      r = 70 + static_cast<int>(50 * a), g = 175 + static_cast<int>(55 * b),
      bl = 85 + static_cast<int>(40 * a);
      break;
    case FrameKind::Synthetic:  // lavender blue
      r = 140 + static_cast<int>(40 * a), g = 150 + static_cast<int>(40 * a),
      bl = 215 + static_cast<int>(40 * b);
      break;
  }
  return fmt::format("rgb({},{},{})", r, g, bl);
}

struct Node {
  FoldedFrame frame;
  uint64_t value = 0;
  std::map<std::string, Node> children;  // by name: flame graphs sort siblings alphabetically
};

constexpr const char* kFlameScript = R"JS(
(function () {
  var svg = document.documentElement;
  var PAD = +svg.getAttribute('data-pad'), IW = +svg.getAttribute('data-iw'), CW = 7;
  var frames = Array.prototype.slice.call(document.querySelectorAll('g.f'));
  var details = document.getElementById('details');
  var unzoomBtn = document.getElementById('unzoom');
  var matched = document.getElementById('matched');
  var input = document.getElementById('search');
  function label(g, w) {
    var n = g.getAttribute('data-n'), c = Math.floor((w - 6) / CW);
    if (c < 3) return '';
    return n.length <= c ? n : n.substr(0, c - 2) + '..';
  }
  function place(g, x, w) {
    var r = g.querySelector('rect'), t = g.querySelector('text');
    r.setAttribute('x', x.toFixed(2));
    r.setAttribute('width', Math.max(w, 0).toFixed(2));
    t.setAttribute('x', (x + 3).toFixed(2));
    t.textContent = label(g, w);
  }
  function num(g, k) { return +g.getAttribute('data-' + k); }
  function zoom(target) {
    var x0 = num(target, 'x'), w0 = num(target, 'w'), d0 = num(target, 'd'), eps = 1e-9;
    frames.forEach(function (g) {
      var x = num(g, 'x'), w = num(g, 'w'), d = num(g, 'd');
      if (d < d0 && x <= x0 + eps && x + w >= x0 + w0 - eps) {
        g.style.display = ''; g.classList.add('parent'); place(g, PAD, IW);
      } else if (d >= d0 && x >= x0 - eps && x + w <= x0 + w0 + eps) {
        g.style.display = ''; g.classList.remove('parent');
        place(g, PAD + (x - x0) / w0 * IW, w / w0 * IW);
      } else {
        g.style.display = 'none';
      }
    });
    unzoomBtn.style.opacity = 1;
  }
  function unzoom() {
    frames.forEach(function (g) {
      g.style.display = ''; g.classList.remove('parent');
      place(g, PAD + num(g, 'x') * IW, num(g, 'w') * IW);
    });
    unzoomBtn.style.opacity = 0.2;
  }
  function search(term) {
    var re = null;
    if (term) { try { re = new RegExp(term); } catch (e) { re = new RegExp(term.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')); } }
    var spans = [];
    frames.forEach(function (g) {
      var r = g.querySelector('rect');
      if (!r.hasAttribute('data-c')) r.setAttribute('data-c', r.getAttribute('fill'));
      if (re && re.test(g.getAttribute('data-n'))) {
        r.setAttribute('fill', 'rgb(230,0,230)');
        spans.push([num(g, 'x'), num(g, 'x') + num(g, 'w')]);
      } else {
        r.setAttribute('fill', r.getAttribute('data-c'));
      }
    });
    spans.sort(function (a, b) { return a[0] - b[0]; });
    var total = 0, end = -1;
    spans.forEach(function (s) {
      if (s[0] >= end) { total += s[1] - s[0]; end = s[1]; }
      else if (s[1] > end) { total += s[1] - end; end = s[1]; }
    });
    matched.textContent = re ? 'Matched: ' + (100 * total).toFixed(1) + '%' : '';
  }
  frames.forEach(function (g) {
    g.addEventListener('click', function () { zoom(g); });
    g.addEventListener('mouseover', function () { details.textContent = g.querySelector('title').textContent; });
    g.addEventListener('mouseout', function () { details.textContent = ' '; });
  });
  unzoomBtn.addEventListener('click', unzoom);
  if (input) {
    input.addEventListener('input', function () { search(input.value); });
    input.addEventListener('keydown', function (e) { if (e.key === 'Escape') { input.value = ''; search(''); } });
  }
  window.addEventListener('keydown', function (e) {
    if (input && (e.ctrlKey || e.metaKey) && e.key === 'f') { e.preventDefault(); input.focus(); }
  });
})();
)JS";

}  // namespace

const char* frame_kind_name(FrameKind k) {
  switch (k) {
    case FrameKind::Synthetic:
      return "hangtrace";
    case FrameKind::Python:
      return "python";
    case FrameKind::Native:
      return "native";
    case FrameKind::Kernel:
      return "kernel";
  }
  return "hangtrace";
}

uint64_t FoldedProfile::total_us() const {
  uint64_t total = 0;
  for (const auto& s : stacks) total += s.value_us;
  return total;
}

FoldedProfile build_folded(const Snapshot& snap, const Diagnosis* d, const LiveObservation* live) {
  Identities ids(snap, live);
  struct Entry {
    FoldedStack stack;
    uint64_t start_ns = 0, end_ns = 0;  // live intervals only
    bool current = false;
    bool has_waker = false;
  };
  std::map<int, std::vector<Entry>> per_tid;

  for (const auto& p : snap.processes) {
    FoldedFrame process = synthetic(fmt::format("{}/{}", p.comm.empty() ? "?" : p.comm, p.pid));
    for (const auto& t : p.threads) {
      const ThreadWait* w = nullptr;
      std::optional<double> blocked = current_blocked_s(t, d, &w);
      if (!blocked) continue;
      Entry e;
      e.current = true;
      e.stack.pid = p.pid;
      e.stack.tid = t.tid;
      e.stack.value_us = static_cast<uint64_t>(std::llround(*blocked * 1e6));
      if (snap.sampled_at_monotonic_ns) {  // when the wait began, on the live clock
        uint64_t back = static_cast<uint64_t>(*blocked * 1e9);
        e.start_ns = back < snap.sampled_at_monotonic_ns ? snap.sampled_at_monotonic_ns - back : 0;
      }
      auto& fr = e.stack.frames;
      fr.push_back(process);
      fr.push_back(synthetic(fmt::format("{}/{}", t.comm.empty() ? "?" : t.comm, t.tid)));
      // Root first: the merged user stack outermost to innermost, then the kernel's.
      std::vector<UserFrame> user = merged_user_stack(t);
      for (auto it = user.rbegin(); it != user.rend(); ++it) fr.push_back(user_frame(*it));
      bool kernel_frames = false;
      if (t.kernel)
        for (auto it = t.kernel->stack.rbegin(); it != t.kernel->stack.rend(); ++it) {
          if (it->symbol.empty() && it->addr == 0) continue;
          fr.push_back(kernel_frame(*it));
          kernel_frames = true;
        }
      // No kernel stack (no BPF, or it could not be read): the wait itself is the leaf.
      if (!kernel_frames && w)
        fr.push_back(synthetic(!w->summary.empty()        ? w->summary
                               : !w->syscall_text.empty() ? w->syscall_text
                                                          : std::string(activity_name(w->activity))));
      per_tid[t.tid].push_back(std::move(e));
    }
  }

  if (live) {
    for (const auto& [tid, intervals] : live->blocked) {
      Who who = ids.of(tid);
      for (const auto& b : intervals) {
        if (b.end_ns <= b.start_ns) continue;
        Entry e;
        e.stack.pid = who.pid;
        e.stack.tid = tid;
        e.stack.value_us = (b.end_ns - b.start_ns + 500) / 1000;
        e.start_ns = b.start_ns;
        e.end_ns = b.end_ns;
        auto& fr = e.stack.frames;
        fr = {synthetic(fmt::format("{}/{}", who.process_comm, who.pid)),
              synthetic(fmt::format("{}/{}", who.thread_comm, tid))};
        // Root first: the user stack of the call, then the kernel's where it
        // slept; the wait itself is the leaf only when no kernel stack says it.
        if (const auto* user = live_stack(live->user_stacks, std::make_pair(tid, b.ustack_id)))
          for (auto it = user->rbegin(); it != user->rend(); ++it) fr.push_back(user_frame(*it));
        const auto* kernel = live_stack(live->kernel_stacks, b.kstack_id);
        if (kernel)
          for (auto it = kernel->rbegin(); it != kernel->rend(); ++it) fr.push_back(kernel_frame(*it));
        if (!kernel || kernel->empty()) fr.push_back(synthetic(b.what));
        per_tid[tid].push_back(std::move(e));
      }
    }
    // offwaketime's layout: after "--" the waker's kernel stack, then its
    // user stack, both innermost first, then the waker itself.
    auto add_waker = [&](Entry& target, const TraceEvent& ev, bool earlier) {
      auto& fr = target.stack.frames;
      fr.push_back(synthetic("--"));
      // A wakeup from interrupt context (a timer, a packet) has "woken by"
      // whatever task the interrupt hit: the kernel stack shows the
      // interrupt, and that task's user stack means nothing here.
      bool in_interrupt = ev.waker_tgid == 0;
      if (const auto* kernel = live_stack(live->kernel_stacks, ev.kstack_id))
        for (const auto& k : *kernel) {
          FoldedFrame f = kernel_frame(k);
          in_interrupt = in_interrupt || is_interrupt_entry(f.name);
          fr.push_back(std::move(f));
        }
      if (!in_interrupt)
        if (const auto* user = live_stack(live->user_stacks, std::make_pair(ev.waker_tid, ev.ustack_id)))
          for (const auto& f : *user) fr.push_back(user_frame(f));
      fr.push_back(
          synthetic((earlier ? "earlier: " : "") + (in_interrupt ? "interrupt" : waker_frame_name(ev))));
      target.has_waker = true;
    };
    // Every live wait a recorded wakeup fell into was ended by it.
    for (const auto& [tid, wakeups] : live->recent_wakeups) {
      auto it = per_tid.find(tid);
      if (it == per_tid.end()) continue;
      for (auto& e : it->second) {
        if (e.current) continue;
        for (auto w = wakeups.rbegin(); w != wakeups.rend(); ++w)
          if (e.start_ns <= w->ts_ns && w->ts_ns <= e.end_ns) {
            add_waker(e, *w, false);
            break;
          }
      }
    }
    // The last waker of a thread goes on the wait it ended (unless placed
    // above): the live interval around it, else the last one before it,
    // else the current wait -- marked "earlier:" when the wakeup came before
    // that wait began (it ended a shorter wait).
    for (const auto& [tid, ev] : live->last_waker) {
      auto it = per_tid.find(tid);
      if (it == per_tid.end()) continue;
      Entry* target = nullptr;
      for (auto& e : it->second)
        if (!e.current && e.start_ns <= ev.ts_ns && ev.ts_ns <= e.end_ns) target = &e;
      if (!target)
        for (auto& e : it->second)
          if (!e.current && e.end_ns <= ev.ts_ns && (!target || e.end_ns >= target->end_ns)) target = &e;
      if (!target)
        for (auto& e : it->second)
          if (e.current) target = &e;
      if (!target || target->has_waker) continue;
      bool earlier = target->current && target->start_ns && ev.ts_ns < target->start_ns;
      add_waker(*target, ev, earlier);
    }
  }

  std::map<std::string, FoldedStack> merged;
  for (auto& [tid, entries] : per_tid)
    for (auto& e : entries) {
      if (e.stack.value_us == 0) continue;
      std::string key = folded_key(e.stack.frames);
      auto [it, inserted] = merged.emplace(key, e.stack);
      if (!inserted) it->second.value_us += e.stack.value_us;
    }
  FoldedProfile out;
  for (auto& [key, s] : merged) out.stacks.push_back(std::move(s));
  return out;
}

std::string render_folded(const FoldedProfile& profile) {
  std::string out;
  for (const auto& s : profile.stacks) out += fmt::format("{} {}\n", folded_key(s.frames), s.value_us);
  return out;
}

std::string render_flamegraph_svg(const FoldedProfile& profile, const FlameGraphOptions& opt) {
  Node root;
  root.frame = synthetic("all");
  int max_depth = 0;
  for (const auto& s : profile.stacks) {
    Node* n = &root;
    n->value += s.value_us;
    int depth = 0;
    for (const auto& f : s.frames) {
      Node& child = n->children[f.name + '\x1f' + frame_kind_name(f.kind)];
      if (child.frame.name.empty()) child.frame = f;
      child.value += s.value_us;
      n = &child;
      max_depth = std::max(max_depth, ++depth);
    }
  }
  const int pad = 10, top = 64, bottom = 42, fh = opt.frame_height;
  const int width = std::max(opt.width, 200);
  const double iw = width - 2.0 * pad;
  const int height = top + (max_depth + 1) * fh + bottom;
  const double total = root.value ? static_cast<double>(root.value) : 1.0;

  std::string out;
  out += R"(<?xml version="1.0" standalone="no"?>)"
         "\n";
  out += fmt::format(
      R"(<svg version="1.1" width="{w}" height="{h}" viewBox="0 0 {w} {h}" data-pad="{pad}" data-iw="{iw}" )"
      R"(xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink">)"
      "\n",
      fmt::arg("w", width), fmt::arg("h", height), fmt::arg("pad", pad), fmt::arg("iw", iw));
  out += R"(<style type="text/css">
  text { font-family: "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 12px; fill: #000; }
  g.f { cursor: pointer; }
  g.f:hover rect { stroke: #000; stroke-width: 0.5; }
  g.f text { pointer-events: none; }
  g.parent rect { opacity: 0.55; }
  #title { font-size: 17px; }
  #unzoom { cursor: pointer; opacity: 0.2; }
</style>
)";
  out += fmt::format(R"(<rect x="0" y="0" width="{}" height="{}" fill="#f8f8f8"/>)"
                     "\n",
                     width, height);
  out += fmt::format(R"(<text id="title" x="{}" y="22" text-anchor="middle">{}</text>)"
                     "\n",
                     width / 2, xml_escape(opt.title));
  if (!opt.subtitle.empty()) {
    // At most one line across the graph; the whole text is in the tooltip.
    size_t max_chars = static_cast<size_t>(std::max(10.0, iw / 7.6));
    std::string shown = utf8_length(opt.subtitle) <= max_chars
                            ? opt.subtitle
                            : utf8_prefix(opt.subtitle, max_chars - 3) + "...";
    out += fmt::format(R"(<text x="{}" y="40" text-anchor="middle" fill="#555"><title>{}</title>{}</text>)"
                       "\n",
                       width / 2, xml_escape(opt.subtitle), xml_escape(shown));
  }
  out += fmt::format(R"(<text id="unzoom" x="{}" y="22">Reset zoom</text>)"
                     "\n",
                     pad);
  out += fmt::format(
      R"SVG(<foreignObject x="{}" y="6" width="230" height="26"><input xmlns="http://www.w3.org/1999/xhtml" id="search" type="text" placeholder="search (regex, Ctrl-F)" style="width:220px;font:12px monospace"/></foreignObject>)SVG"
      "\n",
      width - pad - 230);
  out += fmt::format(R"(<text id="matched" x="{}" y="{}" text-anchor="end"> </text>)"
                     "\n",
                     width - pad, height - 22);
  out += fmt::format(R"(<text id="details" x="{}" y="{}"> </text>)"
                     "\n",
                     pad, height - 22);
  out += fmt::format(
      R"(<text x="{}" y="{}" fill="#777" font-size="10">)"
      R"(kernel: orange, native: red, Python: green, hangtrace: blue; width = blocked time</text>)"
      "\n",
      pad, height - 6);

  // Depth-first, children in name order: x is the fraction of the total before the frame.
  struct Item {
    const Node* node;
    double x;
    int depth;
  };
  std::vector<Item> todo{{&root, 0.0, 0}};
  out += "<g id=\"frames\">\n";
  while (!todo.empty()) {
    Item it = todo.back();
    todo.pop_back();
    const Node& n = *it.node;
    double w = static_cast<double>(n.value) / total;
    if (w * iw < opt.min_width_px) continue;
    double px = pad + it.x * iw, pw = w * iw;
    double y = height - bottom - (it.depth + 1) * fh;
    std::string name = n.frame.name;
    std::string tip = fmt::format("{} [{}] ({} µs, {:.2f}%)", name, frame_kind_name(n.frame.kind), n.value,
                                  100.0 * static_cast<double>(n.value) / total);
    size_t chars = pw > 6 ? static_cast<size_t>((pw - 6) / 7) : 0;
    std::string text = chars < 3                    ? ""
                       : utf8_length(name) <= chars ? name
                                                    : utf8_prefix(name, chars - 2) + "..";
    out += fmt::format(
        R"(<g class="f" data-x="{:.9f}" data-w="{:.9f}" data-d="{}" data-n="{}"><title>{}</title>)"
        R"(<rect x="{:.2f}" y="{:.1f}" width="{:.2f}" height="{}" fill="{}" rx="2" ry="2"/>)"
        R"(<text x="{:.2f}" y="{:.1f}">{}</text></g>)"
        "\n",
        it.x, w, it.depth, xml_escape(name), xml_escape(tip), px, y, pw, fh - 1, frame_colour(n.frame),
        px + 3, y + fh - 4.5, xml_escape(text));
    double cx = it.x;
    std::vector<Item> kids;
    for (const auto& [key, child] : n.children) {
      kids.push_back({&child, cx, it.depth + 1});
      cx += static_cast<double>(child.value) / total;
    }
    for (auto k = kids.rbegin(); k != kids.rend(); ++k) todo.push_back(*k);
  }
  out += "</g>\n";
  out += "<script type=\"text/ecmascript\"><![CDATA[";
  out += kFlameScript;
  out += "]]></script>\n</svg>\n";
  return out;
}

json render_speedscope(const FoldedProfile& profile, const std::string& name) {
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

// GPU work on (device, stream) tracks -- pid kTraceGpuPidBase + device, tid
// stream + 1 -- with a flow from each launch (the CUDA API call on its host
// thread) to the kernel or copy it started, as Kineto draws them (category
// "ac2g", id = CUPTI correlation id); host CUDA/NCCL calls seen by the uprobes
// on their threads; NVML utilization and power as counters on the device.
template <typename Track, typename TrackOf, typename AddSlice>
void add_gpu_tracks(const LiveObservation& live, const Identities& ids, json& events, Track& track,
                    TrackOf& track_of, AddSlice& add_slice) {
  auto process_comm = [&](int pid) { return ids.process_comm(pid); };
  auto thread_comm = [&](int tid) { return ids.of(tid).thread_comm; };
  const GpuObservation& g = live.gpu;
  auto us = [](uint64_t ns) { return static_cast<double>(ns) / 1000.0; };
  std::map<uint32_t, const GpuActivity*> launches;  // correlation id -> API call
  for (const auto& a : g.activity) {
    if (a.kind != HT_GPU_ACT_DRIVER_API && a.kind != HT_GPU_ACT_RUNTIME_API) continue;
    if (a.end_ns < a.start_ns || !a.tid) continue;
    int pid = a.pid ? a.pid : track_of(a.tid);
    track(pid, a.tid, process_comm(pid), thread_comm(a.tid));
    add_slice(pid, a.tid, us(a.start_ns), us(a.end_ns - a.start_ns), a.name,
              a.kind == HT_GPU_ACT_DRIVER_API ? "cuda_driver" : "cuda_runtime",
              {{"correlation", a.correlation_id}, {"cbid", a.detail}, {"source", "cupti"}});
    if (a.correlation_id) launches[a.correlation_id] = &a;
  }
  for (const auto& a : g.activity) {
    if (a.kind != HT_GPU_ACT_KERNEL && a.kind != HT_GPU_ACT_MEMCPY && a.kind != HT_GPU_ACT_MEMSET) continue;
    if (a.end_ns < a.start_ns) continue;
    int pid = kTraceGpuPidBase + static_cast<int>(a.device_id);
    int tid = static_cast<int>(a.stream_id) + 1;
    track(pid, 0, fmt::format("GPU {}", a.device_id), "device");
    track(pid, tid, fmt::format("GPU {}", a.device_id), fmt::format("stream {}", a.stream_id));
    json args = {{"device", a.device_id},
                 {"stream", a.stream_id},
                 {"context", a.context_id},
                 {"correlation", a.correlation_id},
                 {"source", "cupti"}};
    std::string name = a.name;
    const char* cat = "kernel";
    if (a.kind == HT_GPU_ACT_KERNEL) {
      name = demangle(a.name);
      args["grid"] = {a.grid[0], a.grid[1], a.grid[2]};
      args["block"] = {a.block[0], a.block[1], a.block[2]};
      if (name != a.name) args["mangled"] = a.name;
    } else {
      cat = a.kind == HT_GPU_ACT_MEMCPY ? "gpu_memcpy" : "gpu_memset";
      args["bytes"] = a.bytes;
      if (name.empty()) name = a.kind == HT_GPU_ACT_MEMCPY ? "Memcpy" : "Memset";
    }
    double ts = us(a.start_ns);
    add_slice(pid, tid, ts, us(a.end_ns - a.start_ns), name, cat, std::move(args));
    auto launch = launches.find(a.correlation_id);
    if (a.correlation_id == 0 || launch == launches.end()) continue;
    const GpuActivity& api = *launch->second;
    int api_pid = api.pid ? api.pid : track_of(api.tid);
    events.push_back({{"ph", "s"},
                      {"name", "ac2g"},
                      {"cat", "ac2g"},
                      {"id", a.correlation_id},
                      {"pid", api_pid},
                      {"tid", api.tid},
                      {"ts", us(api.start_ns)}});
    events.push_back({{"ph", "f"},
                      {"bp", "e"},
                      {"name", "ac2g"},
                      {"cat", "ac2g"},
                      {"id", a.correlation_id},
                      {"pid", pid},
                      {"tid", tid},
                      {"ts", ts}});
  }
  for (const auto& c : g.calls) {
    int pid = c.pid ? c.pid : track_of(c.tid);
    track(pid, c.tid, process_comm(pid), c.comm.empty() ? thread_comm(c.tid) : c.comm);
    json args = {{"source", "uprobe"}, {"ret", c.ret}};
    if (c.stream) args["stream"] = fmt::format("{:#x}", c.stream);
    if (c.count) args["count"] = c.count;
    if (c.seq) args["seq"] = c.seq;
    if (c.peer >= 0) args["peer"] = c.peer;
    std::string name = c.seq ? fmt::format("{} #{}", gpu_fn_name(c.fn), c.seq) : gpu_fn_name(c.fn);
    add_slice(pid, c.tid, us(c.start_ns), us(c.end_ns - std::min(c.end_ns, c.start_ns)), name,
              gpu_fn_is_nccl(c.fn) ? "nccl" : "cuda_host_wait", std::move(args));
  }
  for (const auto& t : g.threads) {
    if (!t.in_fn || !t.in_since_ns || t.in_since_ns > live.end_ns) continue;
    track(t.pid, t.tid, process_comm(t.pid), t.comm);
    std::string name = gpu_fn_is_nccl_transfer(t.in_fn)
                           ? fmt::format("{} #{}", gpu_fn_name(t.in_fn), t.collectives)
                           : gpu_fn_name(t.in_fn);
    add_slice(t.pid, t.tid, us(t.in_since_ns), us(live.end_ns - t.in_since_ns), name,
              gpu_fn_is_nccl(t.in_fn) ? "nccl" : "cuda_host_wait", {{"source", "uprobe"}, {"ongoing", true}});
  }
  for (const auto& s : g.nvml) {
    int pid = kTraceGpuPidBase + static_cast<int>(s.device);
    track(pid, 0, fmt::format("GPU {}", s.device), "device");
    if (s.has_utilization)
      events.push_back({{"ph", "C"},
                        {"name", "GPU utilization %"},
                        {"pid", pid},
                        {"tid", 0},
                        {"ts", us(s.ts_ns)},
                        {"args", {{"gpu", s.gpu_util_pct}, {"memory", s.mem_util_pct}}}});
    if (s.has_power)
      events.push_back({{"ph", "C"},
                        {"name", "GPU power W"},
                        {"pid", pid},
                        {"tid", 0},
                        {"ts", us(s.ts_ns)},
                        {"args", {{"power", s.power_mw / 1000.0}}}});
  }
}

json render_chrome_trace(const Snapshot& snap, const Diagnosis* d, const LiveObservation* live) {
  Identities ids(snap, live);
  json events = json::array();
  std::map<int, std::string> process_names;            // pid -> name
  std::map<std::pair<int, int>, std::string> threads;  // (pid, tid) -> name
  // Complete events already placed per (pid, tid), for flow binding and nesting.
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> slices;
  auto us = [](uint64_t ns) { return static_cast<double>(ns) / 1000.0; };
  auto track = [&](int pid, int tid, const std::string& pcomm, const std::string& tcomm) {
    if (!process_names.count(pid)) process_names[pid] = pcomm;
    if (!threads.count({pid, tid})) threads[{pid, tid}] = tcomm;
  };
  auto track_of = [&](int tid) {
    Who w = ids.of(tid);
    track(w.pid, tid, w.process_comm, w.thread_comm);
    return w.pid;
  };
  auto add_slice = [&](int pid, int tid, double ts, double dur, const std::string& name,
                       const std::string& cat, json args) {
    events.push_back({{"ph", "X"},
                      {"name", name},
                      {"cat", cat},
                      {"pid", pid},
                      {"tid", tid},
                      {"ts", ts},
                      {"dur", dur},
                      {"args", std::move(args)}});
    slices[{pid, tid}].push_back({ts, ts + dur});
  };
  auto enclosed = [&](int pid, int tid, double ts) {
    auto it = slices.find({pid, tid});
    if (it == slices.end()) return false;
    for (const auto& [a, b] : it->second)
      if (a <= ts && ts <= b) return true;
    return false;
  };

  for (const auto& p : snap.processes)
    for (const auto& t : p.threads)
      track(p.pid, t.tid, p.comm.empty() ? "?" : p.comm, t.comm.empty() ? "?" : t.comm);

  // The sample time on CLOCK_MONOTONIC; older snapshots lack it, and then the
  // snapshot is placed at the end of the live window (or so that the longest
  // wait starts at 0).
  double sample_us = us(snap.sampled_at_monotonic_ns);
  std::string clock_note = "CLOCK_MONOTONIC";
  if (snap.sampled_at_monotonic_ns == 0) {
    if (live && live->end_ns) {
      sample_us = us(live->end_ns);
      clock_note = "CLOCK_MONOTONIC; the snapshot had no clock: current waits end at the live window's end";
    } else {
      double longest = 0;
      for (const auto& p : snap.processes)
        for (const auto& t : p.threads)
          if (t.kernel && !t.kernel->on_cpu) longest = std::max(longest, us(t.kernel->off_cpu_ns));
      sample_us = longest;
      clock_note = "relative: the snapshot had no clock; it is placed at the end of the longest wait";
    }
  }

  // Live blocked intervals.
  std::map<int, double> last_end_us;  // by tid
  if (live)
    for (const auto& [tid, intervals] : live->blocked) {
      int pid = track_of(tid);
      for (const auto& b : intervals) {
        if (b.end_ns < b.start_ns) continue;
        add_slice(pid, tid, us(b.start_ns), us(b.end_ns - b.start_ns), b.what, "blocked",
                  {{"what", b.what}, {"start_ns", b.start_ns}, {"end_ns", b.end_ns}, {"source", "live"}});
        last_end_us[tid] = std::max(last_end_us[tid], us(b.end_ns));
      }
    }

  if (live) add_gpu_tracks(*live, ids, events, track, track_of, add_slice);

  // The wait each thread was in at the snapshot.
  for (const auto& p : snap.processes)
    for (const auto& t : p.threads) {
      const ThreadWait* w = nullptr;
      std::optional<double> blocked = current_blocked_s(t, d, &w);
      if (!blocked) continue;
      double start = sample_us - *blocked * 1e6;
      json args = {{"blocked_s", *blocked}, {"ongoing", true}, {"source", "snapshot"}};
      if (auto it = last_end_us.find(t.tid); it != last_end_us.end() && it->second > start) {
        args["clamped_to_live_interval"] = true;
        start = it->second;
      }
      if (start < 0) start = 0;
      std::string name = "blocked";
      if (w) {
        name = !w->summary.empty()        ? w->summary
               : !w->syscall_text.empty() ? w->syscall_text
                                          : activity_name(w->activity);
        args["activity"] = activity_name(w->activity);
        args["wait_class"] = wait_class_name(w->wait_class);
        if (!w->syscall_text.empty()) args["syscall"] = w->syscall_text;
        if (w->timeout_s) args["timeout_s"] = *w->timeout_s;
        json objects = json::array();
        for (const auto& id : w->objects) {
          auto o = d->graph.objects.find(id);
          objects.push_back(o != d->graph.objects.end() && !o->second.label.empty() ? o->second.label : id);
        }
        if (!objects.empty()) args["objects"] = objects;
        if (!w->kernel_stack.empty()) args["kernel_stack"] = w->kernel_stack;
      }
      json py = json::array();
      for (const auto& f : t.python_stack) py.push_back(user_frame(f).name);
      if (!py.empty()) args["python_stack"] = py;
      json native = json::array();
      for (const auto& f : t.native_stack) native.push_back(user_frame(f).name);
      if (!native.empty()) args["native_stack"] = native;
      if (!native.empty() && !py.empty()) {
        json merged = json::array();  // native and Python interleaved, innermost first
        for (const auto& f : merged_user_stack(t)) merged.push_back(user_frame(f).name);
        args["stack"] = merged;
      }
      std::string cat = w ? fmt::format("wait,{}", activity_name(w->activity)) : "wait";
      add_slice(p.pid, t.tid, start, std::max(0.0, sample_us - start), name, cat, std::move(args));
    }

  // Wakeups: a flow from the waker (a 1 µs "wakes" slice there unless a slice
  // already encloses the moment) to the wakee's wait it ended.
  if (live) {
    uint64_t flow_id = 0;
    for (const auto& [wakee, ev] : live->last_waker) {
      int wakee_pid = track_of(wakee);
      int waker_pid = ev.waker_tgid, waker_tid = ev.waker_tid;
      if (waker_pid == 0) {
        waker_pid = kTraceInterruptPid;
        waker_tid = 0;
        track(waker_pid, waker_tid, "interrupt context", "interrupt");
      } else {
        Who w = ids.of(waker_tid);
        track(waker_pid, waker_tid, ids.process_comm(waker_pid),
              w.thread_comm != "?" ? w.thread_comm : (ev.waker_comm.empty() ? "?" : ev.waker_comm));
      }
      double ts = us(ev.ts_ns);
      std::string wakee_name = fmt::format("{}/{}", ids.of(wakee).thread_comm, wakee);
      std::string waker_name = waker_frame_name(ev);
      ++flow_id;
      if (!enclosed(waker_pid, waker_tid, ts))
        add_slice(waker_pid, waker_tid, ts, 1.0, "wakes " + wakee_name, "wakeup",
                  {{"wakee_tid", wakee}, {"wakee_pid", wakee_pid}});
      if (!enclosed(wakee_pid, wakee, ts))
        add_slice(wakee_pid, wakee, ts, 1.0, "woken by " + waker_name, "wakeup",
                  {{"waker_tid", ev.waker_tid}, {"waker_pid", ev.waker_tgid}});
      events.push_back({{"ph", "s"},
                        {"name", "wakeup"},
                        {"cat", "wakeup"},
                        {"id", flow_id},
                        {"pid", waker_pid},
                        {"tid", waker_tid},
                        {"ts", ts}});
      events.push_back({{"ph", "f"},
                        {"bp", "e"},
                        {"name", "wakeup"},
                        {"cat", "wakeup"},
                        {"id", flow_id},
                        {"pid", wakee_pid},
                        {"tid", wakee},
                        {"ts", ts}});
    }
    for (const auto& death : live->deaths) {
      std::string comm = death.comm.empty() ? ids.process_comm(death.pid) : death.comm;
      track(death.pid, death.pid, comm, comm);
      std::string what;
      if (death.signal) {
        const char* sig = signal_name(death.signal);
        what = sig ? fmt::format("killed by {}", sig) : fmt::format("killed by signal {}", death.signal);
      } else {
        what = fmt::format("exited with status {}", (death.exit_code >> 8) & 0xff);
      }
      if (death.oom_victim) what += " (OOM killer)";
      json args = {{"pid", death.pid},
                   {"comm", comm},
                   {"exit_code", death.exit_code},
                   {"signal", death.signal},
                   {"oom_victim", death.oom_victim}};
      if (death.fatal_signal && death.fatal_signal->sender_tgid)
        args["sender"] =
            fmt::format("{}/{}", death.fatal_signal->sender_comm, death.fatal_signal->sender_tgid);
      events.push_back({{"ph", "i"},
                        {"s", "p"},
                        {"name", what},
                        {"cat", "death"},
                        {"pid", death.pid},
                        {"tid", death.pid},
                        {"ts", us(death.ts_ns ? death.ts_ns : live->end_ns)},
                        {"args", args}});
    }
  }

  events.push_back({{"ph", "i"},
                    {"s", "g"},
                    {"name", "snapshot"},
                    {"cat", "hangtrace"},
                    {"pid", snap.target_pid},
                    {"tid", snap.target_pid},
                    {"ts", sample_us}});

  // Metadata first: names for every track that has events.
  json meta = json::array();
  for (const auto& [pid, name] : process_names) {
    const ProcessInfo* p = snap.process(pid);
    std::string label = pid == kTraceInterruptPid ? name : fmt::format("{} (pid {})", name, pid);
    if (p && pid == snap.target_pid) label += " [target]";
    meta.push_back(
        {{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"tid", 0}, {"args", {{"name", label}}}});
    meta.push_back({{"ph", "M"},
                    {"name", "process_sort_index"},
                    {"pid", pid},
                    {"tid", 0},
                    {"args", {{"sort_index", pid == snap.target_pid ? 0 : pid}}}});
  }
  for (const auto& [key, name] : threads)
    meta.push_back({{"ph", "M"},
                    {"name", "thread_name"},
                    {"pid", key.first},
                    {"tid", key.second},
                    {"args", {{"name", fmt::format("{} {}", name, key.second)}}}});
  for (auto& e : events) meta.push_back(std::move(e));

  return {{"traceEvents", meta},
          {"displayTimeUnit", "ms"},
          {"otherData",
           {{"producer", fmt::format("hangtrace {}", HANGTRACE_VERSION)},
            {"clock", clock_note},
            {"time_unit", "microseconds"},
            {"target_pid", snap.target_pid},
            {"gpu_pid_base", kTraceGpuPidBase},
            {"gpu_convention", "device N: pid gpu_pid_base+N; stream S: tid S+1; tid 0: the device"},
            {"interrupt_pid", kTraceInterruptPid}}}};
}

}  // namespace hangtrace
