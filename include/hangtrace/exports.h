// Postmortem exports: the blocked time of every thread as folded stacks, and
// the same data as an SVG flame graph, a speedscope profile and a Chrome Trace
// Event timeline; the main threads' wall time by cause (from the stall
// profile) as folded stacks and a flame graph (docs/exports.md). Pure functions of a Snapshot, its
// Diagnosis and the optional live observation; the CLI writes the files.
// One file per format under userspace/core/export/: folded.cpp,
// wall_profile.cpp (wall time by cause), flamegraph.cpp (+ flamegraph.js,
// flamegraph.css), speedscope.cpp, chrome_trace.cpp; what they share in
// export/common.h.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "hangtrace/analysis.h"
#include "hangtrace/live.h"
#include "hangtrace/model.h"
#include "hangtrace/profile.h"

namespace hangtrace {

// What a frame is; decides its colour in the flame graph.
enum class FrameKind : uint8_t {
  Synthetic,  // made up by hangtrace: process, thread, "--", a waker, a live wait
  Python,
  Native,
  Kernel,
};
const char* frame_kind_name(FrameKind k);

struct FoldedFrame {
  std::string name;  // already free of ';' and newlines
  FrameKind kind = FrameKind::Synthetic;
  std::string file;  // Python: source file; native: module path
  int line = 0;
  bool operator==(const FoldedFrame& o) const { return name == o.name && kind == o.kind; }
  bool operator<(const FoldedFrame& o) const { return name != o.name ? name < o.name : kind < o.kind; }
};

// One distinct stack, root first: process ; thread ; the user stack, native
// and Python frames merged (hangtrace/stacks.h), outermost first ; kernel
// (innermost last) [; "--" ; the waker's kernel stack then its user stack,
// innermost first ; waker] -- offwaketime's layout after "--".
struct FoldedStack {
  std::vector<FoldedFrame> frames;
  uint64_t value_us = 0;  // blocked time
  int pid = 0, tid = 0;
};

struct FoldedProfile {
  std::vector<FoldedStack> stacks;  // sorted by their folded text, identical stacks merged
  uint64_t total_us() const;
};

// Every thread that is blocked in the snapshot (its current wait, blocked time
// from the kernel) and, with `live`, every completed blocked interval seen
// while tracing (the interval's `what` as the leaf). `diagnosis` tells running
// threads from blocked ones; without it every thread off CPU counts.
FoldedProfile build_folded(const Snapshot& snapshot, const Diagnosis* diagnosis,
                           const LiveObservation* live = nullptr);

// Wall time by cause (docs/exports.md): each main thread of a live window's
// stall profile (hangtrace/profile.h) as stacks, root first: the thread (its
// path label) ; the cause ; under a cause the path steps whose threads ended
// those waits, each with its own causes scaled to the part of the wait it
// ended, recursively ; the objects waited on as leaves ; on-CPU time by
// sampled stack. Each main thread's values add up to its window (µs). Empty
// without a profile.
FoldedProfile build_wall_folded(const StallProfile& profile);

// Brendan Gregg's folded format: "frame;frame;... VALUE\n" per stack.
std::string render_folded(const FoldedProfile& profile);

struct FlameGraphOptions {
  std::string title = "hangtrace: blocked time";
  std::string subtitle;  // e.g. the target and the verdict
  int width = 1200;
  int frame_height = 16;
  double min_width_px = 0.1;  // narrower frames are left out
  std::string measure = "blocked time";  // what a frame's width is, in the legend
};
// A self-contained interactive SVG: hover for details, click to zoom, search.
std::string render_flamegraph_svg(const FoldedProfile& profile, const FlameGraphOptions& options = {});

// The flame graph of wall time by cause: titled "<target>: wall time by
// cause", `subtitle` below, frame widths in wall time.
FlameGraphOptions wall_flamegraph_options(const std::string& target, const std::string& subtitle);

// speedscope's file format (https://www.speedscope.app/file-format-schema.json):
// one "sampled" profile per thread, weights in microseconds; with
// `wall_time` (build_wall_folded), one more per main thread after those.
nlohmann::json render_speedscope(const FoldedProfile& profile, const std::string& name,
                                 const FoldedProfile* wall_time = nullptr);

// Chrome Trace Event pids of the GPU tracks (docs/gpu.md): device N is pid
// kTraceGpuPidBase + N, its stream S is tid S + 1 (tid 0: the device itself,
// with its NVML counters). Linux pids never reach this range (PID_MAX_LIMIT
// is 2^22).
inline constexpr int kTraceGpuPidBase = 1'000'000'000;
// Wakeups from interrupt context (no task) are drawn on this pid/tid.
inline constexpr int kTraceInterruptPid = 999'999'999;

// Chrome Trace Event JSON (Perfetto, chrome://tracing): one track per thread,
// blocked intervals and the current wait as complete events, wakeups as flows,
// deaths as instant events; with `live`, its GPU work on device and stream
// tracks, and, when `diagnosis` has a stall profile, flows along its critical
// path (each wakeup that ended a path thread's wait, to that wait's end) and
// the main threads' shares by cause. Timestamps: CLOCK_MONOTONIC microseconds.
nlohmann::json render_chrome_trace(const Snapshot& snapshot, const Diagnosis* diagnosis,
                                   const LiveObservation* live = nullptr);

}  // namespace hangtrace
