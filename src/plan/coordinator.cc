#include "plan/coordinator.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>

namespace mgs::plan {
namespace {

struct GroupWork {
  double ready = 0;       // last tensor enqueued
  double select = 0;      // selection on the coordinator (kSeparate)
  double wire = 0;        // the exchange without a round
  double overlap = 0;     // the part of `wire` that may overlap the allgather before it
  bool blocking = false;  // agreed, hierarchical, dense: run to the end on the coordinator
};

double period(const CostModel& cost) { return std::max(cost.negotiation_s, cost.cycle_s); }

}  // namespace

double coordinatorStep(const std::vector<LayerInfo>& layers, const Groups& groups, const CostModel& cost,
                       Selection selection, const std::vector<DenseTensor>& dense_in, double phase_s,
                       std::vector<GroupTiming>* timeline) {
  const size_t G = groups.size();
  std::vector<GroupWork> work(G);
  std::vector<GroupTiming> t(G);
  double compute = 0;
  for (size_t g = 0; g < G; ++g) {
    GroupTiming& gt = t[g];
    gt.first = groups[g].front();
    gt.last = groups[g].back();
    for (int i : groups[g]) {
      compute += layers[i].backward_s;
      gt.elements += layers[i].elements;
    }
    const Exchange e = cost.chooseExchange(gt.elements);
    const double sel = cost.firstStageSeconds(e, gt.elements);
    GroupWork& w = work[g];
    gt.ready_s = compute;
    if (selection == Selection::kCompute) {
      compute += sel;  // on the compute stream: delays the rest of backward
      w.ready = compute;
    } else {
      w.ready = compute;
      w.select = sel;
    }
    w.wire = cost.wireSeconds(e, gt.elements);
    w.blocking = e != Exchange::kAllgather;
    w.overlap = w.blocking ? 0.0 : cost.allgather_overlap * std::min(w.wire, cost.allgather.startup());
  }
  std::vector<DenseTensor> dense = dense_in;
  std::stable_sort(dense.begin(), dense.end(),
                   [](const DenseTensor& a, const DenseTensor& b) { return a.ready_s < b.ready_s; });

  const double inf = std::numeric_limits<double>::infinity();
  const double p = period(cost);
  const int limit = std::max(1, cost.max_in_flight);
  double h = p > 0 ? phase_s - p : 0.0;  // the running iteration's start
  size_t next_g = 0, next_d = 0;
  std::deque<std::pair<size_t, double>> inflight;  // group, wire end
  std::vector<double> dense_inflight;              // wire ends of the dense allreduces in flight
  double last_ag_end = -inf, dense_done = 0, end = 0;
  auto notice = [&](size_t g, double at) {
    t[g].comm_end_s = at;
    end = std::max(end, at);
  };
  auto poll = [&](double at) {
    while (!inflight.empty() && inflight.front().second <= at) {
      notice(inflight.front().first, at);
      inflight.pop_front();
    }
    // Executor::poll: a dense allreduce that has ended completes its tensors here.
    for (auto it = dense_inflight.begin(); it != dense_inflight.end();) {
      if (*it <= at) {
        dense_done = std::max(dense_done, at);
        it = dense_inflight.erase(it);
      } else {
        ++it;
      }
    }
  };
  // Idle stretches are skipped to the next event, so the iterations are a
  // few per event; the bound is a guard only.
  for (long iter = 0; iter < 100000000; ++iter) {
    std::vector<size_t> declared;
    while (next_g < G && work[next_g].ready <= h) declared.push_back(next_g++);
    int64_t dense_elements = 0;
    while (next_d < dense.size() && dense[next_d].ready_s <= h) dense_elements += dense[next_d++].elements;
    double now = h + cost.negotiation_s;
    for (size_t g : declared) {
      t[g].negotiated_s = now;
      t[g].shared_round = declared.size() > 1 && g != declared.front();
    }
    // The allreduce without a round (allreduceSeconds would add one): in
    // flight beside the round's sparse buckets (Executor::startInFlight), or
    // to its end before them.
    if (dense_elements > 0) {
      const double wire = cost.allreduce.seconds(static_cast<double>(dense_elements) * cost.bytes_per_element);
      if (cost.dense_in_flight)
        dense_inflight.push_back(now + wire);
      else
        dense_done = now = now + wire;
    }
    for (size_t g : declared) {
      const GroupWork& w = work[g];
      t[g].select_start_s = now;
      t[g].sparsified_s = now = now + w.select;
      if (w.blocking) {
        t[g].comm_start_s = now;
        now += w.wire;
        notice(g, now);
        continue;
      }
      // SparsePipeline::pushInFlight: start, then wait for the oldest while more than the
      // limit are in flight, then poll.
      t[g].comm_start_s = now;
      const double wire_end = std::max(now + w.wire, last_ag_end + w.wire - w.overlap);
      last_ag_end = wire_end;
      inflight.emplace_back(g, wire_end);
      while (inflight.size() > static_cast<size_t>(limit)) {
        now = std::max(now, inflight.front().second);
        notice(inflight.front().first, now);
        inflight.pop_front();
      }
      poll(now);
    }
    poll(now);
    const bool more = next_g < G || next_d < dense.size();
    if (!more && inflight.empty() && dense_inflight.empty()) break;
    const double arrival =
        std::min(next_g < G ? work[next_g].ready : inf, next_d < dense.size() ? dense[next_d].ready_s : inf);
    double next = now;
    if (now < h + cost.cycle_s) next = arrival <= now ? now : std::min(h + cost.cycle_s, arrival);
    double done = inflight.empty() ? inf : inflight.front().second;
    for (double e : dense_inflight) done = std::min(done, e);
    if (next <= h) {
      next = std::max(h, std::min(arrival, done));  // a zero-length iteration (no round, no cycle): to the next event
    } else if (p > 0 && std::min(arrival, done) < inf) {
      // Skip idle iterations: one from s lasts p and does nothing when
      // s + p <= arrival (no enqueue before it or during it) and
      // s + negotiation_s < done (its poll finds nothing finished).
      const double by_arrival = std::floor((arrival - next) / p);
      const double by_done = std::ceil((done - next - cost.negotiation_s) / p);
      const double skip = std::min(by_arrival, by_done);
      if (skip >= 1) next += skip * p;
    }
    h = next;
  }
  if (timeline) *timeline = std::move(t);
  return std::max(end, dense_done);
}

double coordinatorTime(const std::vector<LayerInfo>& layers, const Groups& groups, const CostModel& cost,
                       Selection selection, const std::vector<DenseTensor>& dense) {
  const double p = period(cost);
  double sum = 0;
  for (int j = 0; j < kCoordinatorPhases; ++j)
    sum += coordinatorStep(layers, groups, cost, selection, dense, p * (j + 0.5) / kCoordinatorPhases);
  return sum / kCoordinatorPhases;
}

}  // namespace mgs::plan
