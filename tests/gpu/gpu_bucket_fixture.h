// What the CUDA local-stage tests share: the two-member bucket (an f32 member
// with prescale 0.5 and an f16 member, each held on the host and on device 0,
// with the Request lists for both), and a host stage beside a CUDA stage.
// Needs a CUDA device (GPU tests only).
#pragma once

#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"
#include "compress/decompress.h"
#include "core/sparse_block.h"
#include "core/cpu_local_stage.h"
#include "core/request.h"
#include "core/residual_store.h"
#include "cuda_local_stage.h"

namespace mgs::test {

struct Dev {
  void* p = nullptr;
  explicit Dev(size_t bytes) { REQUIRE(cudaMalloc(&p, bytes ? bytes : 1) == cudaSuccess); }
  ~Dev() { cudaFree(p); }
  void put(const void* h, size_t b) { REQUIRE(cudaMemcpy(p, h, b, cudaMemcpyHostToDevice) == cudaSuccess); }
};

inline std::vector<float> gaussian(size_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(g) * 1e-2f;
  return v;
}

struct Bucket {
  std::vector<float> a;  // f32 host gradient
  std::vector<char> b;   // f16 host gradient
  std::vector<Request> host, dev;
  std::unique_ptr<Dev> da, db;
};

inline Bucket makeBucket(size_t na, size_t nb, uint64_t seed) {
  Bucket k;
  k.a = gaussian(na, seed);
  const std::vector<float> bf = gaussian(nb, seed + 1);
  k.b.resize(nb * 2);
  fromFloat(bf.data(), MGS_FLOAT16, nb, k.b.data());
  k.da = std::make_unique<Dev>(na * 4);
  k.da->put(k.a.data(), na * 4);
  k.db = std::make_unique<Dev>(nb * 2);
  k.db->put(k.b.data(), nb * 2);
  for (int on_dev = 0; on_dev < 2; ++on_dev) {
    Request ra, rb;
    ra.name = "w.a";
    ra.input.dtype = MGS_FLOAT32;
    ra.input.shape = {static_cast<int64_t>(na)};
    ra.sig.prescale = 0.5;
    rb.name = "w.b";
    rb.input.dtype = MGS_FLOAT16;
    rb.input.shape = {static_cast<int64_t>(nb)};
    ra.input.data = on_dev ? k.da->p : k.a.data();
    rb.input.data = on_dev ? k.db->p : static_cast<void*>(k.b.data());
    if (on_dev) ra.input.device = rb.input.device = 0;
    (on_dev ? k.dev : k.host) = {ra, rb};
  }
  return k;
}

// A host stage and a CUDA stage on `device`, each with its own residual
// store; the CUDA stage holds its residuals on the device (the store's
// External holder) until it is destroyed.
struct TwinStages {
  ResidualStore hs, ds;
  std::unique_ptr<CpuLocalStage> host;
  std::unique_ptr<cuda::CudaLocalStage> dev;
  Status create(int device) {
    LocalStageOptions ho, dopt;
    ho.residuals = &hs;
    dopt.residuals = &ds;
    host = std::make_unique<CpuLocalStage>(ho);
    const Status st = cuda::CudaLocalStage::create(dopt, device, &dev);
    if (dev) ds.setExternal(dev.get());
    return st;
  }
  ~TwinStages() { ds.setExternal(nullptr); }
};

// The host reference of a device scatter: P received allgather blocks of
// capacity `cap` through the one host scatter-add into a bucket of an f32
// member (na values, into *a) and an f16 member (nb, into *b16), with
// `scales` per member.
inline Status hostScatter(const std::vector<char>& recv, int P, size_t cap, size_t na, size_t nb,
                          const float scales[2], std::vector<float>* a, std::vector<char>* b16) {
  std::vector<float> ref(na + nb, -1.0f);
  std::vector<compress::RankPairs> pairs(P);
  for (int r = 0; r < P; ++r) {
    const block::ConstAllgatherBlock blk(recv.data() + r * block::allgatherBytes(cap), cap);
    pairs[r] = {blk.values(), blk.indices(), static_cast<size_t>(blk.header())};
  }
  float* parts[2] = {ref.data(), ref.data() + na};
  const size_t offsets[3] = {0, na, na + nb};
  compress::ScatterOutput out;
  out.parts = parts;
  out.offsets = offsets;
  out.scales = scales;
  out.numParts = 2;
  const Status st = compress::scatterAddParts(pairs.data(), P, out, nullptr, 1);
  a->assign(ref.begin(), ref.begin() + na);
  b16->assign(nb * 2, 0);
  fromFloat(ref.data() + na, MGS_FLOAT16, nb, b16->data());
  return st;
}

}  // namespace mgs::test
