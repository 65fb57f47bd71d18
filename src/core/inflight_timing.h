// How far the job's sparse allgathers in flight overlap, as the coordinator
// saw them (the timeline model's CostModel::inflight_overlap, measured in the
// job instead of at init).
//
// The model: an exchange started while the one before it is in flight ends
// no earlier than that one's end + T - ov x S (T: its wire time, S: its
// start-up, both from the calibrated allgather model), nor than its own
// start + T. So for an exchange that started at least S before the previous
// one ended, the model's end is exactly prev_end + T - ov x S, and
//   x = prev_end + T - end
// is how much of its start-up it hid behind the one before. Over such
// pairs, ov = sum x / sum S (clamped to [0, 1]). Pairs that started later
// (or after the previous ended) say nothing about ov and are skipped.
//
// Why: init's measurement (four small allgathers started together against
// one) is taken in a few milliseconds on idle cores, and on 16 emulated
// hosts sharing 2 cores it read 0.17-0.97 from one init to the next while
// the job's exchanges in flight overlapped at about 0.7 (bench/NOTES.md):
// a plan of many buckets was then priced at up to 1.8x its measured span.
//
// Times are seconds on any one clock; `end` in completion order (the
// pipeline finishes exchanges oldest first). Coordinator thread only.
#pragma once

#include <algorithm>
#include <cstdint>

namespace mgs {

class InflightTiming {
 public:
  // One allgather that finished: started at `start`, seen finished at
  // `end`; `wire_s` and `startup_s` are the calibrated model's T and S at
  // its size.
  void add(double start, double end, double wire_s, double startup_s) {
    if (have_prev_ && startup_s > 0 && wire_s > 0 && prev_end_ - start >= startup_s) {
      hidden_s_ += prev_end_ + wire_s - end;
      startup_sum_s_ += startup_s;
      ++pairs_;
    }
    prev_end_ = have_prev_ ? std::max(prev_end_, end) : end;
    have_prev_ = true;
  }
  // Pairs that said something about the overlap since the last reset.
  uint64_t pairs() const { return pairs_; }
  // sum x / sum S in [0, 1]; `fallback` when no pair was seen.
  double overlap(double fallback) const {
    if (pairs_ == 0 || !(startup_sum_s_ > 0)) return fallback;
    return std::clamp(hidden_s_ / startup_sum_s_, 0.0, 1.0);
  }
  void reset() { *this = InflightTiming(); }

 private:
  bool have_prev_ = false;
  double prev_end_ = 0;
  double hidden_s_ = 0, startup_sum_s_ = 0;
  uint64_t pairs_ = 0;
};

}  // namespace mgs
