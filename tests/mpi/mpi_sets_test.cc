// Real multi-rank tests of alltoall, reducescatter, process sets and join
// through the C ABI, run by ctest as
//   mpirun -np {2,3,4} --oversubscribe mgs_mpi_sets_test <scenario>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "mpi_harness.h"

using mpitest::cpuTensor;
using mpitest::g_rank;

namespace {

int g_size = 0;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Wait for `h` and return its status, with its message in *msg.
mgs_status_t waitFor(mgs_handle_t h, std::string* msg = nullptr) {
  const mgs_status_t st = mgs_wait(h);
  if (msg) *msg = mgs_handle_error(h);
  return st;
}

// The result of a completed alltoall (or allgather): shape, rows per rank, bytes.
template <typename T>
std::vector<T> resultOf(mgs_handle_t h, mgs_dtype_t dtype, std::vector<int64_t>* shape, std::vector<int64_t>* rows,
                        int ranks) {
  int32_t ndim = 0;
  shape->assign(MGS_MAX_DIMS, 0);
  EXPECT_OK(mgs_allgather_output_shape(h, &ndim, shape->data()));
  shape->resize(static_cast<size_t>(ndim));
  rows->assign(static_cast<size_t>(ranks), -1);
  EXPECT_OK(mgs_allgather_rank_sizes(h, rows->data()));
  size_t n = 1;
  for (int64_t d : *shape) n *= static_cast<size_t>(d);
  std::vector<T> out(n);
  mgs_tensor_t o = cpuTensor(out.data(), dtype, *shape);
  EXPECT_OK(mgs_allgather_copy_output(h, &o));
  return out;
}

// ------------------------------------------------------------------ alltoall --

void scenarioAlltoall() {
  const int p = g_size, me = g_rank;
  // Rank r sends (r + q) % 3 rows to rank q; a row holds {r, q, i}.
  std::vector<int64_t> splits(p);
  std::vector<int32_t> data;
  for (int q = 0; q < p; ++q) {
    splits[q] = (me + q) % 3;
    for (int i = 0; i < splits[q]; ++i) data.insert(data.end(), {me, q, i});
  }
  std::vector<int64_t> shape{static_cast<int64_t>(data.size() / 3), 3};
  mgs_tensor_t in = cpuTensor(data.data(), MGS_INT32, shape);
  mgs_handle_t h = 0;
  EXPECT_OK(mgs_alltoall_async("a2a.uneven", &in, splits.data(), MGS_GLOBAL_PROCESS_SET, &h));
  EXPECT(waitFor(h) == MGS_SUCCESS, "alltoall failed: %s", mgs_handle_error(h));
  std::vector<int64_t> oshape, rows;
  const auto out = resultOf<int32_t>(h, MGS_INT32, &oshape, &rows, p);
  mgs_release(h);
  size_t k = 0;
  int64_t total = 0;
  for (int s = 0; s < p; ++s) {
    EXPECT(rows[s] == (s + me) % 3, "rows from rank %d: %lld, expected %d", s, (long long)rows[s], (s + me) % 3);
    for (int i = 0; i < (s + me) % 3; ++i, k += 3)
      EXPECT(k + 2 < out.size() && out[k] == s && out[k + 1] == me && out[k + 2] == i,
             "row %d from rank %d is wrong", i, s);
    total += (s + me) % 3;
  }
  EXPECT(oshape.size() == 2 && oshape[0] == total && oshape[1] == 3, "output shape [%lld, ...]", (long long)oshape[0]);

  // Equal parts (splits NULL), float64, 3 dims.
  std::vector<double> eq(static_cast<size_t>(2 * p * 2));
  for (size_t i = 0; i < eq.size(); ++i) eq[i] = me * 1000 + static_cast<double>(i);
  std::vector<int64_t> eshape{2 * p, 1, 2};
  mgs_tensor_t ein = cpuTensor(eq.data(), MGS_FLOAT64, eshape);
  EXPECT_OK(mgs_alltoall_async("a2a.equal", &ein, nullptr, MGS_GLOBAL_PROCESS_SET, &h));
  EXPECT(waitFor(h) == MGS_SUCCESS, "equal alltoall failed: %s", mgs_handle_error(h));
  const auto eout = resultOf<double>(h, MGS_FLOAT64, &oshape, &rows, p);
  mgs_release(h);
  for (int s = 0; s < p; ++s)
    for (int i = 0; i < 4; ++i)
      EXPECT(eout[static_cast<size_t>(s * 4 + i)] == s * 1000 + me * 4 + i, "equal part from rank %d wrong", s);

  // Errors every rank finds alone: splits over the first dimension, unequal parts.
  std::vector<int64_t> bad(p, 1);
  bad[0] = 100;
  EXPECT(mgs_alltoall_async("a2a.badsplits", &in, bad.data(), 0, &h) == MGS_ERR_INVALID_ARGUMENT &&
             contains(mgs_last_error(), "a2a.badsplits"),
         "splits beyond the first dimension: %s", mgs_last_error());
  std::vector<int64_t> oddshape{2 * p + 1};
  std::vector<float> odd(static_cast<size_t>(2 * p + 1));
  mgs_tensor_t oin = cpuTensor(odd.data(), MGS_FLOAT32, oddshape);
  EXPECT(mgs_alltoall_async("a2a.unequal", &oin, nullptr, 0, &h) == MGS_ERR_INVALID_ARGUMENT &&
             contains(mgs_last_error(), "not a multiple"),
         "unequal parts: %s", mgs_last_error());
  // Ranks disagree on the dtype: MGS_ERR_MISMATCH on every rank, naming the tensor.
  std::vector<int64_t> mshape{p};
  std::vector<int32_t> mi(static_cast<size_t>(p));
  std::vector<float> mf(static_cast<size_t>(p));
  mgs_tensor_t mt = me == 0 ? cpuTensor(mi.data(), MGS_INT32, mshape) : cpuTensor(mf.data(), MGS_FLOAT32, mshape);
  EXPECT_OK(mgs_alltoall_async("a2a.dtype", &mt, nullptr, 0, &h));
  std::string msg;
  EXPECT(waitFor(h, &msg) == MGS_ERR_MISMATCH && contains(msg, "a2a.dtype") && contains(msg, "dtype"),
         "dtype mismatch: %s", msg.c_str());
  mgs_release(h);
}

// ------------------------------------------------------------- reducescatter --

void scenarioReducescatter() {
  const int p = g_size, me = g_rank;
  const int64_t d0 = 2 * p + 1, cols = 3;  // uneven: the first rank gets one row more
  std::vector<float> in(static_cast<size_t>(d0 * cols));
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i + me);
  const int64_t rows = d0 / p + (me < d0 % p ? 1 : 0);
  int64_t first = 0;
  for (int q = 0; q < me; ++q) first += d0 / p + (q < d0 % p ? 1 : 0);
  std::vector<int64_t> ishape{d0, cols}, oshape{rows, cols};
  for (mgs_reduce_op_t op : {MGS_REDUCE_SUM, MGS_REDUCE_AVERAGE}) {
    std::vector<float> out(static_cast<size_t>(rows * cols), -1);
    mgs_tensor_t ti = cpuTensor(in.data(), MGS_FLOAT32, ishape), to = cpuTensor(out.data(), MGS_FLOAT32, oshape);
    mgs_handle_t h = 0;
    const std::string name = std::string("rs.") + (op == MGS_REDUCE_SUM ? "sum" : "avg");
    EXPECT_OK(mgs_reducescatter_async(name.c_str(), &ti, &to, op, 2.0, 0.5, 0, &h));
    EXPECT(waitFor(h) == MGS_SUCCESS, "reducescatter failed: %s", mgs_handle_error(h));
    mgs_release(h);
    for (int64_t i = 0; i < rows * cols; ++i) {
      const int64_t g = first * cols + i;  // index in the full tensor
      double sum = 0;
      for (int r = 0; r < p; ++r) sum += static_cast<double>(g + r);
      const double want = op == MGS_REDUCE_SUM ? sum : sum / p;
      EXPECT(std::fabs(out[static_cast<size_t>(i)] - want) < 1e-4, "%s[%lld] = %f, expected %f", name.c_str(),
             (long long)i, out[static_cast<size_t>(i)], want);
    }
  }
  // Large enough for the ring's reduce-scatter half (float sums of 64 KiB or
  // more), with uneven parts: every element is the exact sum of small
  // integers, so any order of the sum gives the same bits.
  {
    const int64_t big0 = 4096 * p + 3, bcols = 5;  // the first 3 ranks get one row more
    std::vector<float> bin(static_cast<size_t>(big0 * bcols));
    for (size_t i = 0; i < bin.size(); ++i) bin[i] = static_cast<float>((i % 1000) + static_cast<size_t>(me));
    const int64_t brows = big0 / p + (me < big0 % p ? 1 : 0);
    int64_t bfirst = 0;
    for (int q = 0; q < me; ++q) bfirst += big0 / p + (q < big0 % p ? 1 : 0);
    std::vector<float> bout(static_cast<size_t>(brows * bcols), -1);
    std::vector<int64_t> bishape{big0, bcols}, boshape{brows, bcols};
    mgs_tensor_t ti = cpuTensor(bin.data(), MGS_FLOAT32, bishape), to = cpuTensor(bout.data(), MGS_FLOAT32, boshape);
    mgs_handle_t hb = 0;
    EXPECT_OK(mgs_reducescatter_async("rs.big", &ti, &to, MGS_REDUCE_SUM, 1, 1, 0, &hb));
    EXPECT(waitFor(hb) == MGS_SUCCESS, "large reducescatter failed: %s", mgs_handle_error(hb));
    mgs_release(hb);
    int bad = 0;
    for (int64_t i = 0; i < brows * bcols; ++i) {
      const size_t g = static_cast<size_t>(bfirst * bcols + i);
      const double want = static_cast<double>(p) * static_cast<double>(g % 1000) + p * (p - 1) / 2.0;
      bad += bout[static_cast<size_t>(i)] != static_cast<float>(want);
    }
    EXPECT(bad == 0, "large reducescatter: %d of %lld entries wrong", bad, (long long)(brows * bcols));
  }
  // Integers average exactly where the sum divides.
  std::vector<int64_t> li(static_cast<size_t>(p * 2), me + 1), lo(2, 0);
  std::vector<int64_t> lshape{p * 2}, loshape{2};
  mgs_tensor_t lt = cpuTensor(li.data(), MGS_INT64, lshape), lto = cpuTensor(lo.data(), MGS_INT64, loshape);
  mgs_handle_t h = 0;
  EXPECT_OK(mgs_reducescatter_async("rs.int", &lt, &lto, MGS_REDUCE_SUM, 1, 1, 0, &h));
  EXPECT(waitFor(h) == MGS_SUCCESS && lo[0] == p * (p + 1) / 2 && lo[1] == lo[0], "int64 reducescatter: %lld",
         (long long)lo[0]);
  mgs_release(h);
  // A wrong output shape fails at enqueue; differing shapes fail on every rank.
  std::vector<float> wrong(static_cast<size_t>(d0 * cols));
  mgs_tensor_t ti = cpuTensor(in.data(), MGS_FLOAT32, ishape), tw = cpuTensor(wrong.data(), MGS_FLOAT32, ishape);
  EXPECT(mgs_reducescatter_async("rs.out", &ti, &tw, MGS_REDUCE_SUM, 1, 1, 0, &h) == MGS_ERR_INVALID_ARGUMENT &&
             contains(mgs_last_error(), "rs.out"),
         "wrong output shape: %s", mgs_last_error());
  std::vector<int64_t> mshape{me == 0 ? d0 + 1 : d0, cols};
  std::vector<float> min(static_cast<size_t>((d0 + 1) * cols)), mout(static_cast<size_t>((d0 + 1) * cols));
  const int64_t mrows = mshape[0] / p + (me < mshape[0] % p ? 1 : 0);
  std::vector<int64_t> moshape{mrows, cols};
  mgs_tensor_t mi = cpuTensor(min.data(), MGS_FLOAT32, mshape), mo = cpuTensor(mout.data(), MGS_FLOAT32, moshape);
  EXPECT_OK(mgs_reducescatter_async("rs.shape", &mi, &mo, MGS_REDUCE_SUM, 1, 1, 0, &h));
  std::string msg;
  EXPECT(waitFor(h, &msg) == MGS_ERR_MISMATCH && contains(msg, "rs.shape"), "shape mismatch: %s", msg.c_str());
  mgs_release(h);
}

// --------------------------------------------------------------- process sets --

// Allreduce (sum) of `v` in `set`; returns the status.
mgs_status_t sumIn(int32_t set, const char* name, std::vector<float>& v, std::string* msg = nullptr) {
  std::vector<int64_t> shape{static_cast<int64_t>(v.size())};
  mgs_tensor_t t = cpuTensor(v.data(), MGS_FLOAT32, shape);
  mgs_handle_t h = 0;
  mgs_status_t st = mgs_allreduce_ps_async(name, &t, &t, MGS_REDUCE_SUM, 1, 1, 0, set, &h);
  if (st != MGS_SUCCESS) {
    if (msg) *msg = mgs_last_error();
    return st;
  }
  st = waitFor(h, msg);
  mgs_release(h);
  return st;
}

void scenarioProcessSets() {
  const int p = g_size, me = g_rank;
  std::vector<int32_t> even, odd;
  for (int r = 0; r < p; ++r) (r % 2 ? odd : even).push_back(r);
  int32_t even_id = -1, odd_id = -1;
  EXPECT_OK(mgs_process_set_add(even.data(), static_cast<int32_t>(even.size()), &even_id));
  EXPECT_OK(mgs_process_set_add(odd.data(), static_cast<int32_t>(odd.size()), &odd_id));
  EXPECT(even_id > 0 && odd_id > 0 && even_id != odd_id, "ids %d %d", even_id, odd_id);
  const auto& mine = me % 2 ? odd : even;
  const int32_t mine_id = me % 2 ? odd_id : even_id;
  int32_t n = 0, idx = -2;
  EXPECT_OK(mgs_process_set_size(mine_id, &n));
  EXPECT_OK(mgs_process_set_rank(mine_id, &idx));
  EXPECT(n == static_cast<int32_t>(mine.size()) && idx == me / 2, "size %d rank %d", n, idx);
  EXPECT_OK(mgs_process_set_rank(me % 2 ? even_id : odd_id, &idx));
  EXPECT(idx == -1, "rank in the other set: %d", idx);
  // The same name in both sets at once: each set sums its own ranks.
  std::vector<float> v(5, static_cast<float>(me + 1));
  EXPECT(sumIn(mine_id, "ps.sum", v) == MGS_SUCCESS, "set allreduce failed");
  float want = 0;
  for (int32_t r : mine) want += static_cast<float>(r + 1);
  EXPECT(v[0] == want && v[4] == want, "set sum %f, expected %f", v[0], want);
  // Broadcast from the set's last rank (a world rank), allgather in set order, set barrier.
  std::vector<int64_t> shape{2};
  std::vector<float> b(2, static_cast<float>(me));
  mgs_tensor_t bt = cpuTensor(b.data(), MGS_FLOAT32, shape);
  mgs_handle_t h = 0;
  EXPECT_OK(mgs_broadcast_ps_async("ps.bcast", &bt, mine.back(), mine_id, &h));
  EXPECT(waitFor(h) == MGS_SUCCESS && b[0] == static_cast<float>(mine.back()), "set broadcast: %f", b[0]);
  mgs_release(h);
  std::vector<int64_t> gshape{1};
  float g = static_cast<float>(me);
  mgs_tensor_t gt = cpuTensor(&g, MGS_FLOAT32, gshape);
  EXPECT_OK(mgs_allgather_ps_async("ps.gather", &gt, mine_id, &h));
  EXPECT(waitFor(h) == MGS_SUCCESS, "set allgather: %s", mgs_handle_error(h));
  std::vector<int64_t> oshape, rows;
  const auto gathered = resultOf<float>(h, MGS_FLOAT32, &oshape, &rows, static_cast<int>(mine.size()));
  mgs_release(h);
  for (size_t i = 0; i < mine.size(); ++i)
    EXPECT(i < gathered.size() && gathered[i] == static_cast<float>(mine[i]), "set allgather element %zu", i);
  EXPECT_OK(mgs_barrier_ps(mine_id));
  // A broadcast root outside the set fails at enqueue.
  EXPECT(mgs_broadcast_ps_async("ps.badroot", &bt, me % 2 ? 0 : (p > 1 ? 1 : 0), mine_id, &h) ==
                 (p > 1 ? MGS_ERR_INVALID_ARGUMENT : MGS_SUCCESS),
         "root outside the set: %s", mgs_last_error());
  // Adding a set with the ranks of an existing one fails on every rank.
  int32_t dup = -1;
  EXPECT(mgs_process_set_add(even.data(), static_cast<int32_t>(even.size()), &dup) == MGS_ERR_INVALID_ARGUMENT &&
             contains(mgs_last_error(), "has these ranks already"),
         "duplicate set: %s", mgs_last_error());

  if (p >= 3) {
    // Rank 1 submits to the even set, which it is not in (first: the barrier after it
    // makes sure rank 0 has its report): the op fails on rank 1 and on the set's
    // ranks, naming rank 1.
    std::string msg;
    std::vector<float> x(2, 1.0f);
    std::vector<int64_t> xshape{2};
    mgs_tensor_t xt = cpuTensor(x.data(), MGS_FLOAT32, xshape);
    mgs_handle_t intruder = 0;
    if (me == 1) EXPECT_OK(mgs_allreduce_ps_async("ps.intruder", &xt, &xt, MGS_REDUCE_SUM, 1, 1, 0, even_id, &intruder));
    EXPECT_OK(mgs_barrier());
    if (me == 1) {
      EXPECT(waitFor(intruder, &msg) == MGS_ERR_INVALID_ARGUMENT, "intruder on rank 1: %s", msg.c_str());
      mgs_release(intruder);
    } else if (me % 2 == 0) {
      EXPECT(sumIn(even_id, "ps.intruder", x, &msg) == MGS_ERR_INVALID_ARGUMENT, "intruder: %s", msg.c_str());
    }
    if (me % 2 == 0 || me == 1)
      EXPECT(contains(msg, "rank 1") && contains(msg, "ps.intruder") && contains(msg, "not in"), "intruder: %s",
             msg.c_str());
    // A set with an op not run yet on rank 0 cannot be removed; every rank is told.
    std::vector<int32_t> low{0, 1};
    int32_t low_id = -1;
    EXPECT_OK(mgs_process_set_add(low.data(), 2, &low_id));
    std::vector<float> y(3, 1.0f);
    std::vector<int64_t> yshape{3};
    mgs_tensor_t yt = cpuTensor(y.data(), MGS_FLOAT32, yshape);
    mgs_handle_t pending = 0;
    if (me == 0) EXPECT_OK(mgs_allreduce_ps_async("ps.pending", &yt, &yt, MGS_REDUCE_SUM, 1, 1, 0, low_id, &pending));
    EXPECT(mgs_process_set_remove(low_id) == MGS_ERR_INVALID_ARGUMENT && contains(mgs_last_error(), "rank 0 has") &&
               contains(mgs_last_error(), "cannot be removed"),
           "remove with an op in flight: %s", mgs_last_error());
    if (me == 1) EXPECT_OK(mgs_allreduce_ps_async("ps.pending", &yt, &yt, MGS_REDUCE_SUM, 1, 1, 0, low_id, &pending));
    if (me <= 1) {
      EXPECT(waitFor(pending) == MGS_SUCCESS && y[0] == 2.0f, "the pending op after the refused removal: %f", y[0]);
      mgs_release(pending);
    }
    EXPECT_OK(mgs_process_set_remove(low_id));
  }
  EXPECT_OK(mgs_process_set_remove(odd_id));
  EXPECT_OK(mgs_process_set_remove(even_id));
  // Removed: gone on every rank; the global set stays.
  EXPECT(sumIn(mine_id, "ps.after", v) == MGS_ERR_INVALID_ARGUMENT, "op in a removed set: %s", mgs_last_error());
  EXPECT(mgs_process_set_remove(0) == MGS_ERR_INVALID_ARGUMENT, "removing the global set");
  EXPECT_OK(mgs_process_set_size(0, &n));
  EXPECT(n == p, "global set size %d", n);
}

// ----------------------------------------------------------------------- join --

void scenarioJoin() {
  const int p = g_size, me = g_rank;
  int32_t last = -1;
  if (me == 0) {
    EXPECT_OK(mgs_join(&last));
  } else {
    // Rank 0 has joined: allreduces run with its zeros, anything else fails.
    for (mgs_reduce_op_t op : {MGS_REDUCE_SUM, MGS_REDUCE_AVERAGE}) {
      std::vector<float> v(4, 1.0f);
      std::vector<int64_t> shape{4};
      mgs_tensor_t t = cpuTensor(v.data(), MGS_FLOAT32, shape);
      mgs_handle_t h = 0;
      EXPECT_OK(mgs_allreduce_async(op == MGS_REDUCE_SUM ? "join.sum" : "join.avg", &t, &t, op, 1, 1, 0, &h));
      EXPECT(waitFor(h) == MGS_SUCCESS, "allreduce with a joined rank: %s", mgs_handle_error(h));
      mgs_release(h);
      const float want = op == MGS_REDUCE_SUM ? static_cast<float>(p - 1) : static_cast<float>(p - 1) / p;
      EXPECT(std::fabs(v[0] - want) < 1e-6, "allreduce with a joined rank: %f, expected %f", v[0], want);
    }
    float x = 1;
    std::vector<int64_t> shape{1};
    mgs_tensor_t t = cpuTensor(&x, MGS_FLOAT32, shape);
    mgs_handle_t h = 0;
    EXPECT_OK(mgs_allgather_async("join.gather", &t, &h));
    std::string msg;
    EXPECT(waitFor(h, &msg) == MGS_ERR_UNSUPPORTED && contains(msg, "rank 0 joined") && contains(msg, "join.gather"),
           "allgather with a joined rank: %s", msg.c_str());
    mgs_release(h);
    EXPECT_OK(mgs_broadcast_async("join.bcast", &t, 1, &h));
    EXPECT(waitFor(h, &msg) == MGS_ERR_UNSUPPORTED && contains(msg, "broadcast"), "broadcast: %s", msg.c_str());
    mgs_release(h);
    // The others join one after the other: the last is the highest rank.
    std::this_thread::sleep_for(std::chrono::milliseconds(300 * me));
    EXPECT_OK(mgs_join(&last));
  }
  EXPECT(last == p - 1, "join returned %d, expected %d", last, p - 1);
  // After every rank joined, everything runs normally again.
  float x = 1;
  std::vector<int64_t> shape{1};
  mgs_tensor_t t = cpuTensor(&x, MGS_FLOAT32, shape);
  mgs_handle_t h = 0;
  EXPECT_OK(mgs_allgather_async("join.after", &t, &h));
  EXPECT(waitFor(h) == MGS_SUCCESS, "allgather after join: %s", mgs_handle_error(h));
  mgs_release(h);
}

// ------------------------------------------------------ sparse process sets --

// Run with MGS_COMPRESSOR set (ctest: topk, density 0.01). Two overlapping
// sets, {0..p-2} and {1..p-1} (a middle rank is in both), and the global set
// sparsify at once, each with its own pipeline. Over every set and tensor,
// what went in on the set's ranks equals what came out plus what the set's
// ranks still keep (a sum that reached a rank outside the set, or a bucket
// that mixed sets, breaks it); the sets' buckets are counted as theirs.
void scenarioSparseSets() {
  const int p = g_size, me = g_rank;
  std::vector<int32_t> lo, hi;
  for (int r = 0; r + 1 < p; ++r) lo.push_back(r);
  for (int r = 1; r < p; ++r) hi.push_back(r);
  if (p == 1) return;
  int32_t lo_id = -1, hi_id = -1;
  EXPECT_OK(mgs_process_set_add(lo.data(), static_cast<int32_t>(lo.size()), &lo_id));
  EXPECT_OK(mgs_process_set_add(hi.data(), static_cast<int32_t>(hi.size()), &hi_id));
  struct T {
    int32_t set;
    std::string name;
    int64_t n;
    std::vector<float> x, out;
    std::vector<double> in_sum, out_sum;
  };
  std::vector<T> ts;
  auto addT = [&](int32_t set, const char* name, int64_t n) {
    T t{set, name, n, std::vector<float>(n), std::vector<float>(n), std::vector<double>(n, 0.0),
        std::vector<double>(n, 0.0)};
    ts.push_back(std::move(t));
  };
  if (me + 1 < p) addT(lo_id, "a", 6000), addT(lo_id, "b", 9000);
  if (me >= 1) addT(hi_id, "a", 6000), addT(hi_id, "c", 5000);
  addT(MGS_GLOBAL_PROCESS_SET, "g", 8000);
  const int kSteps = 30;
  mgs_stats_t st0{};
  EXPECT_OK(mgs_get_stats(&st0, sizeof st0));
  for (int step = 0; step < kSteps; ++step) {
    std::vector<mgs_handle_t> hs;
    for (size_t k = 0; k < ts.size(); ++k) {
      T& t = ts[k];
      for (int64_t i = 0; i < t.n; ++i) {
        t.x[i] = mpitest::gradValue((uint64_t(step) << 40) ^ (uint64_t(me) << 32) ^ (uint64_t(k) << 24) ^
                                    uint64_t(i));
        t.in_sum[i] += t.x[i];
      }
      std::vector<int64_t> shape{t.n};
      mgs_tensor_t in = cpuTensor(t.x.data(), MGS_FLOAT32, shape), o = cpuTensor(t.out.data(), MGS_FLOAT32, shape);
      mgs_handle_t h = 0;
      EXPECT_OK(mgs_allreduce_ps_async(t.name.c_str(), &in, &o, MGS_REDUCE_SUM, 1, 1, MGS_FLAG_SPARSE_OK, t.set, &h));
      hs.push_back(h);
    }
    for (size_t k = 0; k < ts.size(); ++k) {
      EXPECT(waitFor(hs[k]) == MGS_SUCCESS, "step %d, '%s' in set %d: %s", step, ts[k].name.c_str(), ts[k].set,
             mgs_handle_error(hs[k]));
      mgs_release(hs[k]);
      for (int64_t i = 0; i < ts[k].n; ++i) ts[k].out_sum[i] += ts[k].out[i];
    }
  }
  for (T& t : ts) {
    // A set's residual is kept under the set-qualified name.
    const std::string rname =
        t.set == MGS_GLOBAL_PROCESS_SET ? t.name : t.name + " [process set " + std::to_string(t.set) + "]";
    bool has = false;
    std::vector<float> res = mpitest::residualOf(rname, static_cast<size_t>(t.n), &has);
    EXPECT(has, "no residual kept for '%s': not sparsified", rname.c_str());
    double kept = 0;
    for (float r : res) kept += std::fabs(r);
    EXPECT(kept > 0, "'%s' kept nothing: not sparsified", rname.c_str());
    // The set's sums of inputs and residuals (dense float64, in the set).
    std::vector<double> totals(static_cast<size_t>(2 * t.n));
    for (int64_t i = 0; i < t.n; ++i) totals[i] = t.in_sum[i], totals[t.n + i] = res[i];
    std::vector<int64_t> tshape{2 * t.n};
    mgs_tensor_t tt = cpuTensor(totals.data(), MGS_FLOAT64, tshape);
    mgs_handle_t h = 0;
    EXPECT_OK(mgs_allreduce_ps_async((t.name + ".totals").c_str(), &tt, &tt, MGS_REDUCE_SUM, 1, 1, 0, t.set, &h));
    EXPECT_OK(mgs_wait(h));
    mgs_release(h);
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < t.n; ++i) {
      worst = std::max(worst, std::fabs(t.out_sum[i] + totals[t.n + i] - totals[i]));
      scale = std::max(scale, std::fabs(totals[i]));
    }
    EXPECT(worst <= 1e-4 * std::max(scale, 1.0), "'%s': conservation error %g (scale %g)", rname.c_str(), worst,
           scale);
  }
  mgs_stats_t st{};
  EXPECT_OK(mgs_get_stats(&st, sizeof st));
  const uint64_t slow = st.negotiation_slow_cycles - st0.negotiation_slow_cycles;
  const uint64_t fast = st.negotiation_fast_cycles - st0.negotiation_fast_cycles;
  EXPECT(st.set_sparse_buckets > 0 && st.set_sparse_bytes_sent > 0, "set sparse buckets %llu, bytes %llu",
         (unsigned long long)st.set_sparse_buckets, (unsigned long long)st.set_sparse_bytes_sent);
  EXPECT(st.sparse_buckets > 0, "the global set's sparse buckets: %llu", (unsigned long long)st.sparse_buckets);
  // Every set tensor's step is one sparse bucket or part of one: never more
  // buckets than set tensors x steps.
  const uint64_t set_tensors = static_cast<uint64_t>(ts.size() - 1) * kSteps;
  EXPECT(st.set_sparse_buckets <= set_tensors, "set sparse buckets %llu > %llu tensor steps",
         (unsigned long long)st.set_sparse_buckets, (unsigned long long)set_tensors);
  // A set's op, once seen, is negotiated by the cached bit vector, the ranks
  // outside the set setting its bit. Each rank allreduces in each of its
  // sets, 2 rounds to warm up then 20 counted: they need a gather to rank 0
  // for the first sight only (a few more when a rank lags past the cache's
  // staleness limit on a loaded host), not one each. Every rank takes part,
  // so no rank waits meanwhile in an op that is not cached.
  auto round = [&](int i) {
    for (int32_t set : {lo_id, hi_id}) {
      const auto& members = set == lo_id ? lo : hi;
      if (!std::binary_search(members.begin(), members.end(), me)) continue;
      std::vector<float> v(4, 1.0f);
      EXPECT(sumIn(set, "set.only", v) == MGS_SUCCESS && v[0] == static_cast<float>(members.size()),
             "round %d in set %d", i, set);
    }
  };
  round(-2);
  round(-1);
  mgs_stats_t a{}, b{};
  EXPECT_OK(mgs_get_stats(&a, sizeof a));
  for (int i = 0; i < 20; ++i) round(i);
  EXPECT_OK(mgs_get_stats(&b, sizeof b));
  const uint64_t set_slow = b.negotiation_slow_cycles - a.negotiation_slow_cycles;
  EXPECT(set_slow <= 15, "20 rounds of set allreduces took %llu slow negotiation cycles",
         (unsigned long long)set_slow);
  EXPECT_OK(mgs_process_set_remove(lo_id));
  EXPECT_OK(mgs_process_set_remove(hi_id));
  if (me == 0)
    std::printf("sparse sets: %llu set buckets, %llu bytes sent for them, %llu fast and %llu slow negotiation cycles "
                "on rank 0\n",
                (unsigned long long)st.set_sparse_buckets, (unsigned long long)st.set_sparse_bytes_sent,
                (unsigned long long)fast, (unsigned long long)slow);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s alltoall|reducescatter|process_sets|join|sparse_sets\n", argv[0]);
    return 2;
  }
  if (mgs_init() != MGS_SUCCESS) {
    std::fprintf(stderr, "mgs_init failed: %s\n", mgs_last_error());
    return 1;
  }
  mgs_rank(&g_rank);
  mgs_size(&g_size);
  const std::map<std::string, void (*)()> scenarios = {{"alltoall", scenarioAlltoall},
                                                       {"reducescatter", scenarioReducescatter},
                                                       {"process_sets", scenarioProcessSets},
                                                       {"join", scenarioJoin},
                                                       {"sparse_sets", scenarioSparseSets}};
  auto it = scenarios.find(argv[1]);
  if (it == scenarios.end()) {
    std::fprintf(stderr, "unknown scenario '%s'\n", argv[1]);
    return 2;
  }
  it->second();
  const int rc = mpitest::finish();
  mgs_shutdown();
  return rc;
}
