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
