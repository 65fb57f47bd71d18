// The real merged-bucket gradient buffers in tests/data/gradients (a CNN on
// scikit-learn digits, gradient + top-k residual). They are heavy-tailed:
// the closed-form Gaussian and Laplace thresholds select 7-20x k at 0.1%, so
// these check that the correction, not the estimate, reaches the band.
#include <cstdio>

#include "test_util.h"

namespace mgs::compress::test {
namespace {
std::vector<float> load(const std::string& file) {
  const std::string path = std::string(MGS_TEST_DATA_DIR) + "/gradients/" + file;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  REQUIRE(f != nullptr);
  std::vector<float> x(548746);
  const size_t got = std::fread(x.data(), sizeof(float), x.size(), f);
  std::fclose(f);
  REQUIRE(got == x.size());
  return x;
}
}  // namespace

TEST_CASE("real gradient buffers: counts in band within a few passes", "[compress][real]") {
  const auto file =
      GENERATE(as<std::string>{}, "digits_cnn_step1.f32", "digits_cnn_step50.f32", "digits_cnn_step400.f32");
  const auto rho = GENERATE(0.01, 0.001);
  const auto x = load(file);
  for (const char* name : {"gaussiank", "ldte", "topk", "dgc"}) {
    CAPTURE(file, rho, name);
    SelectorOptions o;
    o.density = rho;
    Run run = runSelect(*makeSelector(name, o), x);
    REQUIRE(run.status.ok());
    checkInvariant(run);
    checkTopOrder(run);
    const size_t k = run.result.k;
    if (std::string(name) == "gaussiank" || std::string(name) == "ldte") {
      REQUIRE(run.result.count >= k);
      REQUIRE(run.result.count <= static_cast<size_t>(1.1 * k));
      REQUIRE(run.result.passes <= 5);
    } else if (std::string(name) == "topk") {
      REQUIRE(run.result.count == k);
    } else {
      REQUIRE(run.result.count <= k);
      REQUIRE(run.result.count >= static_cast<size_t>(0.8 * k));
    }
  }
}

}  // namespace mgs::compress::test
