// Real multi-rank tests of the C ABI, run by ctest as
//   mpirun -np {2,3,4} --oversubscribe mgs_mpi_test <scenario>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <map>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "mpi_harness.h"

using mpitest::cpuTensor;
using mpitest::g_rank;
using mpitest::gradValue;
using mpitest::stepGrad;
using mpitest::gatherAll;
using mpitest::residualOf;

namespace {

int g_size = 0;

// Host conversions for the 16-bit float formats, so the test does not share
// code with the library under test.
float f16ToFloat(uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const float v = e == 0 ? std::ldexp(static_cast<float>(m), -24) : std::ldexp(static_cast<float>(m | 0x400), e - 25);
  return (h & 0x8000) ? -v : v;
}
uint16_t floatToF16Exact(float f) {  // only for small integers, which are exact
  if (f == 0) return 0;
  int e;
  const float m = std::frexp(f, &e);  // f = m * 2^e, m in [0.5, 1)
  return static_cast<uint16_t>(((e - 1 + 15) << 10) | (static_cast<int>(m * 2048) & 0x3ff));
}
float bf16ToFloat(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t floatToBf16Exact(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);
}

void setValue(void* p, mgs_dtype_t d, size_t i, double v) {
  switch (d) {
    case MGS_FLOAT32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    case MGS_FLOAT64:
      static_cast<double*>(p)[i] = v;
      break;
    case MGS_FLOAT16:
      static_cast<uint16_t*>(p)[i] = floatToF16Exact(static_cast<float>(v));
      break;
    case MGS_BFLOAT16:
      static_cast<uint16_t*>(p)[i] = floatToBf16Exact(static_cast<float>(v));
      break;
    case MGS_INT32:
      static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
      break;
    case MGS_INT64:
      static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v);
      break;
    case MGS_UINT8:
      static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v);
      break;
  }
}

double getValue(const void* p, mgs_dtype_t d, size_t i) {
  switch (d) {
    case MGS_FLOAT32:
      return static_cast<const float*>(p)[i];
    case MGS_FLOAT64:
      return static_cast<const double*>(p)[i];
    case MGS_FLOAT16:
      return f16ToFloat(static_cast<const uint16_t*>(p)[i]);
    case MGS_BFLOAT16:
      return bf16ToFloat(static_cast<const uint16_t*>(p)[i]);
    case MGS_INT32:
      return static_cast<const int32_t*>(p)[i];
    case MGS_INT64:
      return static_cast<const int64_t*>(p)[i];
    case MGS_UINT8:
      return static_cast<const uint8_t*>(p)[i];
  }
  return 0;
}

bool isInt(mgs_dtype_t d) { return d == MGS_INT32 || d == MGS_INT64 || d == MGS_UINT8; }
const std::vector<mgs_dtype_t> kDtypes = {MGS_FLOAT32, MGS_FLOAT64, MGS_FLOAT16, MGS_BFLOAT16,
                                          MGS_INT32,   MGS_INT64,   MGS_UINT8};
const char* kDtypeNames[] = {"f32", "f64", "f16", "bf16", "i32", "i64", "u8"};

double contribution(int rank, size_t i) { return (rank + 1) + static_cast<double>(i % 7); }

// Expected allreduce result, computed the way the ABI documents it.
double expected(mgs_dtype_t d, size_t i, bool average, double pre, double post) {
  double sum = 0;
  for (int r = 0; r < g_size; ++r) {
    double x = contribution(r, i) * pre;
    sum += isInt(d) ? std::trunc(x) : x;
  }
  double v = sum * post / (average ? g_size : 1);
  return isInt(d) ? std::trunc(v) : v;
}

bool close(mgs_dtype_t d, double got, double want) {
  if (isInt(d)) return got == want;
  const double tol = (d == MGS_FLOAT16 || d == MGS_BFLOAT16) ? 1e-2 : 1e-6;
  return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
}

void scenarioAllreduce() {
  const std::vector<int64_t> sizes = {0, 1, 17, 1 << 20};
  struct Scale {
    double pre, post;
  };
  const std::vector<Scale> scales = {{1, 1}, {2, 0.5}};
  for (size_t di = 0; di < kDtypes.size(); ++di) {
    const mgs_dtype_t d = kDtypes[di];
    for (int64_t n : sizes) {
      for (int average = 0; average < 2; ++average) {
        for (const Scale& sc : scales) {
          // Out of place for one variant, in place for the other.
          const bool in_place = sc.pre == 1;
          std::vector<char> in(n * mgs_dtype_size(d) + 1), out(n * mgs_dtype_size(d) + 1);
          for (int64_t i = 0; i < n; ++i) setValue(in.data(), d, i, contribution(g_rank, i));
          std::vector<int64_t> shape{n};
          mgs_tensor_t tin = cpuTensor(in.data(), d, shape);
          mgs_tensor_t tout = cpuTensor(in_place ? in.data() : out.data(), d, shape);
          const std::string name = std::string("ar.") + kDtypeNames[di] + "." + std::to_string(n) + "." +
                                   std::to_string(average) + "." + std::to_string(sc.pre);
          mgs_handle_t h = 0;
          EXPECT_OK(mgs_allreduce_async(name.c_str(), &tin, &tout, average ? MGS_REDUCE_AVERAGE : MGS_REDUCE_SUM,
                                        sc.pre, sc.post, 0, &h));
          EXPECT_OK(mgs_wait(h));
          EXPECT_OK(mgs_release(h));
          const void* res = in_place ? in.data() : out.data();
          int bad = 0;
          for (int64_t i = 0; i < n && bad < 3; ++i) {
            const double want = expected(d, i, average, sc.pre, sc.post);
            const double got = getValue(res, d, i);
            if (!close(d, got, want)) {
              ++bad;
              EXPECT(false, "%s[%lld] = %g, want %g", name.c_str(), (long long)i, got, want);
            }
          }
        }
      }
    }
  }
}

// Hundreds of tensors, enqueued in a different order on every rank, over
// several steps (the later ones take the response-cache fast path).
void scenarioManyTensors() {
  const int kTensors = 300, kSteps = 4;
  std::mt19937 rng(1234 + g_rank);
  std::vector<std::vector<float>> bufs(kTensors);
  for (int step = 0; step < kSteps; ++step) {
    std::vector<int> order(kTensors);
    for (int t = 0; t < kTensors; ++t) order[t] = t;
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<mgs_handle_t> handles(kTensors);
    std::vector<std::vector<int64_t>> shapes(kTensors);
    for (int t : order) {
      const int64_t n = 1 + (t * 37) % 5000;
      bufs[t].assign(n, static_cast<float>(g_rank + t + step));
      shapes[t] = {n};
      mgs_tensor_t x = cpuTensor(bufs[t].data(), MGS_FLOAT32, shapes[t]);
      const std::string name = "layer" + std::to_string(t) + ".grad";
      EXPECT_OK(mgs_allreduce_async(name.c_str(), &x, &x, MGS_REDUCE_AVERAGE, 1, 1, 0, &handles[t]));
    }
    for (int t = 0; t < kTensors; ++t) {
      EXPECT_OK(mgs_wait(handles[t]));
      mgs_release(handles[t]);
      const float want = (g_size - 1) / 2.0f + t + step;
      EXPECT(std::fabs(bufs[t][0] - want) < 1e-4f && std::fabs(bufs[t].back() - want) < 1e-4f,
             "step %d tensor %d = %g, want %g", step, t, bufs[t][0], want);
    }
  }
}

void scenarioAllgather() {
  for (size_t di = 0; di < kDtypes.size(); ++di) {
    const mgs_dtype_t d = kDtypes[di];
    // Rank r contributes r rows (rank 0 none) of 5 columns with value r*10 + col.
    const int64_t rows = g_rank;
    std::vector<char> in(rows * 5 * mgs_dtype_size(d) + 1);
    for (int64_t i = 0; i < rows * 5; ++i) setValue(in.data(), d, i, g_rank * 10 + i % 5);
    std::vector<int64_t> shape{rows, 5};
    mgs_tensor_t t = cpuTensor(in.data(), d, shape);
    mgs_handle_t h = 0;
    const std::string name = std::string("ag.") + kDtypeNames[di];
    EXPECT_OK(mgs_allgather_async(name.c_str(), &t, &h));
    EXPECT_OK(mgs_wait(h));
    int32_t ndim = 0;
    int64_t oshape[MGS_MAX_DIMS];
    EXPECT_OK(mgs_allgather_output_shape(h, &ndim, oshape));
    const int64_t total = static_cast<int64_t>(g_size) * (g_size - 1) / 2;
    EXPECT(ndim == 2 && oshape[0] == total && oshape[1] == 5, "shape [%lld, %lld]", (long long)oshape[0],
           (long long)oshape[1]);
    std::vector<int64_t> sizes(g_size);
    EXPECT_OK(mgs_allgather_rank_sizes(h, sizes.data()));
    for (int r = 0; r < g_size; ++r) EXPECT(sizes[r] == r, "rank %d size %lld", r, (long long)sizes[r]);
    std::vector<char> out(total * 5 * mgs_dtype_size(d) + 1);
    std::vector<int64_t> os{total, 5};
    mgs_tensor_t to = cpuTensor(out.data(), d, os);
    EXPECT_OK(mgs_allgather_copy_output(h, &to));
    int64_t row = 0;
    for (int r = 0; r < g_size; ++r)
      for (int k = 0; k < r; ++k, ++row)
        for (int c = 0; c < 5; ++c)
          EXPECT(getValue(out.data(), d, row * 5 + c) == r * 10 + c, "%s row %lld col %d", name.c_str(), (long long)row,
                 c);
    // Wrong output shape is rejected with a clear error.
    std::vector<int64_t> wrong{total + 1, 5};
    mgs_tensor_t tw = cpuTensor(out.data(), d, wrong);
    EXPECT(mgs_allgather_copy_output(h, &tw) == MGS_ERR_INVALID_ARGUMENT, "wrong shape accepted");
    mgs_release(h);
  }
}

void scenarioBroadcast() {
  for (int root = 0; root < g_size; ++root) {
    for (size_t di = 0; di < kDtypes.size(); ++di) {
      const mgs_dtype_t d = kDtypes[di];
      const int64_t n = 1000 + root;
      std::vector<char> buf(n * mgs_dtype_size(d));
      for (int64_t i = 0; i < n; ++i) setValue(buf.data(), d, i, (g_rank == root ? 3 : 100) + i % 11);
      std::vector<int64_t> shape{n};
      mgs_tensor_t t = cpuTensor(buf.data(), d, shape);
      mgs_handle_t h = 0;
      const std::string name = "bc." + std::to_string(root) + "." + kDtypeNames[di];
      EXPECT_OK(mgs_broadcast_async(name.c_str(), &t, root, &h));
      EXPECT_OK(mgs_wait(h));
      mgs_release(h);
      for (int64_t i = 0; i < n; i += 97)
        EXPECT(getValue(buf.data(), d, i) == 3 + i % 11, "%s[%lld]", name.c_str(), (long long)i);
    }
  }
  // A root outside the world is rejected at enqueue.
  float x = 0;
  std::vector<int64_t> one{1};
  mgs_tensor_t t = cpuTensor(&x, MGS_FLOAT32, one);
  mgs_handle_t h = 0;
  EXPECT(mgs_broadcast_async("bad.root", &t, g_size, &h) == MGS_ERR_INVALID_ARGUMENT, "root out of range");
  EXPECT(std::strstr(mgs_last_error(), "root rank") != nullptr, "message: %s", mgs_last_error());
}

// Every kind of cross-rank disagreement fails on every rank with a message
// naming the tensor and both ranks' values; the runtime keeps working after.
void scenarioMismatch() {
  struct Case {
    const char* name;
    const char* needle;  // must appear in the message
    std::function<mgs_status_t(mgs_handle_t*)> enqueue;
  };
  static float data[64];
  static std::vector<int64_t> s8{8}, s16{16}, s2x4{2, 4}, s2x5{2, 5};
  const bool odd = g_rank % 2 == 1;
  const int last = g_size - 1;
  std::vector<Case> cases = {
      {"mm.dtype", "dtype",
       [&](mgs_handle_t* h) {
         mgs_tensor_t t = cpuTensor(data, odd ? MGS_FLOAT64 : MGS_FLOAT32, s8);
         return mgs_allreduce_async("mm.dtype", &t, &t, MGS_REDUCE_SUM, 1, 1, 0, h);
       }},
      {"mm.shape", "shape",
       [&](mgs_handle_t* h) {
         mgs_tensor_t t = cpuTensor(data, MGS_FLOAT32, g_rank == last ? s16 : s8);
         return mgs_allreduce_async("mm.shape", &t, &t, MGS_REDUCE_SUM, 1, 1, 0, h);
       }},
      {"mm.op", "reduce op",
       [&](mgs_handle_t* h) {
         mgs_tensor_t t = cpuTensor(data, MGS_FLOAT32, s8);
         return mgs_allreduce_async("mm.op", &t, &t, odd ? MGS_REDUCE_AVERAGE : MGS_REDUCE_SUM, 1, 1, 0, h);
       }},
      {"mm.scale", "scale",
       [&](mgs_handle_t* h) {
         mgs_tensor_t t = cpuTensor(data, MGS_FLOAT32, s8);
         return mgs_allreduce_async("mm.scale", &t, &t, MGS_REDUCE_SUM, odd ? 2 : 1, 1, 0, h);
       }},
      {"mm.root", "root",
       [&](mgs_handle_t* h) {
         mgs_tensor_t t = cpuTensor(data, MGS_FLOAT32, s8);
         return mgs_broadcast_async("mm.root", &t, odd ? 1 : 0, h);
       }},
      {"mm.type", "operation",
       [&](mgs_handle_t* h) {
         mgs_tensor_t t = cpuTensor(data, MGS_FLOAT32, s8);
         return odd ? mgs_broadcast_async("mm.type", &t, 0, h)
                    : mgs_allreduce_async("mm.type", &t, &t, MGS_REDUCE_SUM, 1, 1, 0, h);
       }},
      {"mm.gather", "after the first",
       [&](mgs_handle_t* h) {
         mgs_tensor_t t = cpuTensor(data, MGS_FLOAT32, odd ? s2x5 : s2x4);
         return mgs_allgather_async("mm.gather", &t, h);
       }},
      {"mm.flags", "flags",
       [&](mgs_handle_t* h) {
         mgs_tensor_t t = cpuTensor(data, MGS_FLOAT32, s8);
         return mgs_allreduce_async("mm.flags", &t, &t, MGS_REDUCE_SUM, 1, 1, odd ? MGS_FLAG_SPARSE_OK : 0, h);
       }},
  };
  for (int round = 0; round < 2; ++round) {  // round 1: names are no longer new
    for (auto& c : cases) {
      mgs_handle_t h = 0;
      EXPECT_OK(c.enqueue(&h));
      const mgs_status_t st = mgs_wait(h);
      const std::string msg = mgs_handle_error(h);
      EXPECT(st == MGS_ERR_MISMATCH, "%s: status %s", c.name, mgs_status_string(st));
      EXPECT(msg.find(c.name) != std::string::npos && msg.find(c.needle) != std::string::npos &&
                 msg.find("rank 0") != std::string::npos,
             "%s: message '%s'", c.name, msg.c_str());
      mgs_release(h);
    }
  }
  // A name that once matched and now mismatches (cached signature changes).
  mgs_tensor_t ok = cpuTensor(data, MGS_FLOAT32, s8);
  for (int i = 0; i < 2; ++i) {
    mgs_handle_t h = 0;
    EXPECT_OK(mgs_allreduce_async("mm.cached", &ok, &ok, MGS_REDUCE_SUM, 1, 1, 0, &h));
    EXPECT_OK(mgs_wait(h));
    mgs_release(h);
  }
  mgs_tensor_t changed = cpuTensor(data, MGS_FLOAT32, g_rank == 0 ? s16 : s8);
  mgs_handle_t h = 0;
  EXPECT_OK(mgs_allreduce_async("mm.cached", &changed, &changed, MGS_REDUCE_SUM, 1, 1, 0, &h));
  EXPECT(mgs_wait(h) == MGS_ERR_MISMATCH, "cached name with a changed shape: %s", mgs_handle_error(h));
  mgs_release(h);
  EXPECT_OK(mgs_barrier());
}

void scenarioDuplicate() {
  float a[4] = {1, 2, 3, 4};
  std::vector<int64_t> s{4};
  mgs_tensor_t t = cpuTensor(a, MGS_FLOAT32, s);
  mgs_handle_t h1 = 0, h2 = 0;
  // Rank 0 enqueues only after the barrier, which the other ranks enter after
  // their second enqueue: the first op is surely still in flight there.
  if (g_rank != 0) {
    EXPECT_OK(mgs_allreduce_async("dup", &t, &t, MGS_REDUCE_SUM, 1, 1, 0, &h1));
    EXPECT(mgs_allreduce_async("dup", &t, &t, MGS_REDUCE_SUM, 1, 1, 0, &h2) == MGS_ERR_DUPLICATE_NAME,
           "second enqueue of an in-flight name: %s", mgs_last_error());
    EXPECT(std::strstr(mgs_last_error(), "'dup'") != nullptr, "message: %s", mgs_last_error());
  }
  EXPECT_OK(mgs_barrier());
  if (g_rank == 0) EXPECT_OK(mgs_allreduce_async("dup", &t, &t, MGS_REDUCE_SUM, 1, 1, 0, &h1));
  EXPECT_OK(mgs_wait(h1));
  mgs_release(h1);
  // Once complete, the name can be used again.
  EXPECT_OK(mgs_allreduce_async("dup", &t, &t, MGS_REDUCE_SUM, 1, 1, 0, &h2));
  EXPECT_OK(mgs_wait(h2));
  mgs_release(h2);
  // Bad arguments are rejected at enqueue with a message.
  EXPECT(mgs_allreduce_async(nullptr, &t, &t, MGS_REDUCE_SUM, 1, 1, 0, &h2) == MGS_ERR_INVALID_ARGUMENT, "null name");
  EXPECT(mgs_allreduce_async("x", nullptr, &t, MGS_REDUCE_SUM, 1, 1, 0, &h2) == MGS_ERR_INVALID_ARGUMENT,
         "null tensor");
  mgs_tensor_t bad = t;
  bad.dtype = static_cast<mgs_dtype_t>(42);
  EXPECT(mgs_allreduce_async("x", &bad, &bad, MGS_REDUCE_SUM, 1, 1, 0, &h2) == MGS_ERR_INVALID_ARGUMENT, "dtype 42");
  EXPECT(std::strstr(mgs_last_error(), "'x'") != nullptr, "message names the tensor: %s", mgs_last_error());
  mgs_tensor_t cuda = t;
  cuda.device = 0;
  const mgs_status_t st = mgs_allreduce_async("x", &cuda, &cuda, MGS_REDUCE_SUM, 1, 1, 0, &h2);
  EXPECT(st == MGS_ERR_UNSUPPORTED || st == MGS_ERR_CUDA, "CUDA tensor without GPU: %s", mgs_status_string(st));
  EXPECT(mgs_wait(987654) == MGS_ERR_INVALID_ARGUMENT, "unknown handle");
}

// MGS_STALL_ABORT_S is set by the test: rank 1 never submits "lonely"; the
// others must get MGS_ERR_TIMEOUT naming rank 1, then carry on.
void scenarioStall() {
  float a[4] = {1, 1, 1, 1};
  std::vector<int64_t> s{4};
  mgs_tensor_t t = cpuTensor(a, MGS_FLOAT32, s);
  if (g_rank != 1) {
    mgs_handle_t h = 0;
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_OK(mgs_allreduce_async("lonely", &t, &t, MGS_REDUCE_SUM, 1, 1, 0, &h));
    const mgs_status_t st = mgs_wait(h);
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string msg = mgs_handle_error(h);
    EXPECT(st == MGS_ERR_TIMEOUT, "status %s", mgs_status_string(st));
    EXPECT(msg.find("'lonely'") != std::string::npos && msg.find("not by ranks 1") != std::string::npos, "message: %s",
           msg.c_str());
    EXPECT(waited < 30, "took %.1f s", waited);
    mgs_release(h);
  } else {
    // Stay away until the others have timed out; otherwise this rank's next
    // collective would itself stall (and be aborted) while they wait.
    std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(std::getenv("MGS_STALL_ABORT_S")) + 1.0));
  }
  EXPECT_OK(mgs_barrier());
}

// A rank dies; the others are blocked in a collective. The launcher (the test
// script) checks that the job ends non-zero, quickly.
void scenarioKilled() {
  float a[4] = {1, 1, 1, 1};
  std::vector<int64_t> s{4};
  mgs_tensor_t t = cpuTensor(a, MGS_FLOAT32, s);
  EXPECT_OK(mgs_barrier());
  if (g_rank == 1) std::raise(SIGKILL);
  mgs_handle_t h = 0;
  EXPECT_OK(mgs_allreduce_async("never", &t, &t, MGS_REDUCE_SUM, 1, 1, 0, &h));
  mgs_wait(h);
  std::exit(0);  // should not be reached with a live peer missing: the job must fail
}

// Rank 0 shuts down while another rank waits: that rank gets MGS_ERR_SHUTDOWN,
// later calls report that mgs is not running, and mgs can be started again.
void scenarioShutdown() {
  float a[4] = {1, 1, 1, 1};
  std::vector<int64_t> s{4};
  mgs_tensor_t t = cpuTensor(a, MGS_FLOAT32, s);
  EXPECT_OK(mgs_barrier());
  if (g_rank == 0) {
    // Give the others time to enqueue, so their op is pending when we stop.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_OK(mgs_shutdown());
  } else {
    mgs_handle_t h = 0;
    // Either the op is pending when rank 0 stops (it completes with
    // MGS_ERR_SHUTDOWN) or, on a slow machine, the shutdown came first and
    // the enqueue itself says so. Never a hang, never success.
    const mgs_status_t enq = mgs_allreduce_async("orphan", &t, &t, MGS_REDUCE_SUM, 1, 1, 0, &h);
    EXPECT(enq == MGS_SUCCESS || enq == MGS_ERR_SHUTDOWN, "enqueue: %s", mgs_last_error());
    if (enq == MGS_SUCCESS) {
      const mgs_status_t st = mgs_wait(h);
      EXPECT(st == MGS_ERR_SHUTDOWN, "status %s: %s", mgs_status_string(st), mgs_handle_error(h));
      mgs_release(h);
    }
    mgs_handle_t h2 = 0;
    EXPECT(mgs_allreduce_async("after", &t, &t, MGS_REDUCE_SUM, 1, 1, 0, &h2) == MGS_ERR_SHUTDOWN,
           "enqueue after shutdown: %s", mgs_last_error());
  }
  EXPECT(!mgs_is_initialized(), "still initialized");
  EXPECT_OK(mgs_shutdown());  // idempotent
  EXPECT_OK(mgs_init());      // restart on the same MPI
  EXPECT(mgs_is_initialized(), "restart");
}

// The sparse pipeline (MGS_COMPRESSOR set by the test): each step, the result
// on every rank equals the average built from exactly the pairs each rank
// selected (sent = input + residual_before - residual_after), is identical on
// all ranks, and small tensors stay dense and exact. Rank 1 sends an all-zero
// gradient for one tensor, so counts differ per rank (0 is legal).
void scenarioSparse() {
  const std::vector<int64_t> sizes = {5000, 20000, 4096, 100000, 8192, 3000};
  const int kSteps = 10;
  for (int step = 0; step < kSteps; ++step) {
    const size_t L = sizes.size();
    std::vector<std::vector<float>> x(L), out(L), before(L);
    std::vector<std::vector<int64_t>> shapes(L);
    std::vector<mgs_handle_t> h(L);
    std::vector<bool> had(L);
    for (size_t t = 0; t < L; ++t) {
      x[t].resize(sizes[t]);
      const bool zero = g_rank == 1 && t == 2;
      for (int64_t i = 0; i < sizes[t]; ++i)
        x[t][i] = zero ? 0.0f : stepGrad(step, t, i);
      out[t].assign(sizes[t], -1.0f);
      shapes[t] = {sizes[t]};
      bool has;
      before[t] = residualOf("g" + std::to_string(t), sizes[t], &has);
    }
    for (size_t j = 0; j < L; ++j) {
      const size_t t = (g_rank % 2) ? L - 1 - j : j;  // ranks enqueue in different orders
      mgs_tensor_t in = cpuTensor(x[t].data(), MGS_FLOAT32, shapes[t]);
      mgs_tensor_t o = cpuTensor(out[t].data(), MGS_FLOAT32, shapes[t]);
      EXPECT_OK(mgs_allreduce_async(("g" + std::to_string(t)).c_str(), &in, &o, MGS_REDUCE_AVERAGE, 1, 1,
                                    MGS_FLAG_SPARSE_OK, &h[t]));
    }
    for (size_t t = 0; t < L; ++t) {
      EXPECT_OK(mgs_wait(h[t]));
      mgs_release(h[t]);
    }
    for (size_t t = 0; t < L; ++t) {
      const std::string name = "g" + std::to_string(t);
      bool has;
      std::vector<float> after = residualOf(name, sizes[t], &has);
      std::vector<float> sent(sizes[t]);
      for (int64_t i = 0; i < sizes[t]; ++i) sent[i] = (x[t][i] + before[t][i]) - after[i];
      const std::vector<float> all = gatherAll("ref." + name, sent);
      const std::vector<float> results = gatherAll("res." + name, out[t]);
      const float inv = static_cast<float>(1.0 / g_size);
      int bad = 0, differ = 0, nonzero = 0;
      for (int64_t i = 0; i < sizes[t]; ++i) {
        float ref = 0.0f;
        for (int r = 0; r < g_size; ++r) ref += all[r * sizes[t] + i];
        ref *= inv;
        nonzero += out[t][i] != 0.0f;
        if (!(std::fabs(out[t][i] - ref) <= 1e-6f * std::max(1.0f, std::fabs(ref)))) ++bad;
        for (int r = 1; r < g_size; ++r)
          if (std::memcmp(&results[i], &results[r * sizes[t] + i], 4) != 0) ++differ;
      }
      EXPECT(bad == 0, "step %d %s: %d entries differ from the reference of selected pairs", step, name.c_str(), bad);
      EXPECT(differ == 0, "step %d %s: %d entries differ across ranks", step, name.c_str(), differ);
      EXPECT(has == (sizes[t] >= 4096), "step %d %s: residual present = %d", step, name.c_str(), (int)has);
      // The test runs with MGS_DENSE_FALLBACK=0, so every bucket is sparse.
      if (sizes[t] >= 4096)
        EXPECT(nonzero < sizes[t] / 2, "step %d %s: %d of %lld nonzero: not sparse", step, name.c_str(), nonzero,
               (long long)sizes[t]);
    }
  }
  mgs_stats_t st{};
  EXPECT_OK(mgs_get_stats(&st, sizeof st));
  EXPECT(st.plans >= 1 && st.plan_buckets >= 1, "plans %llu buckets %llu", (unsigned long long)st.plans,
         (unsigned long long)st.plan_buckets);
  EXPECT(st.sparse_buckets > 0 && st.sparse_selected > 0, "sparse buckets %llu selected %llu",
         (unsigned long long)st.sparse_buckets, (unsigned long long)st.sparse_selected);
  EXPECT(st.sparse_bytes_sent < st.sparse_dense_bytes, "sent %llu >= dense %llu",
         (unsigned long long)st.sparse_bytes_sent, (unsigned long long)st.sparse_dense_bytes);
  if (g_rank == 0)
    std::printf("sparse: %llu steps, %llu plans, %llu buckets in plan, selected/k = %.3f, bytes %.4f of dense\n",
                (unsigned long long)st.sparse_steps, (unsigned long long)st.plans, (unsigned long long)st.plan_buckets,
                double(st.sparse_selected) / double(st.sparse_target),
                double(st.sparse_bytes_sent) / double(st.sparse_dense_bytes));
}

// Conservation over 200 steps, across the whole job: everything that went in
// equals what came out (P x the averaged results) plus what is still kept in
// the residuals, to float rounding (sums in double).
void scenarioConservation() {
  const int64_t n = 20000;
  const int kSteps = 200;
  std::vector<double> in_sum(n, 0.0), out_sum(n, 0.0);
  std::vector<float> x(n), out(n);
  std::vector<int64_t> shape{n};
  for (int step = 0; step < kSteps; ++step) {
    for (int64_t i = 0; i < n; ++i) {
      x[i] = gradValue((uint64_t(step) << 40) ^ (uint64_t(g_rank) << 32) ^ i);
      in_sum[i] += x[i];
    }
    mgs_tensor_t in = cpuTensor(x.data(), MGS_FLOAT32, shape), o = cpuTensor(out.data(), MGS_FLOAT32, shape);
    mgs_handle_t h = 0;
    EXPECT_OK(mgs_allreduce_async("w", &in, &o, MGS_REDUCE_SUM, 1, 1, MGS_FLAG_SPARSE_OK, &h));
    EXPECT_OK(mgs_wait(h));
    mgs_release(h);
    for (int64_t i = 0; i < n; ++i) out_sum[i] += out[i];
  }
  bool has;
  std::vector<float> res = residualOf("w", n, &has);
  EXPECT(has, "no residual kept");
  // Job-wide sums of the inputs and residuals (dense, exact double allreduce).
  std::vector<double> totals(2 * n);
  for (int64_t i = 0; i < n; ++i) {
    totals[i] = in_sum[i];
    totals[n + i] = res[i];
  }
  std::vector<int64_t> tshape{2 * n};
  mgs_tensor_t t = cpuTensor(totals.data(), MGS_FLOAT64, tshape);
  mgs_handle_t h = 0;
  EXPECT_OK(mgs_allreduce_async("totals", &t, &t, MGS_REDUCE_SUM, 1, 1, 0, &h));
  EXPECT_OK(mgs_wait(h));
  mgs_release(h);
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < n; ++i) {
    worst = std::max(worst, std::fabs(out_sum[i] + totals[n + i] - totals[i]));
    scale = std::max(scale, std::fabs(totals[i]));
  }
  EXPECT(worst <= 1e-4 * std::max(scale, 1.0), "conservation error %g (scale %g)", worst, scale);
  if (g_rank == 0)
    std::printf("conservation over %d steps: max error %.3g (largest input sum %.3g)\n", kSteps, worst, scale);
}

// mgs initialised MPI here: the Open MPI TCP settings it chose (progress
// thread, 1 MiB eager messages) were in the environment Open MPI read at
// MPI_Init, and a value the user set was left alone. EXPECT_TCP_EAGER names the
// eager limit this run expects.
void scenarioMpiSettings() {
  const char* want = std::getenv("EXPECT_TCP_EAGER");
  EXPECT(want != nullptr, "EXPECT_TCP_EAGER is not set");
  if (!want) return;
  const char* names[] = {"OMPI_MCA_btl_tcp_eager_limit", "OMPI_MCA_btl_tcp_rndv_eager_limit",
                         "OMPI_MCA_btl_tcp_max_send_size"};
  for (const char* name : names) {
    const char* v = std::getenv(name);
    EXPECT(v != nullptr && std::string(v) == want, "%s is '%s', expected '%s'", name, v ? v : "(unset)", want);
  }
  const char* pt = std::getenv("OMPI_MCA_btl_tcp_progress_thread");
  EXPECT(pt != nullptr && std::string(pt) == "1", "OMPI_MCA_btl_tcp_progress_thread is '%s'", pt ? pt : "(unset)");
}

// The dense allreduce's algorithm by size: the bound init chose (measured,
// or 64 KiB with EXPECT_RING_MIN under MGS_CALIBRATION=off) is the same on
// every rank, and each float sum of 64 KiB and more runs on the algorithm
// the bound gives it, exactly.
void scenarioRingChoice() {
  mgs_stats_t st{};
  EXPECT_OK(mgs_get_stats(&st, sizeof st));
  const uint64_t bound = st.allreduce_ring_min_bytes;
  if (const char* want = std::getenv("EXPECT_RING_MIN")) {
    EXPECT(bound == std::stoull(want), "bound %llu, expected %s", (unsigned long long)bound, want);
  } else {
    const std::vector<uint64_t> measured = {64 << 10, 256 << 10, 1 << 20, 4 << 20, 8 << 20};
    EXPECT(std::find(measured.begin(), measured.end(), bound) != measured.end(), "bound %llu is none of the "
           "measured sizes", (unsigned long long)bound);
  }
  // The same bound everywhere: every rank finds the sum over ranks P times
  // its own (were they not all equal, the smallest's would be less).
  {
    std::vector<int64_t> v{static_cast<int64_t>(bound)};
    const std::vector<int64_t> shape{1};  // cpuTensor keeps a pointer to it
    mgs_tensor_t t = cpuTensor(v.data(), MGS_INT64, shape);
    mgs_handle_t h = 0;
    EXPECT_OK(mgs_allreduce_async("ring.bound", &t, &t, MGS_REDUCE_SUM, 1, 1, 0, &h));
    EXPECT_OK(mgs_wait(h));
    EXPECT_OK(mgs_release(h));
    EXPECT(v[0] == static_cast<int64_t>(bound) * g_size, "bound %llu here, sum %lld over %d ranks",
           (unsigned long long)bound, (long long)v[0], g_size);
  }
  uint64_t want_ring = 0, want_library = 0;
  for (size_t bytes : {size_t{64} << 10, size_t{256} << 10, size_t{1} << 20, size_t{4} << 20, size_t{9} << 20}) {
    const size_t n = bytes / 4;
    ++(bytes >= bound ? want_ring : want_library);
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(contribution(g_rank, i));
    const std::vector<int64_t> shape{static_cast<int64_t>(n)};
    mgs_tensor_t t = cpuTensor(x.data(), MGS_FLOAT32, shape);
    mgs_handle_t h = 0;
    const std::string name = "ring." + std::to_string(bytes);
    EXPECT_OK(mgs_allreduce_async(name.c_str(), &t, &t, MGS_REDUCE_SUM, 1, 1, 0, &h));
    EXPECT_OK(mgs_wait(h));
    EXPECT_OK(mgs_release(h));
    int bad = 0;
    for (size_t i = 0; i < n; ++i) bad += x[i] != static_cast<float>(expected(MGS_FLOAT32, i, false, 1, 1));
    EXPECT(bad == 0, "%s: %d wrong entries", name.c_str(), bad);
  }
  // One more (small) operation: the cycle that ran the last large one has
  // published its counters before this one completes.
  std::vector<float> one{1.0f};
  const std::vector<int64_t> shape{1};
  mgs_tensor_t t = cpuTensor(one.data(), MGS_FLOAT32, shape);
  mgs_handle_t h = 0;
  EXPECT_OK(mgs_allreduce_async("ring.after", &t, &t, MGS_REDUCE_SUM, 1, 1, 0, &h));
  EXPECT_OK(mgs_wait(h));
  EXPECT_OK(mgs_release(h));
  mgs_stats_t after{};
  EXPECT_OK(mgs_get_stats(&after, sizeof after));
  EXPECT(after.allreduce_ring_ops - st.allreduce_ring_ops == want_ring &&
             after.allreduce_library_ops - st.allreduce_library_ops == want_library,
         "ring %llu, library %llu; bound %llu gives %llu and %llu",
         (unsigned long long)(after.allreduce_ring_ops - st.allreduce_ring_ops),
         (unsigned long long)(after.allreduce_library_ops - st.allreduce_library_ops), (unsigned long long)bound,
         (unsigned long long)want_ring, (unsigned long long)want_library);
  if (g_rank == 0)
    std::printf("ring_choice: ring from %llu bytes; %llu on the ring, %llu on Open MPI's\n",
                (unsigned long long)bound, (unsigned long long)want_ring, (unsigned long long)want_library);
}

}  // namespace

// Launched with a different MGS_CYCLE_TIME_MS on some ranks (it decides when
// partial sparse buckets flush): mgs_init must fail on every rank with
// MGS_ERR_CONFIG naming the variable, not end the job inside MPI. Runs before
// (instead of) the shared mgs_init below.
int scenarioConfigMismatch() {
  const mgs_status_t st = mgs_init();
  const std::string msg = mgs_last_error();
  if (st == MGS_SUCCESS) mgs_shutdown();
  if (st != MGS_ERR_CONFIG || msg.find("MGS_CYCLE_TIME_MS differs on ranks") == std::string::npos) {
    std::fprintf(stderr, "config_mismatch: mgs_init -> %d '%s', expected MGS_ERR_CONFIG naming MGS_CYCLE_TIME_MS\n",
                 static_cast<int>(st), msg.c_str());
    return 1;
  }
  std::printf("config_mismatch: got the expected error: %s\n", msg.c_str());
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s allreduce|many|allgather|broadcast|mismatch|duplicate|stall|killed|shutdown\n",
                 argv[0]);
    return 2;
  }
  const std::string scenario = argv[1];
  // Before init every call fails cleanly.
  int r = -1;
  if (mgs_rank(&r) != MGS_ERR_NOT_INITIALIZED || std::strstr(mgs_last_error(), "mgs_init") == nullptr) {
    std::fprintf(stderr, "mgs_rank before mgs_init did not fail with a message naming mgs_init()\n");
    return 1;
  }
  if (scenario == "config_mismatch") return scenarioConfigMismatch();
  if (mgs_init() != MGS_SUCCESS) {
    std::fprintf(stderr, "mgs_init failed: %s\n", mgs_last_error());
    return 1;
  }
  mgs_rank(&g_rank);
  mgs_size(&g_size);
  const std::map<std::string, void (*)()> scenarios = {{"allreduce", scenarioAllreduce},
                                                       {"many", scenarioManyTensors},
                                                       {"allgather", scenarioAllgather},
                                                       {"broadcast", scenarioBroadcast},
                                                       {"mismatch", scenarioMismatch},
                                                       {"duplicate", scenarioDuplicate},
                                                       {"stall", scenarioStall},
                                                       {"killed", scenarioKilled},
                                                       {"shutdown", scenarioShutdown},
                                                       {"sparse", scenarioSparse},
                                                       {"conservation", scenarioConservation},
                                                       {"mpi_settings", scenarioMpiSettings},
                                                       {"ring_choice", scenarioRingChoice}};
  auto it = scenarios.find(scenario);
  if (it == scenarios.end()) {
    std::fprintf(stderr, "unknown scenario '%s'\n", scenario.c_str());
    return 2;
  }
  it->second();
  const int rc = mpitest::finish();
  mgs_shutdown();
  return rc;
}
