// A minimal stand-in for Catch2 v2, used ONLY by the GPU-only build
// (-DMGS_GPU_ONLY=ON) on a GPU machine without Catch2's development files
// (scripts/gpu_check.sh). It covers what tests/gpu uses: TEST_CASE, REQUIRE,
// REQUIRE_FALSE, CHECK, INFO, CAPTURE, WARN, Approx and Catch::Session; a
// failed REQUIRE ends its test case, the run exits 1 if anything failed.
// Argument: an optional substring of test names to run.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <sstream>
#include <string>
#include <vector>

namespace Catch {

struct TestCase {
  const char* name;
  void (*fn)();
};
inline std::vector<TestCase>& registry() {
  static std::vector<TestCase> r;
  return r;
}
struct Registrar {
  Registrar(const char* name, void (*fn)()) { registry().push_back({name, fn}); }
};
inline std::vector<std::string>& context() {
  static std::vector<std::string> c;
  return c;
}
struct ScopedInfo {
  explicit ScopedInfo(std::string s) { context().push_back(std::move(s)); }
  ~ScopedInfo() { context().pop_back(); }
};
struct Counts {
  long assertions = 0, failed = 0;
};
inline Counts& counts() {
  static Counts c;
  return c;
}
struct Failure {};
inline void fail(const char* expr, const char* file, int line, bool fatal) {
  ++counts().failed;
  std::printf("%s:%d: FAILED: %s\n", file, line, expr);
  for (const auto& c : context()) std::printf("  with: %s\n", c.c_str());
  if (fatal) throw Failure{};
}
inline void captureInto(std::ostringstream&) {}
template <typename T, typename... R>
void captureInto(std::ostringstream& o, const T& v, const R&... rest) {
  o << v << (sizeof...(rest) ? ", " : "");
  captureInto(o, rest...);
}
template <typename... T>
std::string capture(const char* names, const T&... v) {
  std::ostringstream o;
  o << names << " := ";
  captureInto(o, v...);
  return o.str();
}

template <typename F>
std::string streamed(F f) {
  std::ostringstream o;
  f(o);
  return o.str();
}

class Approx {
 public:
  explicit Approx(double v) : v_(v) {}
  Approx& epsilon(double e) {
    eps_ = e;
    return *this;
  }
  Approx& margin(double m) {
    margin_ = m;
    return *this;
  }
  friend bool operator==(double a, const Approx& b) {
    const double d = std::fabs(a - b.v_);
    return d <= b.margin_ || d <= b.eps_ * (std::fabs(b.v_) > std::fabs(a) ? std::fabs(b.v_) : std::fabs(a));
  }
  friend std::ostream& operator<<(std::ostream& o, const Approx& a) { return o << "Approx(" << a.v_ << ")"; }

 private:
  double v_, eps_ = 1.1920929e-5, margin_ = 0;
};

struct Session {
  int run(int argc, char** argv) {
    const std::string filter = argc > 1 ? argv[1] : "";
    int ran = 0, failedCases = 0;
    for (const auto& t : registry()) {
      if (!filter.empty() && std::string(t.name).find(filter) == std::string::npos) continue;
      ++ran;
      const long before = counts().failed;
      // One line per case before it runs, flushed, so a case that hangs or
      // crashes on the GPU machine is named in the log.
      std::printf("case: %s\n", t.name);
      std::fflush(stdout);
      const auto t0 = std::chrono::steady_clock::now();
      try {
        t.fn();
      } catch (const Failure&) {
      } catch (const std::exception& e) {
        ++counts().failed;
        std::printf("%s: unexpected exception: %s\n", t.name, e.what());
      }
      context().clear();
      std::printf("  %.1f ms\n", std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      if (counts().failed != before) {
        ++failedCases;
        std::printf("test case FAILED: %s\n", t.name);
      }
    }
    std::printf("%d test cases, %d failed; %ld assertions, %ld failed\n", ran, failedCases,
                counts().assertions, counts().failed);
    return failedCases ? 1 : 0;
  }
};

}  // namespace Catch

using Catch::Approx;  // Catch2 v2 puts Approx in the global namespace too

#define MGS_MC_CAT2(a, b) a##b
#define MGS_MC_CAT(a, b) MGS_MC_CAT2(a, b)
#define TEST_CASE(name, ...)                                                           \
  static void MGS_MC_CAT(mgs_mc_test_, __LINE__)();                                    \
  static ::Catch::Registrar MGS_MC_CAT(mgs_mc_reg_, __LINE__)(name, &MGS_MC_CAT(mgs_mc_test_, __LINE__)); \
  static void MGS_MC_CAT(mgs_mc_test_, __LINE__)()
#define MGS_MC_ASSERT(fatal, ...)                                                      \
  do {                                                                                 \
    ++::Catch::counts().assertions;                                                    \
    if (!(__VA_ARGS__)) ::Catch::fail(#__VA_ARGS__, __FILE__, __LINE__, fatal);        \
  } while (0)
#define REQUIRE(...) MGS_MC_ASSERT(true, __VA_ARGS__)
#define REQUIRE_FALSE(...) MGS_MC_ASSERT(true, !(__VA_ARGS__))
#define CHECK(...) MGS_MC_ASSERT(false, __VA_ARGS__)
#define INFO(msg)                                                                      \
  ::Catch::ScopedInfo MGS_MC_CAT(mgs_mc_info_, __LINE__)(                              \
      ::Catch::streamed([&](std::ostringstream& _mgs_mc_o) { _mgs_mc_o << msg; }))
#define CAPTURE(...) \
  ::Catch::ScopedInfo MGS_MC_CAT(mgs_mc_cap_, __LINE__)(::Catch::capture(#__VA_ARGS__, __VA_ARGS__))
#define WARN(msg)                                                                      \
  do {                                                                                 \
    std::ostringstream _mgs_mc_o;                                                      \
    _mgs_mc_o << msg;                                                                  \
    std::printf("warning: %s\n", _mgs_mc_o.str().c_str());                             \
  } while (0)

#ifdef CATCH_CONFIG_MAIN
int main(int argc, char** argv) { return Catch::Session().run(argc, argv); }
#endif
