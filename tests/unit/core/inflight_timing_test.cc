// InflightTiming (src/core/inflight_timing.h): the overlap of exchanges in
// flight recovered from their start and end times. The times come from the
// timeline model itself (plan::sparseTimeline with an overlap), so the test
// checks that the estimate inverts the model the planner prices with.
#include "core/inflight_timing.h"

#include <catch2/catch.hpp>
#include <vector>

#include "plan/cost_model.h"
#include "plan/timeline.h"

using mgs::InflightTiming;
namespace plan = mgs::plan;

namespace {

// `n` layers of `elements` each, all ready at once after `backward_s`
// (the first) and 0.1 ms apart after it: every bucket's exchange is started
// while the one before it is in flight.
std::vector<plan::LayerInfo> layers(int n, int64_t elements) {
  std::vector<plan::LayerInfo> out;
  for (int i = 0; i < n; ++i) out.push_back({"t" + std::to_string(i), elements, i == 0 ? 0.01 : 1e-4});
  return out;
}

plan::CostModel model(double overlap) {
  plan::CostModel m;
  m.allgather = plan::CommModel::linear(5e-3, 1e-9);  // 5 ms start-up: start-up bound
  m.sparsify.kind = plan::SparsifyModel::Kind::kLinear;
  m.sparsify.c_s = 1e-10;
  m.density = 0.01;
  m.workers = 16;
  m.inflight_overlap = overlap;
  return m;
}

// Feeds the timeline's exchanges (layer-wise plan) to an estimator.
InflightTiming timed(const plan::CostModel& m, int n, int64_t elements) {
  const auto ls = layers(n, elements);
  plan::Groups groups;
  for (int i = 0; i < n; ++i) groups.push_back({i});
  const auto t = plan::sparseTimeline(
      ls, groups, [&](int64_t e) { return m.wireSeconds(plan::Exchange::kAllgather, e); },
      [&](int64_t e) { return m.sparsifySeconds(e); }, plan::Selection::kSeparate, 0,
      [&](int64_t e) { return m.overlapSeconds(plan::Exchange::kAllgather, e); });
  InflightTiming it;
  for (const auto& g : t) {
    const double bytes = double(m.workers) * double(m.selected(g.elements)) * (m.bytes_per_element + 4);
    // The runtime starts an exchange once its selection is done (the
    // model's comm_start_s is where the overlap lets it begin to count).
    it.add(g.sparsified_s, g.comm_end_s, m.allgather.seconds(bytes), m.allgather.startup());
  }
  return it;
}

}  // namespace

TEST_CASE("exchanges in flight: the overlap the model priced them with is recovered", "[inflight]") {
  for (double ov : {0.0, 0.26, 0.5, 0.75, 1.0}) {
    const InflightTiming it = timed(model(ov), 20, 100000);
    CAPTURE(ov);
    // Every exchange but the first started while the one before was in
    // flight, a whole start-up before it ended (all ready at once).
    CHECK(it.pairs() == 19);
    CHECK(it.overlap(-1) == Approx(ov).margin(1e-9));
  }
}

TEST_CASE("exchanges in flight: pairs that say nothing are not counted", "[inflight]") {
  InflightTiming it;
  const double T = 0.010, S = 0.008;
  it.add(0.000, 0.010, T, S);
  // Started after the previous ended: no overlap to see.
  it.add(0.020, 0.030, T, S);
  // Started 5 ms before the previous ended, less than a start-up (8 ms):
  // where it ended depends on its own start, not on the overlap.
  it.add(0.025, 0.035, T, S);
  CHECK(it.pairs() == 0);
  CHECK(it.overlap(0.3) == 0.3);
  // Started 9 ms before the previous ended, ended 4 ms after it: it hid
  // T - 4 ms = 6 ms of its 8 ms start-up.
  it.add(0.026, 0.039, T, S);
  CHECK(it.pairs() == 1);
  CHECK(it.overlap(0.3) == Approx(6.0 / 8.0));
  it.reset();
  CHECK(it.pairs() == 0);
  CHECK(it.overlap(0.4) == 0.4);
}

TEST_CASE("exchanges in flight: the estimate stays in [0, 1]", "[inflight]") {
  const double T = 0.010, S = 0.010;
  InflightTiming slower;  // each ended later than one after the other would have
  slower.add(0.000, 0.010, T, S);
  slower.add(0.000, 0.030, T, S);
  slower.add(0.010, 0.050, T, S);
  CHECK(slower.pairs() == 2);
  CHECK(slower.overlap(0.5) == 0.0);
  InflightTiming faster;  // all ended together: more hidden than a start-up
  faster.add(0.000, 0.010, T, S);
  faster.add(0.000, 0.010, T, S);
  faster.add(0.000, 0.010, T, S);
  CHECK(faster.pairs() == 2);
  CHECK(faster.overlap(0.5) == 1.0);
}
