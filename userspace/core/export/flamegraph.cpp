// The flame graph: a FoldedProfile as one self-contained interactive SVG
// (docs/exports.md). Its script and style are flamegraph.js and
// flamegraph.css, embedded at build time (cmake/EmbedText.cmake).
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string_view>

#include "common.h"
#include "flamegraph_css.h"
#include "flamegraph_js.h"
#include "hangtrace/exports.h"
#include "hangtrace/text.h"

namespace hangtrace {
namespace {

// The script sits in a CDATA section and the style in a <style> element of
// an XML document: neither may end the section or open markup.
static_assert(std::string_view(embedded::kFlameGraphScript).find("]]>") == std::string_view::npos,
              "flamegraph.js must not contain ]]>");
static_assert(std::string_view(embedded::kFlameGraphStyle).find_first_of("<&") == std::string_view::npos,
              "flamegraph.css must not contain < or &");

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

}  // namespace

std::string render_flamegraph_svg(const FoldedProfile& profile, const FlameGraphOptions& opt) {
  Node root;
  root.frame = exports_detail::synthetic_frame("all");
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
  out += "<style type=\"text/css\">\n";
  out += embedded::kFlameGraphStyle;
  out += "</style>\n";
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
      R"(kernel: orange, native: red, Python: green, hangtrace: blue; width = {}</text>)"
      "\n",
      pad, height - 6, xml_escape(opt.measure));

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
  out += "<script type=\"text/ecmascript\"><![CDATA[\n";
  out += embedded::kFlameGraphScript;
  out += "]]></script>\n</svg>\n";
  return out;
}

}  // namespace hangtrace
