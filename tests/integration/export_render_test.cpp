// The exports from a real run: hangtrace diagnoses a hung reproducer and
// writes every export; headless Chromium renders the flame graph, and the
// screenshot's pixels must show frames (decoded with /usr/bin/python3 + zlib).
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support.h"

namespace hangtrace::testing {
namespace {

std::string find_in_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':'))
    if (!dir.empty() && access((dir + "/" + name).c_str(), X_OK) == 0) return dir + "/" + name;
  return "";
}

// Decodes an 8-bit RGB/RGBA PNG and measures the band [y0, y1) x [x0, x1):
// the fraction of pixels that are not the background, per frame row and in
// all, and the frame colours (non-background, non-text) seen on >= 40 pixels.
constexpr const char* kPngProbe = R"PY(
import json, struct, sys, zlib
path, x0, x1, y0, y1, fh = sys.argv[1], *map(int, sys.argv[2:7])
data = open(path, 'rb').read()
assert data[:8] == b'\x89PNG\r\n\x1a\n', 'not a PNG'
pos, idat = 8, b''
while pos < len(data):
    n, kind = struct.unpack('>I4s', data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if kind == b'IHDR':
        w, h, depth, ctype = struct.unpack('>IIBB', body[:10])
    elif kind == b'IDAT':
        idat += body
    pos += 12 + n
assert depth == 8 and ctype in (2, 6), (depth, ctype)
bpp = 3 if ctype == 2 else 4
raw, stride, rows, prev = zlib.decompress(idat), w * bpp, [], bytearray(w * bpp)
for y in range(h):
    f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    for i in range(stride):
        a = line[i - bpp] if i >= bpp else 0
        b, c = prev[i], prev[i - bpp] if i >= bpp else 0
        if f == 1: line[i] = (line[i] + a) & 255
        elif f == 2: line[i] = (line[i] + b) & 255
        elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    rows.append(line)
    prev = line
bg = (0xf8, 0xf8, 0xf8)
colours, painted, total, row_fill = {}, 0, 0, []
for y in range(max(0, y0), min(h, y1)):
    line, row_painted = rows[y], 0
    for x in range(max(0, x0), min(w, x1)):
        px = tuple(line[x * bpp:x * bpp + 3])
        total += 1
        if max(abs(px[i] - bg[i]) for i in range(3)) > 8:
            painted += 1
            row_painted += 1
            if sum(px) > 150:   # not the black text
                colours[px] = colours.get(px, 0) + 1
    row_fill.append(row_painted / max(1, min(w, x1) - max(0, x0)))
frame_rows = [sum(row_fill[i:i + fh]) / fh for i in range(0, len(row_fill), fh)]
print(json.dumps({'width': w, 'height': h, 'painted': painted / max(1, total),
                  'frame_rows': frame_rows,
                  'colours': sorted(['%d,%d,%d' % c for c, n in colours.items() if n >= 40])}))
)PY";

TEST(ExportRender, FlameGraphOfAHungJobRendersInChromium) {
  HANGTRACE_REQUIRE_BPF();
  Workload job({repro_path("repro_pipe_futex_cycle")});
  std::string line = job.wait_for_line("READY");
  ASSERT_FALSE(line.empty());
  auto pids = parse_ready_pids(line);
  ASSERT_EQ(pids.size(), 2u) << line;
  ASSERT_EQ(wait_until_blocked(pids[0]), "") << "the parent never blocked";
  ASSERT_EQ(wait_until_blocked(pids[1]), "") << "the child never blocked";

  TempDir tmp{"hangtrace-export-test"};
  const std::string dir = tmp.path.string();
  std::string svg = dir + "/flame.svg", folded = dir + "/blocked.folded",
              speedscope = dir + "/speedscope.json", trace = dir + "/trace.json";
  auto r = run_command({hangtrace_path(), "--pid", std::to_string(pids[0]), "--folded", folded,
                        "--flamegraph", svg, "--speedscope", speedscope, "--trace", trace});
  ASSERT_EQ(r.exit_code, 2) << r.out << r.err;

  // Folded: one line per stack of each blocked process, kernel frames at the leaf.
  std::string folded_text = read_text_file(folded);
  for (int pid : pids) {
    std::string prefix = "/" + std::to_string(pid) + ";";
    EXPECT_NE(folded_text.find(prefix), std::string::npos) << "pid " << pid << " missing:\n" << folded_text;
  }
  EXPECT_TRUE(folded_text.find("futex") != std::string::npos ||
              folded_text.find("pipe_read") != std::string::npos)
      << folded_text;
  nlohmann::json ss = nlohmann::json::parse(read_text_file(speedscope));
  EXPECT_GE(ss["profiles"].size(), 2u);
  nlohmann::json tr = nlohmann::json::parse(read_text_file(trace));
  size_t complete = 0;
  for (const auto& e : tr["traceEvents"]) complete += e["ph"] == "X";
  EXPECT_GE(complete, 2u) << tr.dump(1);

  std::string svg_text = read_text_file(svg);
  ASSERT_NE(svg_text.find("</svg>"), std::string::npos);
  std::string chromium = find_in_path("chromium");
  if (chromium.empty()) chromium = find_in_path("chromium-browser");
  if (chromium.empty()) GTEST_SKIP() << "chromium is not installed (scripts/install-deps.sh installs it)";
  if (access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "needs /usr/bin/python3 to decode the PNG";

  // The SVG's size, from its root element.
  auto attr = [&](const std::string& name) {
    size_t root = svg_text.find("<svg ");
    size_t at = svg_text.find(" " + name + "=\"", root);
    return std::stoi(svg_text.substr(at + name.size() + 3));
  };
  const int width = attr("width"), height = attr("height");
  const int frame_height = 16, bottom = 42, pad = 10;
  std::string png = dir + "/flame.png";
  auto shot = run_command(
      {chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
       "--force-device-scale-factor=1", "--user-data-dir=" + dir + "/profile", "--screenshot=" + png,
       "--window-size=" + std::to_string(width) + "," + std::to_string(std::max(800, height + 20)),
       "file://" + svg},
      std::chrono::seconds(120));
  struct stat st {};
  ASSERT_EQ(stat(png.c_str(), &st), 0) << "no screenshot; chromium said:\n" << shot.err;

  std::string probe = dir + "/probe.py";
  std::ofstream(probe) << kPngProbe;
  // The frame area: from the bottom margin up through every frame level.
  int frames_top = 64, frames_bottom = height - bottom;
  auto m = run_command({"/usr/bin/python3", probe, png, std::to_string(pad), std::to_string(width - pad),
                        std::to_string(frames_top + (frames_bottom - frames_top) % frame_height),
                        std::to_string(frames_bottom), std::to_string(frame_height)});
  ASSERT_EQ(m.exit_code, 0) << m.err;
  nlohmann::json px = nlohmann::json::parse(m.out);
  ASSERT_GE(px["width"].get<int>(), width);
  const auto& rows = px["frame_rows"];
  ASSERT_GE(rows.size(), 3u) << px.dump();
  // Bottom up: "all", then the processes, then their threads span the width.
  for (size_t i = rows.size() - 3; i < rows.size(); ++i)
    EXPECT_GT(rows[i].get<double>(), 0.75) << "frame row " << i << " barely painted: " << px.dump();
  EXPECT_GT(px["painted"].get<double>(), 0.25) << px.dump();
  EXPECT_GE(px["colours"].size(), 2u) << px.dump();
  // Kernel frames are orange: red high, blue low.
  bool kernel_colour = false;
  for (const auto& c : px["colours"]) {
    int r = 0, g = 0, b = 0;
    std::sscanf(c.get<std::string>().c_str(), "%d,%d,%d", &r, &g, &b);
    kernel_colour |= r >= 225 && g >= 120 && g <= 200 && b <= 70;
  }
  EXPECT_TRUE(kernel_colour) << px.dump();
}

}  // namespace
}  // namespace hangtrace::testing
