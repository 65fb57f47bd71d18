#include "plan/cost_model.h"

#include <catch2/catch.hpp>
#include <random>

namespace mgs::plan {
namespace {

TEST_CASE("linear comm model; zero bytes cost nothing", "[plan][cost]") {
  const auto m = CommModel::linear(1e-3, 2e-9);
  CHECK(m.seconds(0) == 0.0);
  CHECK(m.seconds(1000) == Approx(1e-3 + 2e-6));
  CHECK(m.startup() == 1e-3);
  CHECK(m.isLinear());
}

TEST_CASE("fit recovers a noisy line by least squares", "[plan][cost]") {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> noise(0.0, 1e-6);
  std::vector<Sample> s;
  for (int i = 1; i <= 63; ++i) {  // MW's protocol: 8192*i fp32 elements
    const double bytes = 8192.0 * i * 4;
    s.push_back({bytes, 5e-4 + 8.5e-10 * bytes + noise(rng)});
  }
  CommModel m;
  REQUIRE(CommModel::fit(s, &m).ok());
  CHECK(m.segments()[0].alpha_s == Approx(5e-4).epsilon(1e-2));
  CHECK(m.segments()[0].beta_s_per_byte == Approx(8.5e-10).epsilon(1e-2));
}

TEST_CASE("fit clamps a negative intercept to zero", "[plan][cost]") {
  CommModel m;
  REQUIRE(CommModel::fit({{100, 0.0}, {200, 2.0}, {300, 4.0}}, &m).ok());
  CHECK(m.startup() == 0.0);
  CHECK(m.segments()[0].beta_s_per_byte > 0);
  CHECK(m.seconds(300) > 0);
}

TEST_CASE("fit rejects too few or degenerate samples", "[plan][cost]") {
  CommModel m;
  CHECK(CommModel::fit({{1, 1}}, &m).code() == Code::kInvalidArgument);
  CHECK(CommModel::fit({{5, 1}, {5, 2}}, &m).code() == Code::kInvalidArgument);
  CHECK(CommModel::fit({{1, -1}, {2, 1}}, &m).code() == Code::kInvalidArgument);
}

TEST_CASE("table interpolates, extrapolates and rejects duplicates", "[plan][cost]") {
  CommModel m;
  REQUIRE(CommModel::table({{2000, 3.0}, {1000, 1.0}, {4000, 4.0}}, &m).ok());
  CHECK(m.seconds(1000) == Approx(1.0));
  CHECK(m.seconds(1500) == Approx(2.0));
  CHECK(m.seconds(3000) == Approx(3.5));
  CHECK(m.seconds(6000) == Approx(5.0));  // last slope continues
  CHECK(m.seconds(750) == Approx(0.5));   // first slope continues down...
  CHECK(m.seconds(100) == 0.0);           // ...but never below zero
  CHECK(CommModel::table({{1, 1}, {1, 2}}, &m).code() == Code::kInvalidArgument);
  CHECK(CommModel::table({{1, 1}}, &m).code() == Code::kInvalidArgument);
}

TEST_CASE("switched model changes line at the threshold", "[plan][cost]") {
  const auto m = CommModel::switched(100, 1.0, 0.1, 5.0, 0.01);
  CHECK(m.seconds(99) == Approx(1.0 + 9.9));
  CHECK(m.seconds(100) == Approx(5.0 + 1.0));
}

TEST_CASE("sparsify fit recovers c for both kinds", "[plan][cost]") {
  for (auto kind : {SparsifyModel::Kind::kLinear, SparsifyModel::Kind::kNLogN}) {
    const SparsifyModel truth{kind, 3e-10};
    std::vector<Sample> s;
    for (int64_t n = 1 << 10; n <= (1 << 24); n *= 4) s.push_back({double(n), truth.seconds(n)});
    SparsifyModel fit;
    REQUIRE(SparsifyModel::fit(kind, s, &fit).ok());
    CHECK(fit.kind == kind);
    CHECK(fit.c_s == Approx(3e-10));
  }
  SparsifyModel fit;
  CHECK(SparsifyModel::fit(SparsifyModel::Kind::kNLogN, {{1, 1}}, &fit).code() == Code::kInvalidArgument);
}

TEST_CASE("k = clamp(floor(n*density), 1, n) and allgather bytes", "[plan][cost]") {
  CostModel m;
  m.density = 0.001;
  m.workers = 8;
  m.bytes_per_element = 2;
  m.allgather = CommModel::linear(0.0, 1.0);  // seconds == bytes
  CHECK(m.selected(0) == 0);
  CHECK(m.selected(1) == 1);
  CHECK(m.selected(999) == 1);
  CHECK(m.selected(2500) == 2);
  CHECK(m.allgatherSeconds(2500) == 8 * 2 * (2 + 4));
  CHECK(m.allgatherSeconds(0) == 0.0);
  m.density = 1.0;
  CHECK(m.selected(7) == 7);
}

TEST_CASE("presets: the papers' tables by name", "[plan][cost]") {
  CostModel m;
  m.density = 0.01;
  REQUIRE(costModelPreset("10gbe-P8", &m).ok());
  CHECK(m.workers == 8);
  CHECK(m.density == 0.01);
  CHECK(m.allreduce.startup() == 5.230272768511732e-04);
  CHECK(m.allreduceSeconds(1000) == Approx(5.230272768511732e-04 + 8.570746975492128e-10 * 4000));
  REQUIRE(costModelPreset("1gbe-P16", &m).ok());
  CHECK(m.allgather.startup() == 2 * 1.1e-2);  // OM: 2*(a + b*x*P*4)
  for (const auto& name : costModelPresetNames()) CHECK(costModelPreset(name, &m).ok());
  CHECK(costModelPreset("10gbe-P3", &m).code() == Code::kInvalidArgument);
  CHECK(costModelPreset("nope", &m).code() == Code::kInvalidArgument);
}

}  // namespace
}  // namespace mgs::plan
