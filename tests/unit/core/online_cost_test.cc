// OnlineCost (src/core/online_cost.h): the refit of the cost model from
// measured exchanges and the re-plan decision, without MPI. The SUM-allreduce
// the pipeline does between pack() and onReduced() is done here by hand.
#include "core/online_cost.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <vector>

using mgs::OnlineCost;
using Clock = OnlineCost::Clock;

namespace {

mgs::plan::CostModel baseModel() {
  mgs::plan::CostModel m;
  m.allgather = mgs::plan::CommModel::linear(100e-6, 1e-9);  // 100 us + 1 ns/byte
  m.allreduce = mgs::plan::CommModel::linear(200e-6, 2e-9);
  m.sparsify.kind = mgs::plan::SparsifyModel::Kind::kLinear;
  m.sparsify.c_s = 1e-9;
  m.workers = 4;
  return m;
}

Clock::duration secs(double s) { return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)); }

// One rank's step: allgathers of the given sizes, each taking alpha + beta*bytes,
// back to back, and a span of `span_s`.
void step(OnlineCost& oc, Clock::time_point t0, const std::vector<double>& bytes, double alpha, double beta,
          double span_s) {
  oc.stepStarted(t0);
  auto t = t0;
  for (double b : bytes) {
    const auto end = t + secs(alpha + beta * b);
    oc.exchanged(OnlineCost::kAllgather, b, t, end);
    t = end;
  }
  // The span ends with the last exchange: one more, sized to end at span_s.
  if (t < t0 + secs(span_s))
    oc.exchanged(OnlineCost::kAllgather, 0, t0 + secs(span_s) - secs(alpha), t0 + secs(span_s));
}

std::vector<int64_t> packOne(OnlineCost& oc) {
  std::vector<int64_t> w;
  oc.pack(&w);
  return w;
}

// Four steps of two `term` calls, [s1, e1] and [s2, e2] in seconds from
// each step's start, checked against `base`: the model the check refits.
mgs::plan::CostModel refitFromTwoCalls(const mgs::plan::CostModel& base, OnlineCost::Term term, double s1, double e1,
                                       double s2, double e2) {
  OnlineCost oc(OnlineCost::Options{0.15});
  oc.setBase(base);
  oc.planned(0.030);
  auto t0 = Clock::now();
  for (int s = 0; s < 4; ++s) {
    oc.stepStarted(t0);
    oc.exchanged(term, 4096, t0 + secs(s1), t0 + secs(e1));
    oc.exchanged(term, 4096, t0 + secs(s2), t0 + secs(e2));
    (void)oc.onReduced(packOne(oc));
    t0 += secs(1.0);
  }
  return oc.refit();
}

}  // namespace

TEST_CASE("online refit recovers a changed startup and bandwidth", "[online]") {
  OnlineCost oc(OnlineCost::Options{0.15});
  oc.setBase(baseModel());
  oc.planned(0.010);
  // The network got slower: 300 us + 2 ns/byte, sizes from 4 KiB to 4 MiB.
  const std::vector<double> sizes = {4096, 65536, 1 << 20, 4 << 20};
  auto t0 = Clock::now();
  for (int s = 0; s < 6; ++s) {
    step(oc, t0, sizes, 300e-6, 2e-9, 0);
    (void)oc.onReduced(packOne(oc));
    t0 += secs(1.0);
  }
  const mgs::plan::CostModel m = oc.refit();
  // Wire units: 256 bytes, 1 us: the fit is good to a few us.
  CHECK(m.allgather.seconds(4096) == Approx(300e-6 + 2e-9 * 4096).margin(5e-6));
  CHECK(m.allgather.seconds(4 << 20) == Approx(300e-6 + 2e-9 * (4 << 20)).margin(20e-6));
  CHECK(m.allgather.seconds(16 << 20) == Approx(300e-6 + 2e-9 * (16 << 20)).epsilon(0.02));  // extrapolated
  // Terms without measurements keep the base.
  CHECK(m.allreduce.seconds(1 << 20) == baseModel().allreduce.seconds(1 << 20));
  CHECK(m.sparsify.c_s == baseModel().sparsify.c_s);
}

TEST_CASE("online refit with one bucket size shifts the startup only", "[online]") {
  mgs::plan::CommModel base = mgs::plan::CommModel::linear(100e-6, 1e-9);
  // 5 calls of 1 MiB measured at 2 ms each; the base says 1.149 ms.
  const int64_t x = (1 << 20) / 256, y = 2000, yhat = 1149;
  const int64_t t[7] = {5, 5 * x, 5 * x * x, 5 * y, 5 * x * y, 5 * yhat, 5 * x * yhat};
  const mgs::plan::CommModel m = OnlineCost::correct(base, t);
  CHECK(m.seconds(1 << 20) == Approx(2e-3).margin(2e-6));
  CHECK(m.startup() == Approx(100e-6 + 851e-6).margin(2e-6));
  CHECK(m.seconds(4 << 20) - m.seconds(1 << 20) == Approx(base.seconds(4 << 20) - base.seconds(1 << 20)));
}

TEST_CASE("online refit never predicts a negative time", "[online]") {
  mgs::plan::CommModel base = mgs::plan::CommModel::linear(1e-3, 1e-9);
  // Everything 10x faster than the base, at one size: an intercept shift would
  // go below zero at 0 bytes, so the model is scaled instead.
  const int64_t x = 4096 / 256, yhat = 1004, y = 100;
  const int64_t t[7] = {4, 4 * x, 4 * x * x, 4 * y, 4 * x * y, 4 * yhat, 4 * x * yhat};
  const mgs::plan::CommModel m = OnlineCost::correct(base, t);
  for (double b : {0.0, 1.0, 4096.0, 1e6, 1e9}) CHECK(m.seconds(b) >= 0);
  CHECK(m.seconds(4096) == Approx(1.004e-3 * 100 / 1004).epsilon(0.01));
  // No calls: unchanged.
  const int64_t none[7] = {0, 0, 0, 0, 0, 0, 0};
  CHECK(OnlineCost::correct(base, none).seconds(4096) == base.seconds(4096));
}

TEST_CASE("online refit scales the selection time", "[online]") {
  OnlineCost oc(OnlineCost::Options{0.15});
  oc.setBase(baseModel());
  oc.planned(0.010);
  for (int s = 0; s < 3; ++s) {
    oc.selected(1 << 20, 3e-9 * (1 << 20));  // 3x the base's 1 ns/element
    (void)oc.onReduced(packOne(oc));
  }
  CHECK(oc.refit().sparsify.c_s == Approx(3e-9).epsilon(0.01));
}

TEST_CASE("online decision: strikes, first step ignored, cool-down, tolerance", "[online]") {
  OnlineCost::Options o;
  o.tolerance = 0.15;
  o.strikes = 3;
  o.cooldown = 10;
  OnlineCost oc(o);
  oc.setBase(baseModel());
  auto reduced = [&](double span_s) {
    std::vector<int64_t> w(oc.wireLength(), 0);
    w[0] = static_cast<int64_t>(span_s * 1e6) * 2;  // two ranks
    w[1] = 2;
    return oc.onReduced(w);
  };
  // No plan yet: nothing is compared.
  CHECK_FALSE(reduced(0.050).checked);
  oc.planned(0.010);
  CHECK_FALSE(reduced(0.050).checked);  // the plan's first step
  // Within tolerance (+14%, -14%): no strikes.
  for (int i = 0; i < 3; ++i) CHECK(reduced(0.0114).steps_off == 0);
  CHECK(reduced(0.0086).steps_off == 0);
  // 30% slow: strikes count, but the cool-down (10 steps since the plan) holds.
  int steps = 5;
  OnlineCost::Decision d;
  for (; steps < 9; ++steps) {
    d = reduced(0.013);
    CHECK(d.checked);
    CHECK_FALSE(d.replan);
  }
  CHECK(d.steps_off == 4);
  CHECK(d.measured_s == Approx(0.013));
  CHECK(d.predicted_s == Approx(0.010));
  // One good step resets the strikes.
  CHECK(reduced(0.010).steps_off == 0);
  ++steps;
  d = reduced(0.013);
  CHECK(d.steps_off == 1);
  d = reduced(0.013);
  CHECK_FALSE(d.replan);  // 2 strikes
  d = reduced(0.013);
  CHECK(d.replan);  // 3 strikes, 13 steps since the plan
}

TEST_CASE("online decision backs off when re-planning does not help", "[online]") {
  OnlineCost::Options o;
  o.tolerance = 0.15;
  OnlineCost oc(o);
  oc.setBase(baseModel());
  std::vector<int64_t> w(oc.wireLength(), 0);
  w[0] = 20000;  // 20 ms, one rank: always 100% off a 10 ms prediction
  w[1] = 1;
  std::vector<int> gaps;
  int since = 0;
  oc.planned(0.010);
  for (int s = 0; s < 200 && gaps.size() < 4; ++s) {
    ++since;
    if (oc.onReduced(w).replan) {
      gaps.push_back(since);
      oc.planned(0.010);  // the new plan predicts the same: it will not help
      since = 0;
    }
  }
  REQUIRE(gaps.size() == 4);
  CHECK(gaps[0] == 10);
  CHECK(gaps[1] == 20);
  CHECK(gaps[2] == 40);
  CHECK(gaps[3] == 80);
}

TEST_CASE("online re-planning is off at tolerance 0", "[online]") {
  OnlineCost oc(OnlineCost::Options{0.0});
  CHECK_FALSE(oc.enabled());
  oc.setBase(baseModel());
  oc.planned(0.010);
  std::vector<int64_t> w(oc.wireLength(), 0);
  w[0] = 100000;
  w[1] = 1;
  for (int s = 0; s < 50; ++s) CHECK_FALSE(oc.onReduced(w).replan);
}

TEST_CASE("online decision and refit are identical on every rank", "[online]") {
  // Two ranks measure different things; after the (hand-made) SUM-allreduce
  // both hold the same sums, so both decide and refit the same, bit for bit.
  OnlineCost r0(OnlineCost::Options{0.15}), r1(OnlineCost::Options{0.15});
  for (OnlineCost* r : {&r0, &r1}) {
    r->setBase(baseModel());
    r->planned(0.005);
  }
  auto t0 = Clock::now();
  bool any = false;
  for (int s = 0; s < 20; ++s) {
    step(r0, t0, {4096, 1 << 20}, 250e-6 + 1e-6 * s, 1.5e-9, 0.009);
    step(r1, t0 + secs(1e-4), {4096, 1 << 20}, 260e-6, 1.7e-9, 0.008 + 1e-4 * s);
    r0.selected(100000, 2e-4);
    std::vector<int64_t> a = packOne(r0), b = packOne(r1);
    for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
    const OnlineCost::Decision d0 = r0.onReduced(a), d1 = r1.onReduced(a);
    CHECK(d0.replan == d1.replan);
    CHECK(d0.measured_s == d1.measured_s);
    CHECK(d0.steps_off == d1.steps_off);
    any |= d0.replan;
    const mgs::plan::CostModel m0 = r0.refit(), m1 = r1.refit();
    for (double bytes : {0.0, 512.0, 65536.0, 1e7}) CHECK(m0.allgather.seconds(bytes) == m1.allgather.seconds(bytes));
    CHECK(m0.sparsify.c_s == m1.sparsify.c_s);
    if (d0.replan) {
      r0.planned(0.005);
      r1.planned(0.005);
    }
    t0 += secs(1.0);
  }
  CHECK(any);  // spans of 8-10 ms against 5 ms predicted: it did re-plan
}

TEST_CASE("online exchange time is the service time of serialised calls", "[online]") {
  OnlineCost oc(OnlineCost::Options{0.15});
  mgs::plan::CostModel m = baseModel();
  m.allgather = mgs::plan::CommModel::linear(0, 1e-9);
  oc.setBase(m);
  oc.planned(0.010);
  const auto t0 = Clock::now();
  // Two calls started together, each served in 1 ms one after the other: the
  // second's end - start is 2 ms, but it is charged 1 ms.
  oc.exchanged(OnlineCost::kAllgather, 1e6, t0, t0 + secs(1e-3));
  oc.exchanged(OnlineCost::kAllgather, 1e6, t0, t0 + secs(2e-3));
  std::vector<int64_t> w;
  oc.stepStarted(t0);
  oc.pack(&w);
  const int64_t* ag = &w[2];
  CHECK(ag[0] == 2);
  CHECK(ag[3] == 2000);  // 2 x 1000 us
  // The span: first gradient to the last exchange's end.
  CHECK(w[0] == 2000);
  CHECK(w[1] == 1);
}

TEST_CASE("online per-bucket ends: the mean over ranks, only steps where every rank finished the bucket", "[online]") {
  OnlineCost r0(OnlineCost::Options{0.15}), r1(OnlineCost::Options{0.15});
  r0.setRanks(2, 0);
  r1.setRanks(2, 1);
  for (OnlineCost* r : {&r0, &r1}) {
    r->setBase(baseModel());
    r->planned(0.004, {0.001, 0.003, 0.004}, {0.0005, 0.002, 0.0035});
  }
  REQUIRE(r0.buckets().size() == 3);
  CHECK(r0.buckets()[1].predicted_end_s == 0.003);
  CHECK(r0.buckets()[1].predicted_ready_s == 0.002);
  auto t0 = Clock::now();
  // One rank's step `s`: bucket b ends at ends[b] ms from its first gradient
  // (negative: not finished in the step), its last gradient 0.5 ms before
  // on rank 0 and 0.25 ms before on rank 1; the span ends at the last one.
  auto run = [&](OnlineCost& r, uint64_t s, const std::vector<double>& ends_ms) {
    r.stepStarted(t0, s);
    double last = 0;
    for (size_t b = 0; b < ends_ms.size(); ++b)
      if (ends_ms[b] >= 0) {
        r.bucketFinished(static_cast<int>(b), s, t0 + secs((ends_ms[b] - (&r == &r0 ? 0.5 : 0.25)) * 1e-3),
                         t0 + secs(ends_ms[b] * 1e-3));
        last = std::max(last, ends_ms[b]);
      }
    r.exchangeEnded(t0 + secs(last * 1e-3));
    // A bucket of another step (it ran before this step began) or of no plan is not counted.
    r.bucketFinished(0, s + 1, t0, t0 + secs(9e-3));
    r.bucketFinished(-1, s, t0, t0 + secs(9e-3));
  };
  auto reduce = [&](uint64_t s, const std::vector<double>& a, const std::vector<double>& b) {
    run(r0, s, a);
    run(r1, s, b);
    std::vector<int64_t> w0 = packOne(r0), w1 = packOne(r1);
    REQUIRE(w0.size() == r0.wireLength());
    for (size_t i = 0; i < w0.size(); ++i) w0[i] += w1[i];
    r0.onReduced(w0);
    r1.onReduced(w0);
    t0 += secs(1.0);
  };
  reduce(1, {1, 2, 3}, {1, 2, 3});  // the first step of a plan is not compared
  CHECK(r0.buckets()[0].checks == 0);
  reduce(2, {1.0, 2.0, 4.0}, {2.0, 3.0, 5.0});
  // Rank 1 did not finish bucket 1 in step 3: that step does not count for it.
  reduce(3, {1.5, 2.5, 4.5}, {2.5, -1, 5.5});
  for (const OnlineCost* r : {&r0, &r1}) {
    const auto& f = r->buckets();
    CHECK(f[0].checks == 2);
    CHECK(f[1].checks == 1);
    CHECK(f[2].checks == 2);
    CHECK(f[0].last_measured_end_s == Approx(0.002).margin(1e-6));   // (1.5 + 2.5) / 2 ms
    CHECK(f[0].measured_end_sum_s == Approx(0.0035).margin(2e-6));   // 1.5 + 2.0 ms
    CHECK(f[1].last_measured_end_s == Approx(0.0025).margin(1e-6));  // step 2's: (2 + 3) / 2
    CHECK(f[2].last_measured_end_s == Approx(0.005).margin(1e-6));
    // Ready: (1.5 - 0.5 + 2.5 - 0.25) / 2 ms in step 3, plus step 2's (0.5 + 1.75) / 2.
    CHECK(f[0].last_measured_ready_s == Approx(0.001625).margin(1e-6));
    CHECK(f[0].measured_ready_sum_s == Approx(0.00275).margin(2e-6));
  }
  // This rank's own ends of the last step, for the timeline.
  REQUIRE(r1.lastBucketEnds().size() == 3);
  CHECK(r1.lastBucketEnds()[1] == Clock::time_point{});
  CHECK(r1.lastBucketEnds()[2] > r1.lastBucketEnds()[0]);
  // A new plan starts its figures afresh; one without per-bucket ends says so.
  r0.planned(0.004);
  CHECK(r0.buckets().empty());
  r0.planned(0.004, {-1.0, 0.002});
  CHECK(r0.buckets()[0].predicted_end_s < 0);
  CHECK(r0.buckets()[1].checks == 0);
}

TEST_CASE("online span and bucket times are the last rank to start's: its lead over the first declaration",
          "[online]") {
  // Rank 0's first gradient comes 90 ms before rank 1's; the first round
  // that finds it on both ends 100 ms after rank 0's (10 ms after rank 1's).
  // Each rank's one bucket is declared 30 ms later and ends 50 ms after the
  // first declaration. Each rank's own span is 150 and 60 ms (mean 105); the
  // step, for the rank that started last, took 60 ms.
  auto run = [](int ranks, double* measured, double* end, double* ready, Clock::duration* box_lead) {
    OnlineCost r0(OnlineCost::Options{0.15}), r1(OnlineCost::Options{0.15});
    r0.setRanks(ranks, 0);
    r1.setRanks(ranks, 1);
    for (OnlineCost* r : {&r0, &r1}) {
      r->setBase(baseModel());
      r->planned(0.060, {0.060}, {0.040});
    }
    std::vector<int64_t> sums;
    OnlineCost::Decision d;
    for (uint64_t s = 1; s <= 2; ++s) {  // the first step of a plan is not compared
      const auto t0 = Clock::now();
      const auto decl = t0 + secs(0.100);
      r0.stepStarted(t0, s, decl);
      r1.stepStarted(t0 + secs(0.090), s, decl);
      for (OnlineCost* r : {&r0, &r1}) {
        r->bucketFinished(0, s, decl + secs(0.030), decl + secs(0.050));
        r->exchangeEnded(decl + secs(0.050));
      }
      std::vector<int64_t> w0, w1;
      r0.pack(&w0);
      r1.pack(&w1);
      REQUIRE(w0.size() == r0.wireLength());
      for (size_t i = 0; i < w0.size(); ++i) w0[i] += w1[i];
      d = r0.onReduced(w0);
      r1.onReduced(w0);
      Clock::time_point start, stop;
      REQUIRE(r0.lastSpan(&start, &stop));
      *box_lead = decl - start;
    }
    REQUIRE(d.checked);
    *measured = d.measured_s;
    *end = r0.buckets()[0].last_measured_end_s;
    *ready = r0.buckets()[0].last_measured_ready_s;
  };
  double measured = 0, end = 0, ready = 0;
  Clock::duration lead{};
  run(2, &measured, &end, &ready, &lead);
  CHECK(measured == Approx(0.060).margin(2e-6));
  CHECK(end == Approx(0.060).margin(2e-6));
  CHECK(ready == Approx(0.040).margin(2e-6));
  CHECK(std::chrono::duration<double>(lead).count() == Approx(0.010).margin(2e-6));  // the timeline box
  // Too many ranks for a slot each: the mean lead, each rank's own span.
  run(OnlineCost::kMaxLeadRanks + 1, &measured, &end, &ready, &lead);
  CHECK(measured == Approx(0.105).margin(2e-6));
  CHECK(end == Approx(0.105).margin(2e-6));
}

TEST_CASE("an allgather started behind one in flight is compared with the model's in-flight price", "[online]") {
  // The model: 10 ms an allgather, half its start-up overlapping the one in
  // flight before it.
  mgs::plan::CostModel base = baseModel();
  base.allgather = mgs::plan::CommModel::linear(10e-3, 0);
  base.inflight_overlap = 0.5;
  // Two allgathers a step: the first [0, first_end], the second
  // [second_start, second_end]; the refit's price of one.
  auto refitted = [&](double first_end, double second_start, double second_end) {
    return refitFromTwoCalls(base, OnlineCost::kAllgather, 0, first_end, second_start, second_end)
        .allgather.seconds(4096);
  };
  // The second started 1 ms into the first and ended 5 ms after it: what the
  // model charges it there, so the refit leaves the start-up at 10 ms
  // (compared with the whole 10 ms, its 5 ms would have lowered it).
  CHECK(refitted(10e-3, 1e-3, 15e-3) == Approx(10e-3).margin(20e-6));
  // Both alone, 12 ms each: the start-up rises to 12 ms.
  CHECK(refitted(12e-3, 12e-3, 24e-3) == Approx(12e-3).margin(20e-6));
}

TEST_CASE("an allreduce back to back behind another is compared with the model's queued price", "[online]") {
  // The model: 10 ms an allreduce, a queued one saving 40 % of its start-up.
  mgs::plan::CostModel base = baseModel();
  base.allreduce = mgs::plan::CommModel::linear(10e-3, 0);
  base.dense_overlap = 0.4;
  // Two blocking allreduces a step: the first [0, 10 ms], the second from
  // `gap` after the first's end, taking `second` seconds; the refit's price
  // of one.
  auto refitted = [&](double gap, double second) {
    return refitFromTwoCalls(base, OnlineCost::kAllreduce, 0, 10e-3, 10e-3 + gap, 10e-3 + gap + second)
        .allreduce.seconds(4096);
  };
  // Back to back, 6 ms: the queued price, so the start-up stays 10 ms
  // (compared with the whole 10 ms, it would have dropped to 8).
  CHECK(refitted(0.0, 6e-3) == Approx(10e-3).margin(20e-6));
  // Started 5 ms after the first ended: alone, compared with the whole
  // price; 10 ms: no change either.
  CHECK(refitted(5e-3, 10e-3) == Approx(10e-3).margin(20e-6));
}
