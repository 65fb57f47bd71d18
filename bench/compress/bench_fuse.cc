// mgs-bench-fuse: what the deferred residual commit (MGS_NONFINITE, docs/c-api.md)
// costs in the sparse pipeline's local stage, one bucket of n float32 values:
//   old members path: r += x in place (addIntoFloat), then select in place on r
//   old direct path:  select(x, r): the selector's fused pass forms acc in r
//   new members path: S = r + x into a scratch slab, counting NaN/Inf in the same
//                     pass (fuseIntoFloat), then select in place on S
//   new direct path:  select(x, residualIn = r, residual = S): the fused pass
//                     reads r and writes acc to S
//   one-pass members: select(parts, residualIn = r, residual = S): the bucket's
//                     members (x cut into --parts tensors) read where they lie,
//                     no fuse pass (the runtime's path for host buckets)
//   agreed non-leader: one tensor reduced in place, the local stage's fuse
//                     (CpuLocalStage::run) then the scatter's zeroing of the
//                     output (ScatterStage::scatterAgreed with no picks),
//                     without and with LocalJob::zero_inputs (the fuse zeroes
//                     the input chunk by chunk; the scatter then zeroes nothing)
// Median of --reps runs after one warm-up; every run starts from the same r.
//   mgs-bench-fuse --n 25600000 --density 0.001 --selector gaussiank --threads 2
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench_data.h"
#include "common/dtype.h"
#include "compress/selector.h"
#include "core/cpu_local_stage.h"
#include "core/nonfinite.h"
#include "core/residual_store.h"
#include "core/scatter_stage.h"

namespace {

double nowMs() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  size_t n = 25600000;
  double density = 0.001;
  std::string selector = "gaussiank";
  int threads = 2, reps = 5, nparts = 50;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--n") n = std::stoull(v);
    else if (k == "--density") density = std::stod(v);
    else if (k == "--selector") selector = v;
    else if (k == "--threads") threads = std::stoi(v);
    else if (k == "--reps") reps = std::stoi(v);
    else if (k == "--parts") nparts = std::max(1, std::stoi(v));
    else {
      std::fprintf(stderr, "usage: %s [--n N] [--density R] [--selector S] [--threads T] [--reps K] [--parts P]\n", argv[0]);
      return 2;
    }
  }
  mgs::compress::SelectorOptions o;
  o.density = density;
  o.numThreads = threads;
  std::unique_ptr<mgs::compress::Selector> sel;
  mgs::Status st = mgs::compress::Selector::create(selector, o, &sel);
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", st.toString().c_str());
    return 2;
  }
  const std::vector<float> x = mgs::bench::makeGradients("laplace", n, 1);
  std::vector<float> r0 = mgs::bench::makeGradients("laplace", n, 2);
  for (auto& v : r0) v *= 0.1f;
  std::vector<float> r(n), s(n), values(sel->maxCount(n));
  std::vector<uint32_t> idx(values.size());
  std::vector<std::max_align_t> ws(sel->workspaceBytes(n) / sizeof(std::max_align_t) + 1);
  // x cut into nparts tensors of uneven sizes (a merged bucket's members).
  std::vector<mgs::compress::GradientPart> parts;
  size_t off = 0;
  for (int j = 0; j < nparts; ++j) {
    const double f = static_cast<double>(j + 1) / nparts;
    const size_t end = j + 1 == nparts ? n : static_cast<size_t>(static_cast<double>(n) * f * f);
    parts.push_back({x.data() + off, MGS_FLOAT32, 1.0f, end - off});
    off = end;
  }
  auto select = [&](const float* xp, float* res, const float* rin = nullptr, bool useParts = false) {
    mgs::compress::SelectArgs a;
    a.x = xp;
    if (useParts) a.parts = mgs::compress::GradientParts{parts.data(), parts.size()};
    a.residualIn = rin;
    a.residual = res;
    a.n = n;
    a.outValues = values.data();
    a.outIndices = idx.data();
    a.workspace = ws.data();
    a.workspaceBytes = ws.size() * sizeof(std::max_align_t);
    mgs::compress::SelectResult out;
    if (!sel->select(a, &out).ok()) std::exit(1);
  };
  std::vector<double> fuseOld, allOld, direct, fuseNew, allNew, directNew, onePass;
  size_t bad = 0;
  for (int i = 0; i <= reps; ++i) {
    std::memcpy(r.data(), r0.data(), n * 4);
    double t0 = nowMs();
    mgs::addIntoFloat(x.data(), MGS_FLOAT32, n, 1.0, false, r.data());
    const double t1 = nowMs();
    select(nullptr, r.data());
    const double t2 = nowMs();
    std::memcpy(r.data(), r0.data(), n * 4);
    const double t3 = nowMs();
    select(x.data(), r.data());
    const double t4 = nowMs();
    std::memcpy(r.data(), r0.data(), n * 4);
    const double t5 = nowMs();
    bad += mgs::fuseIntoFloat(x.data(), MGS_FLOAT32, n, 1.0, r.data(), s.data());
    const double t6 = nowMs();
    select(nullptr, s.data());
    const double t7 = nowMs();
    select(x.data(), s.data(), r.data());
    const double t8 = nowMs();
    select(nullptr, s.data(), r.data(), true);
    const double t9 = nowMs();
    if (i == 0) continue;  // warm-up: page faults of the first touch
    fuseOld.push_back(t1 - t0);
    allOld.push_back(t2 - t0);
    direct.push_back(t4 - t3);
    fuseNew.push_back(t6 - t5);
    allNew.push_back(t7 - t5);
    directNew.push_back(t8 - t7);
    onePass.push_back(t9 - t8);
  }
  std::printf("mgs-bench-fuse --n %zu --density %g --selector %s --threads %d --reps %d (median ms; %zu non-finite)\n",
              n, density, selector.c_str(), threads, reps, bad);
  std::printf("old members path: add in place %.2f, + select in place = %.2f\n", median(fuseOld), median(allOld));
  std::printf("old direct path:  select(x, r) = %.2f\n", median(direct));
  std::printf("new members path: fuse into scratch + count %.2f, + select in place = %.2f\n", median(fuseNew),
              median(allNew));
  std::printf("new direct path:  select(x, residualIn = r, residual = S) = %.2f\n", median(directNew));
  std::printf("one-pass members path: select(%zu parts, residualIn = r, residual = S) = %.2f (%.3f of the new members path)\n",
              parts.size(), median(onePass), median(onePass) / median(allNew));
  std::printf("new / old: members %.3f, direct %.3f\n", median(allNew) / median(allOld),
              median(directNew) / median(direct));

  // The agreed exchange's non-leader on one in-place tensor.
  mgs::ResidualStore store;
  std::vector<float> xw(n);
  mgs::Request req;
  req.name = "x";
  req.input.data = req.output.data = xw.data();
  req.input.dtype = req.output.dtype = MGS_FLOAT32;
  req.input.shape = req.output.shape = {static_cast<int64_t>(n)};
  std::vector<mgs::Request> members{req};
  mgs::LocalStageOptions lo;
  lo.residuals = &store;
  mgs::CpuLocalStage stage(lo);
  mgs::ScatterStage scatter(4);
  double agreed[2][2];  // [zero_inputs][fuse, fuse + scatter]
  for (int zero = 0; zero < 2; ++zero) {
    std::vector<double> fuse, all;
    for (int i = 0; i <= reps; ++i) {
      std::memcpy(xw.data(), x.data(), n * 4);
      if (!store.copyIn("x", r0.data(), n).ok()) return 1;
      mgs::LocalJob job;
      job.members = &members;
      job.n = n;
      job.zero_inputs = zero == 1;
      mgs::LocalOutcome out;
      const double t0 = nowMs();
      stage.run(job, &out);
      const double t1 = nowMs();
      if (!out.status.ok() || !scatter.scatterAgreed(members, n, nullptr, nullptr, 0, out.inputs_zeroed).ok()) return 1;
      const double t2 = nowMs();
      stage.settle(members, std::move(out.slab), false);  // the slab back to the pool, as a failed bucket
      if (i == 0) continue;
      fuse.push_back(t1 - t0);
      all.push_back(t2 - t0);
    }
    agreed[zero][0] = median(fuse);
    agreed[zero][1] = median(all);
  }
  std::printf("agreed non-leader, in place: fuse %.2f + zero the output = %.2f; zeroing while fusing %.2f (%.3f)\n",
              agreed[0][0], agreed[0][1], agreed[1][1], agreed[1][1] / agreed[0][1]);
  return 0;
}
