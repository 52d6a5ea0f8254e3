// CUPTI stamps activity on its own clock (cuptiGetTimestamp: CLOCK_REALTIME
// on Linux, so it steps with NTP and drifts against CLOCK_MONOTONIC); every
// other live record is on CLOCK_MONOTONIC. GpuClock maps one onto the other
// from bracketed readings: CLOCK_MONOTONIC before, CUPTI, CLOCK_MONOTONIC
// after. Header-only: the injection library (a shared object) uses it too.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <span>

namespace hangtrace {

struct ClockReading {
  uint64_t mono_before_ns = 0;
  uint64_t cupti_ns = 0;
  uint64_t mono_after_ns = 0;
};

// CLOCK_MONOTONIC `mono_ns` and CUPTI `cupti_ns` are the same instant, to
// within +- uncertainty_ns.
struct ClockPoint {
  uint64_t mono_ns = 0;
  uint64_t cupti_ns = 0;
  uint64_t uncertainty_ns = 0;
  int64_t offset_ns() const { return static_cast<int64_t>(mono_ns - cupti_ns); }
};

// The reading whose bracket is narrowest (the thread was least likely
// preempted in between), as a point at the bracket's middle; nothing when
// every bracket is inverted.
inline std::optional<ClockPoint> tightest_reading(std::span<const ClockReading> readings) {
  std::optional<ClockPoint> best;
  for (const ClockReading& r : readings) {
    if (r.mono_after_ns < r.mono_before_ns) continue;
    uint64_t half = (r.mono_after_ns - r.mono_before_ns) / 2;
    if (best && half >= best->uncertainty_ns) continue;
    best = ClockPoint{r.mono_before_ns + half, r.cupti_ns, half};
  }
  return best;
}

class GpuClock {
 public:
  // Drift is fitted only from points at least this far apart (and tight
  // enough for kMaxDriftErrorPpm: 2 us over 1 s is 2 ppm).
  static constexpr uint64_t kMinDriftSpanNs = 1'000'000'000;
  // Crystal drift is tens of ppm; more than this is a step of CUPTI's clock
  // (settimeofday, an NTP step), after which earlier points mean nothing.
  static constexpr double kMaxDriftPpm = 500;
  // A fit whose ends are this uncertain against their span is not worth having.
  static constexpr double kMaxDriftErrorPpm = 5;

  // Adds a calibration point (take several readings and pass the tightest).
  // A later point replaces the anchor unless the anchor is much tighter and
  // still agrees with it.
  void add(const ClockPoint& p) {
    if (!calibrated_) {
      reset_to(p);
      return;
    }
    if (p.mono_ns <= anchor_.mono_ns) return;  // out of order: nothing to learn
    int64_t mismatch = static_cast<int64_t>(to_monotonic(p.cupti_ns) - p.mono_ns);
    uint64_t tolerance = p.uncertainty_ns + anchor_.uncertainty_ns +
                         static_cast<uint64_t>((p.mono_ns - anchor_.mono_ns) * kMaxDriftPpm * 1e-6);
    if (static_cast<uint64_t>(std::llabs(mismatch)) > tolerance) {
      // CUPTI's clock stepped: neither the anchor nor the drift hold.
      reset_to(p);
      return;
    }
    uint64_t span = p.mono_ns - origin_.mono_ns;
    double fit_error_ppm = static_cast<double>(p.uncertainty_ns + origin_.uncertainty_ns) / span * 1e6;
    if (span >= kMinDriftSpanNs && fit_error_ppm <= kMaxDriftErrorPpm) {
      // Integer differences first: the readings themselves (~1.8e18) are past a double's precision.
      int64_t excess = static_cast<int64_t>((p.cupti_ns - origin_.cupti_ns) - span);
      double ppm = static_cast<double>(excess) / static_cast<double>(span) * 1e6;
      if (ppm > -kMaxDriftPpm && ppm < kMaxDriftPpm) drift_ppm_ = ppm;
    }
    if (p.uncertainty_ns <= 2 * anchor_.uncertainty_ns + 1000) anchor_ = p;
  }

  bool calibrated() const { return calibrated_; }
  // The point conversions start from, and the uncertainty of the offset there.
  const ClockPoint& anchor() const { return anchor_; }
  int64_t offset_ns() const { return anchor_.offset_ns(); }
  uint64_t uncertainty_ns() const { return anchor_.uncertainty_ns; }
  // How much faster CUPTI's clock runs than CLOCK_MONOTONIC, in ppm.
  double drift_ppm() const { return drift_ppm_; }

  // CLOCK_MONOTONIC ns of CUPTI timestamp `cupti_ns`; 0 (CUPTI's "none")
  // stays 0, and so does anything before CLOCK_MONOTONIC's zero.
  uint64_t to_monotonic(uint64_t cupti_ns) const {
    if (cupti_ns == 0 || !calibrated_) return 0;
    int64_t cupti_delta = static_cast<int64_t>(cupti_ns - anchor_.cupti_ns);
    int64_t mono_delta = std::llround(static_cast<double>(cupti_delta) / (1.0 + drift_ppm_ * 1e-6));
    // Negated as unsigned: llround of a delta past int64's range is INT64_MIN.
    if (mono_delta < 0 && 0 - static_cast<uint64_t>(mono_delta) >= anchor_.mono_ns) return 0;
    return anchor_.mono_ns + static_cast<uint64_t>(mono_delta);
  }

 private:
  void reset_to(const ClockPoint& p) {
    origin_ = anchor_ = p;
    drift_ppm_ = 0;
    calibrated_ = true;
  }

  bool calibrated_ = false;
  ClockPoint origin_;  // the first point since the last reset: the far end for drift
  ClockPoint anchor_;
  double drift_ppm_ = 0;
};

}  // namespace hangtrace
