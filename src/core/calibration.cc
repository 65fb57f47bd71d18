#include "core/calibration.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <vector>

#include "common/check.h"
#include "common/logging.h"
#include "compress/synthetic_gradient.h"
#include "core/block_exchange.h"
#include "core/host_load.h"

namespace mgs {
namespace {

// A negotiation round's message: the ready bits of the cached names (one per
// name in use, as int64 words; a few hundred tensors) and a few flag words.
constexpr double kNegotiationBytes = 512;

// The stream of exchanges in flight (CostModel::inflight_overlap): its
// length, the bytes each rank sends (a small bucket's values and indices)
// and the repeats whose median is taken.
constexpr int kStreamN = 12;
constexpr size_t kStreamBytes = 512;
constexpr int kStreamReps = 5;
// The stream of small dense allreduces (CostModel::dense_overlap): each
// rank's bytes, a small dense bucket's, above the communicator's
// small-allreduce path (recursive doubling up to 8 KiB from 5 ranks on,
// comm/mpi/small_allreduce.h), so on Open MPI's allreduce like most of a
// layer-wise plan's dense buckets. At 4 KiB the stream read no faster than
// the table on 32 emulated hosts, while the job's larger dense buckets ran
// 18-19 ms apart against 27 ms priced (bench/NOTES.md).
constexpr size_t kDenseStreamBytes = 16 << 10;

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// timeMedian (collective_timing.h) with the median of the calls' CPU time
// on this thread in *cpu as well.
template <typename F>
Status timeCall(int reps, double* out, F&& fn, double* cpu) {
  MGS_RETURN_IF_ERROR(fn());
  std::vector<double> t, c;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    const double c0 = threadCpuSeconds();
    MGS_RETURN_IF_ERROR(fn());
    c.push_back(threadCpuSeconds() - c0);
    t.push_back(seconds(t0));
  }
  std::sort(t.begin(), t.end());
  std::sort(c.begin(), c.end());
  *out = t[t.size() / 2];
  if (cpu) *cpu = c[c.size() / 2];
  return Status::OK();
}

// One call of fn after a barrier (not timed), so that every rank starts
// it together: its time appended to *out.
template <typename F>
Status timeAfterBarrier(Communicator& comm, std::vector<double>* out, F&& fn) {
  MGS_RETURN_IF_ERROR(comm.barrier());
  const auto t0 = Clock::now();
  MGS_RETURN_IF_ERROR(fn());
  out->push_back(seconds(t0));
  return Status::OK();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

double allgatherOverlap(double one_s, double together_s, int k) {
  // K allgathers one after another take K x one; fully overlapped start-ups
  // take one (the block is small: the start-up is the whole call). The
  // model's K in flight end at one + (K - 1) x (one - overlap x one).
  if (!(one_s > 0) || k < 2 || !std::isfinite(together_s)) return 1.0;
  const double overlap = (k * one_s - together_s) / ((k - 1) * one_s);
  return std::min(1.0, std::max(0.0, overlap));
}

double denseOverlap(double table_s, double stream_s, int n) {
  if (!(table_s > 0) || n < 1 || !(stream_s > 0) || !std::isfinite(stream_s)) return 0.0;
  const double pace = stream_s / n;
  return std::min(1.0, std::max(0.0, 1.0 - pace / table_s));
}

void setAllgatherOverlaps(double one_s, double together_s, int k, double stream_one_s, double stream_s, int n,
                          plan::CostModel* out) {
  out->allgather_overlap = allgatherOverlap(one_s, together_s, k);
  // Exchanges in flight in the timeline model: n back-to-back exchanges of
  // one start-up each end at one + (n - 1) x (one - overlap x one), the
  // same form as k started together. The stream through the pipeline's
  // window is what the job's buckets do; k started at once share their
  // waits and read faster on many ranks.
  out->inflight_overlap = allgatherOverlap(stream_one_s, stream_s, n);
}

Status fitCollectives(const CollectiveSizes& sizes, const std::vector<double>& t, int P, plan::CostModel* out) {
  MGS_ENSURE(t.size() >= sizes.allreduce.size() + sizes.allgather.size() + sizes.broadcast.size(), kInternal,
             "collective timings: " << t.size() << " figures");
  std::vector<plan::Sample> ar, ag, bc;
  size_t i = 0;
  for (size_t b : sizes.allreduce) ar.emplace_back(double(b), t[i++]);
  for (size_t b : sizes.allgather) ag.emplace_back(double(b) * P, t[i++]);  // the model takes total bytes
  for (size_t b : sizes.broadcast) bc.emplace_back(double(b), t[i++]);
  // Piecewise-linear through the measured points, not one least-squares line:
  // a line fitted over 4 KiB..64 MiB is dominated by the large sizes and gets
  // the per-call startup (what decides small buckets) wrong.
  MGS_RETURN_IF_ERROR(plan::CommModel::table(ar, &out->allreduce));
  MGS_RETURN_IF_ERROR(plan::CommModel::table(ag, &out->allgather));
  MGS_RETURN_IF_ERROR(plan::CommModel::table(bc, &out->broadcast));
  return Status::OK();
}

size_t ringMinBytesFrom(const std::vector<size_t>& sizes, const std::vector<double>& ring_s,
                        const std::vector<double>& library_s) {
  // The library must win by kLibraryMargin: near ties stay on the ring, so
  // that noise between two runs of a job moves no group between algorithms
  // (each sums in its own order: bitwise different results).
  constexpr double kLibraryMargin = 0.9;
  size_t from = sizes.size();
  while (from > 0 && !(library_s[from - 1] < kLibraryMargin * ring_s[from - 1])) --from;
  if (from == sizes.size()) return sizes.empty() ? 0 : 2 * sizes.back();
  return sizes[from];
}

size_t fusionMaxTensorBytesFrom(const std::vector<size_t>& sizes, const std::vector<double>& ring_s,
                                const std::vector<double>& library_s, size_t copy_bytes, double copy_s, size_t floor) {
  const size_t n = std::min({sizes.size(), ring_s.size(), library_s.size()});
  if (n < 2 || copy_bytes == 0 || !(copy_s > 0)) return floor;
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < n; ++i) {
    const double x = static_cast<double>(sizes[i]), y = std::min(ring_s[i], library_s[i]);
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  const double den = static_cast<double>(n) * sxx - sx * sx;
  if (!(den > 0)) return floor;
  const double slope = (static_cast<double>(n) * sxy - sx * sy) / den;
  const double startup = (sy - slope * sx) / static_cast<double>(n);
  if (!(startup > 0)) return floor;
  // Two copies (in, and out) of b bytes at the copy rate cost one start-up.
  const double b = startup * (static_cast<double>(copy_bytes) / copy_s) / 2;
  if (!(b > static_cast<double>(floor))) return floor;
  return b >= 9.0e18 ? SIZE_MAX / 2 : static_cast<size_t>(b);
}

Status chooseAllreduceAlgorithm(Communicator& comm, RingChoice* out) {
  *out = RingChoice();
  const int P = comm.size();
  const size_t saved = comm.ringMinBytes();
  // Every rank asks the same backend: the answer is the same everywhere.
  if (P < 2 || !comm.setRingMinBytes(saved)) return Status::OK();
  const std::vector<size_t>& sizes = ringChoiceSizes();
  std::vector<float> buf(sizes.back() / 4, 0.0f);
  std::vector<double> t;  // ring at each size, then the library at each
  for (size_t forced : {size_t{0}, SIZE_MAX}) {
    comm.setRingMinBytes(forced);
    for (size_t b : sizes) {
      double s = 0;
      Status st = timeMedian(3, &s, [&] { return comm.allreduce(buf.data(), b / 4, MGS_FLOAT32, CommOp::kSum); });
      if (!st.ok()) {
        comm.setRingMinBytes(saved);
        return st;
      }
      t.push_back(s);
    }
  }
  comm.setRingMinBytes(saved);
  {
    // A host copy, as fusion copies a tensor in or out: kFusionCopyBytes, so
    // that source and destination together outgrow the caches of most hosts
    // (a copy from cache runs 3x faster here than one from memory).
    std::vector<char> src(kFusionCopyBytes, 1), dst(kFusionCopyBytes, 0);
    double s = 0;
    const Status copied = timeMedian(3, &s, [&] {
      std::memcpy(dst.data(), src.data(), src.size());
      asm volatile("" : : "r"(dst.data()) : "memory");  // the copy is used
      return Status::OK();
    });
    t.push_back(copied.ok() ? s : 0.0);
  }
  MGS_RETURN_IF_ERROR(comm.allreduce(t.data(), t.size(), MGS_FLOAT64, CommOp::kMax));
  out->measured = true;
  const auto n = static_cast<std::ptrdiff_t>(sizes.size());
  out->ring_s.assign(t.begin(), t.begin() + n);
  out->library_s.assign(t.begin() + n, t.begin() + 2 * n);
  out->copy_s = t[2 * sizes.size()];
  out->fusion_max_tensor_bytes = fusionMaxTensorBytesFrom(sizes, out->ring_s, out->library_s, kFusionCopyBytes,
                                                          out->copy_s, kFusionMaxTensorBytes);
  out->ring_min_bytes = ringMinBytesFrom(sizes, out->ring_s, out->library_s);
  comm.setRingMinBytes(out->ring_min_bytes);
  return Status::OK();
}

Status measureCostModel(Communicator& comm, const compress::Selector& selector, plan::CostModel* out) {
  const int P = comm.size();
  const CollectiveSizes cs = hostCollectiveSizes(P);
  const std::vector<size_t>& sel_n = calibrationSelectionSizes();
  std::vector<double> t;  // all timings, max-reduced in one call below
  // Where the start-up goes (rank 0's log): the collectives, the selector,
  // the small allgathers in flight.
  const auto t_start = Clock::now();
  double selection_s = 0, kind_s[3] = {0, 0, 0};
  std::vector<float> buf(cs.bufferBytes() / 4, 0.0f);
  std::vector<char> gathered(cs.recvBytes(P));
  MGS_RETURN_IF_ERROR(measureCollectives(comm, cs, buf.data(), gathered.data(), &t, kind_s));
  {
    const auto t_sel = Clock::now();
    std::vector<float> x(sel_n.back()), res(sel_n.back(), 0.0f);
    compress::syntheticGradient(x.data(), x.size());
    // What the pipeline does locally per bucket: add the gradient into the
    // residual, select in place, zero the output.
    std::vector<float> vals(selector.maxCount(sel_n.back())), outbuf(sel_n.back());
    std::vector<uint32_t> idx(vals.size());
    std::vector<char> ws(selector.workspaceBytes(sel_n.back()));
    std::vector<double> sel_cpu;
    for (size_t n : sel_n) {
      compress::SelectArgs a;
      a.x = nullptr;  // in place: res holds gradient + residual
      a.residual = res.data();
      a.n = n;
      a.outValues = vals.data();
      a.outIndices = idx.data();
      a.workspace = ws.data();
      a.workspaceBytes = ws.size();
      a.name = "calibration";
      double s;
      compress::SelectResult r;
      double c = 0;
      MGS_RETURN_IF_ERROR(timeCall(
          3, &s,
          [&] {
            addIntoFloat(x.data(), MGS_FLOAT32, n, 1.0, false, res.data());
            Status st = selector.select(a, &r);
            std::fill(outbuf.begin(), outbuf.begin() + n, 0.0f);
            return st;
          },
          &c));
      t.push_back(s);
      sel_cpu.push_back(c);
    }
    // A bucket's fixed CPU (CostModel::group_host_s): the selection's part
    // that does not scale with its size (the sample, the threshold search:
    // the smallest size's CPU less its share of the largest's per element),
    // plus the CPU of the collectives an agreed bucket starts (a broadcast
    // and an allreduce of a few hundred bytes) and of the allgather a
    // bucket of the other exchange starts, whichever costs more.
    const double per_element = sel_cpu.back() / static_cast<double>(sel_n.back());
    const double sel_fixed = std::max(0.0, sel_cpu.front() - per_element * static_cast<double>(sel_n.front()));
    double wall = 0, bc_cpu = 0, ar_cpu = 0, ag_cpu = 0;
    MGS_RETURN_IF_ERROR(timeCall(5, &wall, [&] { return comm.broadcast(buf.data(), 256, 0); }, &bc_cpu));
    MGS_RETURN_IF_ERROR(
        timeCall(5, &wall, [&] { return comm.allreduce(buf.data(), 64, MGS_FLOAT32, CommOp::kSum); }, &ar_cpu));
    MGS_RETURN_IF_ERROR(timeCall(5, &wall, [&] { return comm.allgather(buf.data(), 256, gathered.data()); }, &ag_cpu));
    t.push_back(sel_fixed + std::max(bc_cpu + ar_cpu, ag_cpu));
    selection_s = seconds(t_sel);
  }
  const auto t_flight = Clock::now();
  // Small allgathers in flight. `inFlight(n, window, bytes)` starts n of
  // them one after another, waits for the oldest while more than `window`
  // are in flight, then for the rest. Without nonblocking collectives every
  // start runs to its end: no overlap.
  constexpr int kOverlapK = 4;
  constexpr size_t kOverlapBytes = 4 << 10;  // start-up dominated
  static_assert(kStreamBytes <= kOverlapBytes, "one send buffer serves both");
  std::vector<char> send(kOverlapBytes, 0);
  std::vector<char> recv(std::max(kOverlapK * kOverlapBytes, kStreamN * kStreamBytes) * static_cast<size_t>(P));
  auto inFlight = [&](int n, size_t window, size_t bytes) {
    std::deque<std::unique_ptr<PendingCollective>> ops;
    Status st;
    for (int j = 0; j < n && st.ok(); ++j) {
      std::unique_ptr<PendingCollective> op;
      st = comm.startAllgather(send.data(), bytes, recv.data() + j * bytes * P, &op);
      if (op) ops.push_back(std::move(op));
      while (st.ok() && ops.size() > window) {
        st = ops.front()->wait();
        ops.pop_front();
      }
    }
    for (auto& op : ops) {
      const Status w = op->wait();
      if (st.ok()) st = w;
    }
    return st;
  };
  // CostModel::allgather_overlap (the coordinator model): one against
  // kOverlapK started together and then waited for.
  {
    double one = 0, k = 0;
    MGS_RETURN_IF_ERROR(timeMedian(5, &one, [&] { return inFlight(1, 1, kOverlapBytes); }));
    MGS_RETURN_IF_ERROR(timeMedian(5, &k, [&] { return inFlight(kOverlapK, kOverlapK, kOverlapBytes); }));
    t.push_back(one);
    t.push_back(k);
  }
  // CostModel::inflight_overlap, the pace of exchanges in flight as the
  // pipeline keeps them: kStreamN started through BlockExchange's window,
  // against one alone. Each measurement starts after a barrier so that every
  // rank starts together (the barrier is not timed).
  {
    std::vector<double> one_t, stream_t;
    MGS_RETURN_IF_ERROR(inFlight(kStreamN, BlockExchange::kMaxInFlight, kStreamBytes));  // warm-up
    for (int r = 0; r < kStreamReps; ++r)
      for (int n : {1, kStreamN})
        MGS_RETURN_IF_ERROR(timeAfterBarrier(comm, n == 1 ? &one_t : &stream_t,
                                             [&] { return inFlight(n, BlockExchange::kMaxInFlight, kStreamBytes); }));
    t.push_back(median(one_t));
    t.push_back(median(stream_t));
  }
  // CostModel::dense_overlap: kStreamN small allreduces back to back, each
  // waited for before the next starts, as the runtime runs dense buckets;
  // after a barrier, the median of kStreamReps.
  {
    auto stream = [&] {
      for (int j = 0; j < kStreamN; ++j)
        MGS_RETURN_IF_ERROR(comm.allreduce(buf.data(), kDenseStreamBytes / 4, MGS_FLOAT32, CommOp::kSum));
      return Status::OK();
    };
    MGS_RETURN_IF_ERROR(stream());  // warm-up
    std::vector<double> dense_t;
    for (int r = 0; r < kStreamReps; ++r) MGS_RETURN_IF_ERROR(timeAfterBarrier(comm, &dense_t, stream));
    t.push_back(median(dense_t));
  }
  const double flight_s = seconds(t_flight);
  MGS_RETURN_IF_ERROR(comm.allreduce(t.data(), t.size(), MGS_FLOAT64, CommOp::kMax));
  if (comm.rank() == 0)
    MGS_LOG_INFO(
        "cost model calibrated in {:.1f} s on {} ranks: allreduces up to {} KiB {:.1f} s, allgathers up to {} KiB "
        "a rank ({} KiB received) {:.1f} s, broadcasts {:.1f} s, selection {:.1f} s, small allgathers in flight "
        "and allreduces back to back {:.1f} s (rank 0's times)",
        seconds(t_start), P, cs.allreduce.empty() ? 0 : cs.allreduce.back() >> 10, kind_s[0],
        cs.allgather.empty() ? 0 : cs.allgather.back() >> 10, cs.recvBytes(P) >> 10, kind_s[1], kind_s[2], selection_s,
        flight_s);

  MGS_RETURN_IF_ERROR(fitCollectives(cs, t, P, out));
  size_t i = cs.allreduce.size() + cs.allgather.size() + cs.broadcast.size();
  std::vector<plan::Sample> sel;
  for (size_t n : sel_n) sel.emplace_back(double(n), t[i++]);
  out->group_host_s = t[i++];
  const double ag_one = t[i++], ag_k = t[i++];
  const double stream_one = t[i++], stream_n = t[i++];
  setAllgatherOverlaps(ag_one, ag_k, kOverlapK, stream_one, stream_n, kStreamN, out);
  const double dense_stream = t[i++];
  out->dense_overlap = denseOverlap(out->allreduce.seconds(double(kDenseStreamBytes)), dense_stream, kStreamN);
  // Every CPU selector (exact top-k included) is a constant number of passes: linear.
  MGS_RETURN_IF_ERROR(plan::SparsifyModel::fit(plan::SparsifyModel::Kind::kLinear, sel, &out->sparsify));
  // A negotiation round is an allreduce of a few hundred bytes (the ready
  // bits of the cached names); the table's first segment extrapolates it.
  out->negotiation_s = std::max(0.0, out->allreduce.seconds(kNegotiationBytes));
  return Status::OK();
}

}  // namespace mgs
