// The re-planner's backward rescale (core/replanner.h rescaleBackward): what
// a re-plan prices backward with after a plan check measured its span.
#include <catch2/catch.hpp>

#include <random>

#include "core/replanner.h"

using namespace mgs;

TEST_CASE("rescaleBackward: the rescaled backward plus the predicted tail is the measured span", "[core][replan]") {
  // 80 ms of backward and a 20 ms tail predicted 100 ms; 60 ms measured: backward was 40 ms.
  REQUIRE(rescaleBackward(1.0, 0.080, 0.100, 0.060) == Approx(0.5));
  // A second check under that plan (priced with 40 ms): 90 ms measured, so
  // the profile's 80 ms of backward becomes 70 ms.
  const double s2 = rescaleBackward(0.5, 0.040, 0.060, 0.090);
  REQUIRE(0.080 * s2 + 0.020 == Approx(0.090));
  // Any unclamped case, composed over repeated checks: the profile's
  // backward times the new scale, plus the tail, is what was measured.
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0.01, 0.2);
  for (int i = 0; i < 1000; ++i) {
    const double raw = u(rng), scale = 0.5 + u(rng) * 5, tail = u(rng);
    const double backward = raw * scale, predicted = backward + tail;
    const double measured = tail + backward * (0.2 + 4 * u(rng));  // above the floor, scale within bounds
    const double next = rescaleBackward(scale, backward, predicted, measured);
    INFO("raw " << raw << ", scale " << scale << ", tail " << tail << ", measured " << measured);
    if (next > 0.05 && next < 20.0) REQUIRE(raw * next + tail == Approx(measured).epsilon(1e-9));
  }
}

TEST_CASE("rescaleBackward: floors, bounds and no prediction", "[core][replan]") {
  // Measured below the predicted tail alone: backward keeps a tenth.
  REQUIRE(rescaleBackward(1.0, 0.080, 0.100, 0.010) == Approx(0.1));
  // A prediction shorter than its backward: no tail, all of it backward.
  REQUIRE(rescaleBackward(1.0, 0.080, 0.050, 0.040) == Approx(0.5));
  // Bounds: at most 20x, at least 0.05x.
  REQUIRE(rescaleBackward(1.0, 0.001, 0.001, 1.0) == 20.0);
  REQUIRE(rescaleBackward(0.06, 0.080, 0.100, 0.010) == 0.05);
  // Nothing to scale from: unchanged.
  REQUIRE(rescaleBackward(0.7, 0.0, 0.100, 0.050) == 0.7);
  REQUIRE(rescaleBackward(0.7, 0.080, 0.0, 0.050) == 0.7);
}

namespace {
Clock::time_point at_ms(double ms) {
  return Clock::time_point{} +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(ms));
}
}  // namespace

TEST_CASE("denseOnPlanClock: dense gradients placed between the sparse ones around them, on the plan's clock",
          "[core][replan]") {
  // Two profiled steps (the first is warm-up and only bounds the second's
  // window). Step 1: sparse a at 100 ms, b at 110, c at 130 (enqueue times).
  std::vector<ProfiledStep> profile = {
      {{"a", at_ms(0)}, {"b", at_ms(10)}, {"c", at_ms(30)}},
      {{"c", at_ms(130)}, {"a", at_ms(100)}, {"b", at_ms(110)}},  // out of order: sorted by time
  };
  // The plan's clock after its adjustments (say a re-plan doubled backward):
  // a ready at 2 ms, b at 22, c at 62.
  std::vector<plan::LayerInfo> layers = {{"a", 4096, 0.002}, {"b", 4096, 0.020}, {"c", 4096, 0.040}};
  std::vector<ProfiledDense> dense = {
      {"x", 10, at_ms(105)},  // halfway between a and b: 12 ms
      {"y", 20, at_ms(125)},  // three quarters of the way from b to c: 52 ms
      {"w", 30, at_ms(99)},   // 1 ms before a: 2 - 1 = 1 ms
      {"v", 40, at_ms(20)},   // step 0's, before its last sparse gradient: in no profiled window
      {"u", 50, at_ms(131)},  // after step 1's last sparse gradient: in none either
      {"z", 60, at_ms(95)},   // 5 ms before a: clamped at 0
  };
  const auto out = denseOnPlanClock(profile, 1, dense, layers);
  REQUIRE(out.size() == 4);
  REQUIRE(out[0].name == "z");
  REQUIRE(out[0].ready_s == 0.0);
  REQUIRE(out[0].elements == 60);
  REQUIRE(out[1].name == "w");
  REQUIRE(out[1].ready_s == Approx(0.001));
  REQUIRE(out[2].name == "x");
  REQUIRE(out[2].ready_s == Approx(0.012));
  REQUIRE(out[2].elements == 10);
  REQUIRE(out[3].name == "y");
  REQUIRE(out[3].ready_s == Approx(0.052));
}

TEST_CASE("denseOnPlanClock: averaged over the profiled steps; unknown neighbours and empty steps skipped",
          "[core][replan]") {
  std::vector<ProfiledStep> profile = {
      {{"a", at_ms(0)}, {"b", at_ms(10)}},
      {{"a", at_ms(100)}, {"b", at_ms(110)}},
      {{"a", at_ms(300)}, {"b", at_ms(310)}, {"gone", at_ms(320)}},
      {},  // a step nothing was recorded in
  };
  std::vector<plan::LayerInfo> layers = {{"a", 4096, 0.001}, {"b", 4096, 0.010}};
  std::vector<ProfiledDense> dense = {
      {"x", 8, at_ms(102)},  // 1 + 0.2 * 10 = 3 ms
      {"x", 8, at_ms(306)},  // 1 + 0.6 * 10 = 7 ms; mean 5 ms
      {"y", 8, at_ms(315)},  // between b and a sparse gradient the plan does not have: skipped
      {"z", 8, at_ms(400)},  // after the last step's gradients (the empty step has no window)
  };
  const auto out = denseOnPlanClock(profile, 1, dense, layers);
  REQUIRE(out.size() == 1);
  REQUIRE(out[0].name == "x");
  REQUIRE(out[0].ready_s == Approx(0.005));
  // One profiled step: nothing before it bounds a window.
  REQUIRE(denseOnPlanClock({profile[1]}, 0, dense, layers).empty());
}
