// A deterministic multi-step sparse job through the C ABI, for comparing two
// builds of libmgs bit for bit (scripts/ab_exchanges.sh): every rank prints
// one line with hashes of every step's outputs and error messages, its final
// error-feedback residuals and its deterministic statistics counters.
//
//   ab_exchanges_driver STEPS [NAN_STEP NAN_RANK]
//
// The exchange, planner, density and non-finite mode come from the
// environment (MGS_*). A NaN is put into tensor 2 on rank NAN_RANK at step
// NAN_STEP (-1: none). Gradients are a hash of (step, rank, tensor, index),
// so two runs differ only where the library does.
#include <mgs/mgs.h>

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

uint64_t fnv1a(const void* data, size_t bytes, uint64_t h) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

float grad(uint64_t seed) {
  seed = (seed + 0x9e3779b97f4a7c15ull) * 0xbf58476d1ce4e5b9ull;
  seed ^= seed >> 31;
  seed *= 0x94d049bb133111ebull;
  seed ^= seed >> 29;
  return static_cast<float>((seed >> 11) * (1.0 / 9007199254740992.0) - 0.5);
}

mgs_tensor_t tensor(float* data, const std::vector<int64_t>& shape) {
  mgs_tensor_t t;
  std::memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = MGS_FLOAT32;
  t.ndim = static_cast<int32_t>(shape.size());
  t.shape = shape.data();
  t.device = MGS_DEVICE_CPU;
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 8;
  const int nan_step = argc > 2 ? std::atoi(argv[2]) : -1;
  const int nan_rank = argc > 3 ? std::atoi(argv[3]) : 0;
  if (mgs_init() != MGS_SUCCESS) {
    std::fprintf(stderr, "mgs_init: %s\n", mgs_last_error());
    return 1;
  }
  int rank = 0, size = 0;
  mgs_rank(&rank);
  mgs_size(&size);
  const std::vector<int64_t> sizes = {30000, 6000, 50000, 12000, 100000, 8192};
  const size_t L = sizes.size();
  const uint64_t seed = 1469598103934665603ull;
  uint64_t h_out = seed, h_err = seed, h_res = seed;
  int errors = 0;
  for (int step = 0; step < steps; ++step) {
    std::vector<std::vector<float>> in(L), out(L);
    std::vector<std::vector<int64_t>> shapes(L);
    std::vector<mgs_handle_t> h(L, 0);
    for (size_t k = 0; k < L; ++k) {
      const size_t t = L - 1 - k;  // backward: last layer first
      in[t].resize(sizes[t]);
      for (int64_t i = 0; i < sizes[t]; ++i)
        in[t][i] = grad((uint64_t(step) << 40) ^ (uint64_t(rank) << 32) ^ (uint64_t(t) << 24) ^ uint64_t(i));
      if (step == nan_step && rank == nan_rank && t == 2) in[t][7] = std::nanf("");
      out[t].assign(sizes[t], -1.0f);
      shapes[t] = {sizes[t]};
      const mgs_tensor_t ti = tensor(in[t].data(), shapes[t]), to = tensor(out[t].data(), shapes[t]);
      const std::string name = "layer" + std::to_string(t);
      if (mgs_allreduce_async(name.c_str(), &ti, &to, MGS_REDUCE_AVERAGE, 1, 1, MGS_FLAG_SPARSE_OK, &h[t]) !=
          MGS_SUCCESS) {
        std::fprintf(stderr, "rank %d: enqueue %s: %s\n", rank, name.c_str(), mgs_last_error());
        return 1;
      }
    }
    for (size_t t = 0; t < L; ++t) {
      const mgs_status_t st = mgs_wait(h[t]);
      if (st != MGS_SUCCESS) {
        ++errors;
        const std::string msg = mgs_last_error();
        h_err = fnv1a(&st, sizeof st, h_err);
        h_err = fnv1a(msg.data(), msg.size(), h_err);
        if (std::getenv("AB_VERBOSE")) std::fprintf(stderr, "rank %d step %d: %s\n", rank, step, msg.c_str());
      }
      mgs_release(h[t]);
      h_out = fnv1a(out[t].data(), out[t].size() * sizeof(float), h_out);
    }
  }
  int missing = 0;
  for (size_t t = 0; t < L; ++t) {
    std::vector<float> r(sizes[t]);
    const std::string name = "layer" + std::to_string(t);
    if (mgs_residual_copy(name.c_str(), r.data(), r.size()) != MGS_SUCCESS) {
      ++missing;  // a tensor reduced densely has none
      continue;
    }
    h_res = fnv1a(r.data(), r.size() * sizeof(float), h_res);
  }
  mgs_stats_t s;
  std::memset(&s, 0, sizeof s);
  mgs_get_stats(&s, sizeof s);
  // Timing-free counters only (in_flight_max depends on when exchanges complete).
  const uint64_t c[] = {s.sparse_buckets,      s.sparse_dense_buckets,  s.sparse_selected,       s.sparse_target,
                        s.sparse_bytes_sent,   s.sparse_dense_bytes,    s.sparse_agreed_buckets, s.path_host_buckets,
                        s.path_staged_buckets, s.path_resident_buckets, s.path_device_buckets,   s.path_host_bytes,
                        s.path_staged_bytes,   s.path_resident_bytes,   s.path_device_bytes};
  const uint64_t h_stats = fnv1a(c, sizeof c, seed);
  std::printf("rank %d: outputs %016" PRIx64 " errors %d/%016" PRIx64 " residuals %016" PRIx64
              " (%d none) stats %016" PRIx64 " [buckets %" PRIu64 " dense %" PRIu64 " agreed %" PRIu64
              " selected %" PRIu64 " bytes %" PRIu64 "]\n",
              rank, h_out, errors, h_err, h_res, missing, h_stats, s.sparse_buckets, s.sparse_dense_buckets,
              s.sparse_agreed_buckets, s.sparse_selected, s.sparse_bytes_sent);
  std::fflush(stdout);
  mgs_shutdown();
  return 0;
}
