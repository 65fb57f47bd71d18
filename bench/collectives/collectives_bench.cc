// Dense collectives through mgs against raw MPI, on the same buffers and ranks.
//   (a) allreduce of one buffer, 4 KiB .. 256 MiB: mgs vs MPI_Allreduce
//   (b) one step of a real model's parameter list (BERT-base: 199 tensors):
//       mgs (async enqueue of all, fusion) vs one MPI_Allreduce per tensor,
//       plus mgs's steady-state negotiation time per step.
//   (c) reducescatter of one buffer, 256 KiB .. max: mgs_reducescatter
//       against mgs's allreduce of the same buffer (what a reducescatter
//       built as allreduce-then-slice costs) and raw MPI_Reduce_scatter_block.
// Raw MPI runs before mgs_init so the coordinator thread cannot disturb it.
// Rank 0 prints JSON lines (one per measurement) and a table.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "mgs/mgs.h"

namespace {

using Clock = std::chrono::steady_clock;
int g_rank = 0, g_size = 1;

double maxOverRanks(double v) {
  double out = v;
  MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void check(mgs_status_t st, const char* what) {
  if (st != MGS_SUCCESS) {
    std::fprintf(stderr, "[rank %d] %s: %s\n", g_rank, what, mgs_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

// Times `fn` `iters` times after `warmup` calls; returns the median of the
// per-iteration maximum over ranks (a collective is as slow as its slowest rank).
template <typename F>
double timeIt(int warmup, int iters, F&& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = Clock::now();
    fn();
    t.push_back(maxOverRanks(std::chrono::duration<double>(Clock::now() - t0).count()));
  }
  return median(t);
}

std::vector<int64_t> bertBaseSizes(int hidden, int layers, int vocab) {
  const int64_t h = hidden, ff = 4 * hidden;
  std::vector<int64_t> s = {vocab * h, 512 * h, 2 * h, h, h};
  for (int l = 0; l < layers; ++l) {
    for (int qkv = 0; qkv < 3; ++qkv) s.insert(s.end(), {h * h, h});
    s.insert(s.end(), {h * h, h, h, h, ff * h, ff, h * ff, h, h, h});
  }
  s.insert(s.end(), {h * h, h});
  std::reverse(s.begin(), s.end());  // backward order: gradients of the last layers come first
  return s;
}

mgs_tensor_t cpuTensor(float* p, const int64_t* shape) {
  mgs_tensor_t t{};
  t.data = p;
  t.dtype = MGS_FLOAT32;
  t.ndim = 1;
  t.shape = shape;
  t.device = MGS_DEVICE_CPU;
  return t;
}

void emit(const char* bench, const std::string& fields) {
  if (g_rank == 0) std::printf("{\"bench\":\"%s\",\"ranks\":%d,%s}\n", bench, g_size, fields.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mgs dense collectives vs raw MPI"};
  int64_t max_bytes = 256ll << 20;
  int steps = 10, hidden = 768, layers = 12, vocab = 30522;
  app.add_option("--max-bytes", max_bytes, "largest single-buffer size")->check(CLI::Range(4096ll, 1ll << 31));
  app.add_option("--steps", steps, "model steps timed per method")->check(CLI::PositiveNumber);
  app.add_option("--hidden", hidden, "BERT hidden size (768 = BERT-base)")->check(CLI::PositiveNumber);
  app.add_option("--layers", layers, "BERT layers")->check(CLI::PositiveNumber);
  app.add_option("--vocab", vocab, "vocabulary size")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  if (provided < MPI_THREAD_MULTIPLE) {
    if (g_rank == 0) std::fprintf(stderr, "MPI_THREAD_MULTIPLE is required\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

  std::vector<int64_t> sizes;
  for (int64_t b = 4096; b <= max_bytes; b *= 4) sizes.push_back(b);
  auto itersFor = [](int64_t bytes) { return static_cast<int>(std::clamp<int64_t>((64ll << 20) / bytes, 5, 50)); };
  std::vector<float> buf(max_bytes / 4, 1.0f);

  // (a) raw MPI first.
  std::vector<double> raw;
  for (int64_t b : sizes)
    raw.push_back(timeIt(2, itersFor(b), [&] {
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(b / 4), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }));

  // (c) raw MPI reduce-scatter (each rank keeps 1/P of the buffer).
  std::vector<int64_t> rs_sizes;
  for (int64_t b : sizes)
    if (b >= (256 << 10) && (b / 4) % g_size == 0) rs_sizes.push_back(b);
  std::vector<float> part(max_bytes / 4 / g_size + 1);
  std::vector<double> raw_rs;
  for (int64_t b : rs_sizes)
    raw_rs.push_back(timeIt(2, itersFor(b), [&] {
      MPI_Reduce_scatter_block(buf.data(), part.data(), static_cast<int>(b / 4 / g_size), MPI_FLOAT, MPI_SUM,
                               MPI_COMM_WORLD);
    }));

  // (b) raw MPI, one call per tensor.
  const std::vector<int64_t> model = bertBaseSizes(hidden, layers, vocab);
  int64_t model_elems = 0;
  for (int64_t n : model) model_elems += n;
  std::vector<std::vector<float>> grads(model.size());
  for (size_t i = 0; i < model.size(); ++i) grads[i].assign(model[i], 0.5f);
  const double raw_step = timeIt(1, steps, [&] {
    for (auto& g : grads)
      MPI_Allreduce(MPI_IN_PLACE, g.data(), static_cast<int>(g.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  });

  check(mgs_init(), "mgs_init");
  std::vector<double> ours;
  for (int64_t b : sizes) {
    const std::string name = "buf." + std::to_string(b);
    const int64_t shape[1] = {b / 4};
    ours.push_back(timeIt(2, itersFor(b), [&] {
      mgs_tensor_t t = cpuTensor(buf.data(), shape);
      mgs_handle_t h;
      check(mgs_allreduce_async(name.c_str(), &t, &t, MGS_REDUCE_SUM, 1, 1, 0, &h), "allreduce");
      check(mgs_wait(h), "wait");
      mgs_release(h);
    }));
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    char f[256];
    std::snprintf(f, sizeof f, "\"bytes\":%lld,\"mpi_s\":%.6e,\"mgs_s\":%.6e,\"ratio\":%.3f", (long long)sizes[i],
                  raw[i], ours[i], ours[i] / raw[i]);
    emit("allreduce", f);
  }
  // (c) mgs's reducescatter, against mgs's allreduce of the same buffer (from (a)).
  std::vector<double> ours_rs, ours_ar;
  for (size_t i = 0; i < rs_sizes.size(); ++i) {
    const int64_t b = rs_sizes[i];
    const std::string name = "rs." + std::to_string(b);
    const int64_t in_shape[1] = {b / 4}, out_shape[1] = {b / 4 / g_size};
    ours_rs.push_back(timeIt(2, itersFor(b), [&] {
      mgs_tensor_t in = cpuTensor(buf.data(), in_shape), out = cpuTensor(part.data(), out_shape);
      mgs_handle_t h;
      check(mgs_reducescatter_async(name.c_str(), &in, &out, MGS_REDUCE_SUM, 1, 1, 0, &h), "reducescatter");
      check(mgs_wait(h), "wait");
      mgs_release(h);
    }));
    ours_ar.push_back(ours[static_cast<size_t>(std::find(sizes.begin(), sizes.end(), b) - sizes.begin())]);
    char f[320];
    std::snprintf(f, sizeof f,
                  "\"bytes\":%lld,\"mpi_reduce_scatter_s\":%.6e,\"mgs_s\":%.6e,\"mgs_allreduce_s\":%.6e,"
                  "\"ratio_vs_allreduce\":%.3f,\"ratio_vs_mpi\":%.3f",
                  (long long)b, raw_rs[i], ours_rs[i], ours_ar[i], ours_rs[i] / ours_ar[i], ours_rs[i] / raw_rs[i]);
    emit("reducescatter", f);
  }

  std::vector<std::string> names(model.size());
  for (size_t i = 0; i < model.size(); ++i) names[i] = "bert.param." + std::to_string(i);
  std::vector<mgs_handle_t> handles(model.size());
  auto step = [&] {
    for (size_t i = 0; i < model.size(); ++i) {
      mgs_tensor_t t = cpuTensor(grads[i].data(), &model[i]);
      check(mgs_allreduce_async(names[i].c_str(), &t, &t, MGS_REDUCE_SUM, 1, 1, 0, &handles[i]), "allreduce");
    }
    for (auto h : handles) {
      check(mgs_wait(h), "wait");
      mgs_release(h);
    }
  };
  step();  // first step: names are new, negotiated through rank 0
  mgs_stats_t before{}, after{};
  check(mgs_get_stats(&before, sizeof before), "stats");
  const double mgs_step = timeIt(0, steps, step);
  check(mgs_get_stats(&after, sizeof after), "stats");
  const double nego_per_step = maxOverRanks((after.negotiation_seconds - before.negotiation_seconds) / steps);
  const uint64_t slow = after.negotiation_slow_cycles - before.negotiation_slow_cycles;
  char f[512];
  std::snprintf(f, sizeof f,
                "\"tensors\":%zu,\"elements\":%lld,\"mpi_per_tensor_s\":%.6e,\"mgs_s\":%.6e,\"ratio\":%.3f,"
                "\"negotiation_s_per_step\":%.6e,\"cycles_per_step\":%.2f,\"slow_cycles\":%llu",
                model.size(), (long long)model_elems, raw_step, mgs_step, mgs_step / raw_step, nego_per_step,
                double(after.negotiation_cycles - before.negotiation_cycles) / steps, (unsigned long long)slow);
  emit("model_step", f);

  if (g_rank == 0) {
    std::printf("\n%d ranks. (a) single-buffer allreduce, median of per-iteration max over ranks\n", g_size);
    std::printf("%12s %14s %14s %8s\n", "bytes", "MPI (s)", "mgs (s)", "mgs/MPI");
    for (size_t i = 0; i < sizes.size(); ++i)
      std::printf("%12lld %14.6f %14.6f %8.3f\n", (long long)sizes[i], raw[i], ours[i], ours[i] / raw[i]);
    std::printf("\n(c) reducescatter (each rank keeps 1/%d), median of per-iteration max over ranks\n", g_size);
    std::printf("%12s %14s %14s %16s %10s %8s\n", "bytes", "MPI RS (s)", "mgs RS (s)", "mgs allreduce", "RS/AR", "RS/MPI");
    for (size_t i = 0; i < rs_sizes.size(); ++i)
      std::printf("%12lld %14.6f %14.6f %16.6f %10.3f %8.3f\n", (long long)rs_sizes[i], raw_rs[i], ours_rs[i],
                  ours_ar[i], ours_rs[i] / ours_ar[i], ours_rs[i] / raw_rs[i]);
    std::printf("\n(b) one step of %zu tensors (%lld float32 values)\n", model.size(), (long long)model_elems);
    std::printf("  %zu x MPI_Allreduce : %.4f s\n", model.size(), raw_step);
    std::printf("  mgs (fused, async)   : %.4f s  (ratio %.3f)\n", mgs_step, mgs_step / raw_step);
    std::printf("  mgs negotiation      : %.3f ms per step, %.1f cycles per step, %llu slow cycles\n",
                nego_per_step * 1e3, double(after.negotiation_cycles - before.negotiation_cycles) / steps,
                (unsigned long long)slow);
  }
  mgs_shutdown();
  MPI_Finalize();
  return 0;
}
