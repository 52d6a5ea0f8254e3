#include "hangtrace/gpu_clock.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace hangtrace {
namespace {

// CUPTI's clock is CLOCK_REALTIME: ~1.8e18 ns, far past a double's precision.
constexpr uint64_t kRealtimeBase = 1'795'997'421'467'586'210ull;
constexpr uint64_t kMonoBase = 86'400'000'000'000ull;  // a day of uptime
constexpr uint64_t kSecond = 1'000'000'000ull;

// A reading of a CUPTI clock that is `offset` ahead and runs `ppm` fast,
// taken with the bracket [mono, mono + width].
ClockReading reading(uint64_t mono, uint64_t width, double ppm, uint64_t at_ns_in_bracket) {
  uint64_t true_mono = mono + at_ns_in_bracket;
  int64_t since_base = static_cast<int64_t>(true_mono - kMonoBase);
  uint64_t cupti = kRealtimeBase + true_mono - kMonoBase + static_cast<int64_t>(since_base * ppm * 1e-6);
  return ClockReading{mono, cupti, mono + width};
}

TEST(GpuClock, TightestReadingIsKeptWithHalfItsBracketAsUncertainty) {
  std::vector<ClockReading> readings = {
      reading(kMonoBase, 9000, 0, 8000),
      reading(kMonoBase + 20000, 400, 0, 200),  // the tightest: its midpoint is exact
      reading(kMonoBase + 40000, 3000, 0, 100),
  };
  auto best = tightest_reading(readings);
  ASSERT_TRUE(best);
  EXPECT_EQ(best->uncertainty_ns, 200u);
  EXPECT_EQ(best->mono_ns, kMonoBase + 20200);
  EXPECT_EQ(best->offset_ns(), static_cast<int64_t>(kMonoBase - kRealtimeBase));
}

TEST(GpuClock, InvertedBracketsAreIgnored) {
  std::vector<ClockReading> readings = {{kMonoBase + 10, kRealtimeBase, kMonoBase}};
  EXPECT_FALSE(tightest_reading(readings));
  readings.push_back({kMonoBase, kRealtimeBase, kMonoBase + 100});
  auto best = tightest_reading(readings);
  ASSERT_TRUE(best);
  EXPECT_EQ(best->uncertainty_ns, 50u);
}

TEST(GpuClock, UncalibratedConvertsNothing) {
  GpuClock clock;
  EXPECT_FALSE(clock.calibrated());
  EXPECT_EQ(clock.to_monotonic(kRealtimeBase), 0u);
}

TEST(GpuClock, OffsetMapsCuptiTimesOntoMonotonic) {
  GpuClock clock;
  std::vector<ClockReading> readings = {reading(kMonoBase, 1000, 0, 500)};
  clock.add(*tightest_reading(readings));
  ASSERT_TRUE(clock.calibrated());
  EXPECT_EQ(clock.offset_ns(), static_cast<int64_t>(kMonoBase - kRealtimeBase));
  EXPECT_EQ(clock.uncertainty_ns(), 500u);
  EXPECT_EQ(clock.to_monotonic(kRealtimeBase + 123'456'789), kMonoBase + 123'456'789);
  EXPECT_EQ(clock.to_monotonic(kRealtimeBase - 5'000), kMonoBase - 5'000);
  EXPECT_EQ(clock.to_monotonic(0), 0u) << "CUPTI's 0 (no end time) stays 0";
  // Before CLOCK_MONOTONIC's zero there is nothing to map to.
  EXPECT_EQ(clock.to_monotonic(kRealtimeBase - kMonoBase - kSecond), 0u);
}

TEST(GpuClock, DriftIsFittedFromPointsFarApart) {
  GpuClock clock;
  const double ppm = 25;
  auto point = [&](uint64_t mono) {
    std::vector<ClockReading> r = {reading(mono, 2000, ppm, 1000)};
    return *tightest_reading(r);
  };
  clock.add(point(kMonoBase));
  clock.add(point(kMonoBase + kSecond / 10));
  EXPECT_EQ(clock.drift_ppm(), 0) << "100 ms apart: too close to fit drift";
  clock.add(point(kMonoBase + 10 * kSecond));
  EXPECT_NEAR(clock.drift_ppm(), ppm, 0.5);
  // Extrapolating 100 s past the anchor: without drift this would be 2.5 ms off.
  uint64_t mono = kMonoBase + 110 * kSecond;
  ClockReading later = reading(mono, 0, ppm, 0);
  EXPECT_NEAR(static_cast<double>(clock.to_monotonic(later.cupti_ns)), static_cast<double>(mono), 100.0);
}

TEST(GpuClock, WideLaterPointDoesNotReplaceATightAnchor) {
  GpuClock clock;
  std::vector<ClockReading> tight = {reading(kMonoBase, 200, 0, 100)};
  clock.add(*tightest_reading(tight));
  // A preempted reading: 2 ms bracket, the CUPTI read at its very start.
  std::vector<ClockReading> wide = {reading(kMonoBase + 2 * kSecond, 2'000'000, 0, 0)};
  clock.add(*tightest_reading(wide));
  EXPECT_EQ(clock.uncertainty_ns(), 100u);
  EXPECT_EQ(clock.anchor().mono_ns, kMonoBase + 100);
  EXPECT_EQ(clock.to_monotonic(kRealtimeBase + 5 * kSecond), kMonoBase + 5 * kSecond);
  // A comparably tight later point does replace it.
  std::vector<ClockReading> fresh = {reading(kMonoBase + 3 * kSecond, 300, 0, 150)};
  clock.add(*tightest_reading(fresh));
  EXPECT_EQ(clock.anchor().mono_ns, kMonoBase + 3 * kSecond + 150);
}

TEST(GpuClock, StepOfCuptisClockStartsOver) {
  GpuClock clock;
  std::vector<ClockReading> a = {reading(kMonoBase, 1000, 0, 500)};
  clock.add(*tightest_reading(a));
  // settimeofday moved CLOCK_REALTIME back by an hour.
  const uint64_t hour = 3600 * kSecond;
  ClockReading stepped = reading(kMonoBase + 5 * kSecond, 1000, 0, 500);
  stepped.cupti_ns -= hour;
  std::vector<ClockReading> b = {stepped};
  clock.add(*tightest_reading(b));
  EXPECT_EQ(clock.offset_ns(), static_cast<int64_t>(kMonoBase - kRealtimeBase + hour));
  EXPECT_EQ(clock.drift_ppm(), 0);
  EXPECT_EQ(clock.to_monotonic(stepped.cupti_ns + kSecond), kMonoBase + 6 * kSecond + 500);
}

TEST(GpuClock, ConversionIsMonotonic) {
  for (double ppm : {-80.0, 0.0, 80.0}) {
    GpuClock clock;
    for (uint64_t s = 0; s <= 20; s += 5) {
      std::vector<ClockReading> r = {reading(kMonoBase + s * kSecond, 500, ppm, 250)};
      clock.add(*tightest_reading(r));
    }
    ASSERT_NEAR(clock.drift_ppm(), ppm, 0.5);
    uint64_t previous = 0;
    for (uint64_t t = kRealtimeBase; t < kRealtimeBase + 60 * kSecond; t += 7'777'777) {
      uint64_t mono = clock.to_monotonic(t);
      ASSERT_GE(mono, previous) << "ppm " << ppm << " at " << t;
      previous = mono;
    }
  }
}

}  // namespace
}  // namespace hangtrace
