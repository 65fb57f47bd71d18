#include <catch2/catch.hpp>

#include <cctype>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/timeline.h"

using namespace mgs;

namespace {

// A strict little JSON validator: enough to prove the file parses.
struct Json {
  const std::string& s;
  size_t i = 0;
  void ws() {
    while (i < s.size() && isspace(static_cast<unsigned char>(s[i]))) ++i;
  }
  bool lit(const char* w) {
    size_t n = strlen(w);
    if (s.compare(i, n, w) != 0) return false;
    i += n;
    return true;
  }
  bool str() {
    if (s[i] != '"') return false;
    for (++i; i < s.size(); ++i) {
      if (s[i] == '\\') {
        ++i;
        continue;
      }
      if (static_cast<unsigned char>(s[i]) < 0x20) return false;
      if (s[i] == '"') {
        ++i;
        return true;
      }
    }
    return false;
  }
  bool num() {
    size_t st = i;
    while (i < s.size() && (isdigit(static_cast<unsigned char>(s[i])) || strchr("+-.eE", s[i]))) ++i;
    return i > st;
  }
  bool value() {
    ws();
    if (i >= s.size()) return false;
    bool ok;
    if (s[i] == '{')
      ok = seq('}', true);
    else if (s[i] == '[')
      ok = seq(']', false);
    else if (s[i] == '"')
      ok = str();
    else
      ok = lit("true") || lit("false") || lit("null") || num();
    ws();
    return ok;
  }
  bool seq(char close, bool object) {
    ++i;
    ws();
    if (s[i] == close) {
      ++i;
      return true;
    }
    while (true) {
      ws();
      if (object) {
        if (!str()) return false;
        ws();
        if (s[i++] != ':') return false;
      }
      if (!value()) return false;
      if (s[i] == ',') {
        ++i;
        continue;
      }
      if (s[i] == close) {
        ++i;
        return true;
      }
      return false;
    }
  }
  bool parse() { return value() && i == s.size(); }
};

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("timeline is valid Chrome-trace JSON, also before it is closed", "[timeline]") {
  const std::string path = "timeline_test.json";
  {
    std::unique_ptr<Timeline> tl;
    REQUIRE(Timeline::open(path, &tl).ok());
    const auto t0 = Clock::now();
    tl->span("layer1.weight", "NEGOTIATE", t0, t0 + std::chrono::microseconds(30));
    tl->span("we\"ird\nname", "ALLREDUCE", t0, t0 + std::chrono::microseconds(50), "{\"bytes\":4096}");
    tl->span("layer1.weight", "ALLREDUCE", t0, t0 + std::chrono::microseconds(70));
    tl->flush();
    // Training stopped here: the file is a JSON array missing only its "]".
    std::string partial = slurp(path);
    CHECK(Json{partial}.parse() == false);
    partial += "]";
    CHECK(Json{partial}.parse());
  }
  const std::string full = slurp(path);
  CHECK(Json{full}.parse());
  CHECK(full.find("\"thread_name\"") != std::string::npos);
  CHECK(full.find("\"ph\":\"X\"") != std::string::npos);
  CHECK(full.find("we\\\"ird\\nname") != std::string::npos);
  std::remove(path.c_str());
  std::unique_ptr<Timeline> bad;
  CHECK(Timeline::open("/nonexistent-dir/x.json", &bad).code() == Code::kConfig);
}
