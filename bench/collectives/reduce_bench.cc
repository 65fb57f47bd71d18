// The host-side reduction kernel the ring allreduce runs once per hop
// (src/comm/reduce.cc), per dtype, against the per-element formula it
// replaced for 16-bit floats (widen each value, add, round back: one scalar
// call per element). One process, no MPI: it measures the arithmetic only.
//   mgs_reduce_bench [--elements N] [--repeats R]
// Prints one JSON line per dtype and a table (median of R runs, ms and GB/s
// of input read).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include <CLI/CLI.hpp>

#include "comm/reduce.h"
#include "common/dtype.h"

namespace {
using Clock = std::chrono::steady_clock;

template <typename F>
double medianMs(int repeats, F&& f) {
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mgs host reduction kernel benchmark"};
  size_t n = size_t{1} << 24;
  int repeats = 7;
  app.add_option("--elements", n, "elements per buffer")->check(CLI::Range(size_t{1}, size_t{1} << 30));
  app.add_option("--repeats", repeats, "timed runs (median)")->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);

  std::printf("hardware half conversion: %s\n", mgs::halfConversionIsVectorised() ? "yes (F16C)" : "no");
  std::printf("%-10s %-22s %10s %10s\n", "dtype", "kernel", "ms", "GB/s");
  auto report = [&](const char* dtype, const char* kernel, double ms, size_t bytes) {
    const double gbs = 2.0 * static_cast<double>(bytes) / (ms * 1e6);  // two inputs read
    std::printf("%-10s %-22s %10.2f %10.2f\n", dtype, kernel, ms, gbs);
    std::fprintf(stderr, "{\"dtype\":\"%s\",\"kernel\":\"%s\",\"elements\":%zu,\"ms\":%.3f}\n", dtype, kernel, n, ms);
  };
  {
    std::vector<float> a(n, 1.0f), b(n, 0.5f);
    report("float32", "reduceInto", medianMs(repeats, [&] {
             (void)mgs::reduceInto(a.data(), b.data(), n, MGS_FLOAT32, mgs::CommOp::kSum);
           }),
           4 * n);
  }
  for (auto dt : {MGS_FLOAT16, MGS_BFLOAT16}) {
    const bool half = dt == MGS_FLOAT16;
    auto narrow = [&](float v) { return half ? mgs::floatToHalf(v) : mgs::floatToBfloat16(v); };
    auto wide = [&](uint16_t v) { return half ? mgs::halfToFloat(v) : mgs::bfloat16ToFloat(v); };
    std::vector<uint16_t> a(n), b(n);
    for (size_t i = 0; i < n; ++i) {
      a[i] = narrow(static_cast<float>(i % 1000) * 1e-3f);
      b[i] = narrow(static_cast<float>(i % 777) * 1e-3f);
    }
    const char* name = half ? "float16" : "bfloat16";
    report(name, "per-element (before)", medianMs(repeats, [&] {
             for (size_t i = 0; i < n; ++i) a[i] = narrow(wide(a[i]) + wide(b[i]));
           }),
           2 * n);
    report(name, "reduceInto", medianMs(repeats, [&] {
             (void)mgs::reduceInto(a.data(), b.data(), n, dt, mgs::CommOp::kSum);
           }),
           2 * n);
  }
  return 0;
}
