#include "core/calibration.h"

#include <algorithm>
#include <cstring>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/check.h"
#include "common/logging.h"

namespace mgs {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Median of `reps` timed calls after one warm-up.
template <typename F>
Status timeCall(int reps, double* out, F&& fn) {
  MGS_RETURN_IF_ERROR(fn());
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    MGS_RETURN_IF_ERROR(fn());
    t.push_back(seconds(t0));
  }
  std::sort(t.begin(), t.end());
  *out = t[t.size() / 2];
  return Status::OK();
}

Status measure(Communicator& comm, const compress::Selector& selector, plan::CostModel* out) {
  const int P = comm.size();
  const std::vector<size_t> ar_bytes = {4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20};
  const std::vector<size_t> ag_bytes = {4 << 10, 64 << 10, 1 << 20, 8 << 20};  // per rank
  const std::vector<size_t> sel_n = {1 << 16, 1 << 20, 1 << 22};
  std::vector<double> t;  // all timings, max-reduced in one call below
  std::vector<float> buf(ar_bytes.back() / 4, 0.0f);
  for (size_t b : ar_bytes) {
    double s;
    MGS_RETURN_IF_ERROR(timeCall(3, &s, [&] { return comm.allreduce(buf.data(), b / 4, MGS_FLOAT32, CommOp::kSum); }));
    t.push_back(s);
  }
  std::vector<char> gathered(ag_bytes.back() * P);
  for (size_t b : ag_bytes) {
    double s;
    MGS_RETURN_IF_ERROR(timeCall(3, &s, [&] { return comm.allgather(buf.data(), b, gathered.data()); }));
    t.push_back(s);
  }
  {
    std::vector<float> x(sel_n.back()), res(sel_n.back(), 0.0f);
    uint32_t seed = 12345;
    for (auto& v : x) {  // Laplace-like synthetic gradient
      seed = seed * 1664525u + 1013904223u;
      const double u = (seed >> 8) * (1.0 / 16777216.0) - 0.5;
      v = static_cast<float>((u < 0 ? 1 : -1) * std::log(1 - 2 * std::fabs(u) + 1e-12) * 1e-3);
    }
    // What the pipeline does locally per bucket: add the gradient into the
    // residual, select in place, zero the output.
    std::vector<float> vals(selector.maxCount(sel_n.back())), outbuf(sel_n.back());
    std::vector<uint32_t> idx(vals.size());
    std::vector<char> ws(selector.workspaceBytes(sel_n.back()));
    for (size_t n : sel_n) {
      compress::SelectArgs a;
      a.x = nullptr;  // in place: res holds gradient + residual
      a.residual = res.data();
      a.n = n;
      a.outValues = vals.data();
      a.outIndices = idx.data();
      a.workspace = ws.data();
      a.workspaceBytes = ws.size();
      a.name = "calibration";
      double s;
      compress::SelectResult r;
      MGS_RETURN_IF_ERROR(timeCall(3, &s, [&] {
        addIntoFloat(x.data(), MGS_FLOAT32, n, 1.0, false, res.data());
        Status st = selector.select(a, &r);
        std::fill(outbuf.begin(), outbuf.begin() + n, 0.0f);
        return st;
      }));
      t.push_back(s);
    }
  }
  MGS_RETURN_IF_ERROR(comm.allreduce(t.data(), t.size(), MGS_FLOAT64, CommOp::kMax));

  std::vector<plan::Sample> ar, ag, sel;
  size_t i = 0;
  for (size_t b : ar_bytes) ar.emplace_back(double(b), t[i++]);
  for (size_t b : ag_bytes) ag.emplace_back(double(b) * P, t[i++]);  // the model takes total bytes
  for (size_t n : sel_n) sel.emplace_back(double(n), t[i++]);
  // Piecewise-linear through the measured points, not one least-squares line:
  // a line fitted over 4 KiB..64 MiB is dominated by the large sizes and gets
  // the per-call startup (what decides small buckets) wrong.
  MGS_RETURN_IF_ERROR(plan::CommModel::table(ar, &out->allreduce));
  MGS_RETURN_IF_ERROR(plan::CommModel::table(ag, &out->allgather));
  // Every CPU selector (exact top-k included) is a constant number of passes: linear.
  MGS_RETURN_IF_ERROR(plan::SparsifyModel::fit(plan::SparsifyModel::Kind::kLinear, sel, &out->sparsify));
  return Status::OK();
}

double field(const std::string& json, const std::string& object, const std::string& key, bool* ok) {
  const auto o = json.find("\"" + object + "\"");
  const auto k = o == std::string::npos ? o : json.find("\"" + key + "\"", o);
  if (k == std::string::npos) {
    *ok = false;
    return 0;
  }
  const auto colon = json.find(':', k);
  char* end = nullptr;
  const double v = std::strtod(json.c_str() + colon + 1, &end);
  if (end == json.c_str() + colon + 1) *ok = false;
  return v;
}

}  // namespace

namespace {

// A CommModel as the points that reproduce it through CommModel::table: the
// start of every segment, plus one more point on the last segment.
std::string pointsJson(const plan::CommModel& c) {
  std::vector<plan::Sample> pts;
  for (const auto& seg : c.segments()) pts.emplace_back(seg.from_bytes, c.seconds(std::max(seg.from_bytes, 1.0)));
  const double last = c.segments().empty() ? 1.0 : std::max(2 * c.segments().back().from_bytes, 1024.0);
  pts.emplace_back(last, c.seconds(last));
  pts.front().first = std::max(pts.front().first, 1.0);
  std::string out = "{\"points\": [";
  for (size_t i = 0; i < pts.size(); ++i) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%s[%.9g, %.9g]", i ? ", " : "", pts[i].first, pts[i].second);
    out += buf;
  }
  return out + "]}";
}

// Parses the "points" array of `object`, or its alpha_s/beta_s_per_byte.
Status parseComm(const std::string& json, const std::string& object, plan::CommModel* out) {
  const auto o = json.find("\"" + object + "\"");
  MGS_ENSURE(o != std::string::npos, kConfig, "no \"" << object << "\" entry");
  const auto close = json.find('}', o);
  const auto p = json.find("\"points\"", o);
  if (p != std::string::npos && p < close) {
    std::vector<plan::Sample> pts;
    const char* c = json.c_str() + json.find('[', p) + 1;
    while (*c) {
      while (*c == ' ' || *c == ',' || *c == '\n') ++c;
      if (*c != '[') break;
      char* end;
      const double b = std::strtod(c + 1, &end);
      while (*end == ' ' || *end == ',') ++end;
      const double t = std::strtod(end, &end);
      pts.emplace_back(b, t);
      c = std::strchr(end, ']');
      MGS_ENSURE(c != nullptr, kConfig, "unterminated point in \"" << object << "\"");
      ++c;
    }
    return plan::CommModel::table(pts, out);
  }
  bool ok = true;
  const double a = field(json, object, "alpha_s", &ok), b = field(json, object, "beta_s_per_byte", &ok);
  MGS_ENSURE(ok, kConfig, "\"" << object << "\" needs \"points\" or alpha_s and beta_s_per_byte");
  *out = plan::CommModel::linear(a, b);
  return Status::OK();
}

}  // namespace

std::string costModelToJson(const plan::CostModel& m) {
  char sp[128];
  std::snprintf(sp, sizeof sp, "{\"kind\": \"%s\", \"c_s\": %.9g}",
                m.sparsify.kind == plan::SparsifyModel::Kind::kLinear ? "linear" : "nlogn", m.sparsify.c_s);
  return "{\n  \"workers\": " + std::to_string(m.workers) + ",\n  \"allreduce\": " + pointsJson(m.allreduce) +
         ",\n  \"allgather\": " + pointsJson(m.allgather) + ",\n  \"sparsify\": " + sp + "\n}\n";
}

Status costModelFromJson(const std::string& json, plan::CostModel* m) {
  MGS_RETURN_IF_ERROR(parseComm(json, "allreduce", &m->allreduce));
  MGS_RETURN_IF_ERROR(parseComm(json, "allgather", &m->allgather));
  bool ok = true;
  const double c = field(json, "sparsify", "c_s", &ok);
  MGS_ENSURE(ok, kConfig, "calibration file needs \"sparsify\": {\"kind\", \"c_s\"}");
  m->sparsify.kind = json.find("\"nlogn\"") != std::string::npos ? plan::SparsifyModel::Kind::kNLogN
                                                                   : plan::SparsifyModel::Kind::kLinear;
  m->sparsify.c_s = c;
  return Status::OK();
}

Status resolveCostModel(Communicator& comm, const Config& config, const compress::Selector& selector,
                        plan::CostModel* out) {
  plan::CostModel m;
  const int P = comm.size();
  if (config.calibration == "off") {
    int preset = 2;
    for (int p : {4, 8, 16})
      if (P >= p) preset = p;
    MGS_RETURN_IF_ERROR(plan::costModelPreset("10gbe-P" + std::to_string(preset), &m));
  } else if (config.calibration == "auto") {
    MGS_RETURN_IF_ERROR(measure(comm, selector, &m));
  } else {
    // A file: rank 0 reads it (if present) and every rank gets its text.
    std::string text;
    if (comm.rank() == 0) {
      std::ifstream f(config.calibration);
      if (f.good()) {
        std::stringstream ss;
        ss << f.rdbuf();
        text = ss.str();
        if (text.empty()) text = " ";
      }
    }
    MGS_RETURN_IF_ERROR(comm.broadcastString(&text, 0));
    if (!text.empty()) {
      Status st = costModelFromJson(text, &m);
      if (!st.ok()) return Status(st.code(), "MGS_CALIBRATION='" + config.calibration + "': " + st.message());
    } else {
      MGS_RETURN_IF_ERROR(measure(comm, selector, &m));
      m.workers = P;
      if (comm.rank() == 0) {
        std::ofstream f(config.calibration);
        f << costModelToJson(m);
        if (!f) MGS_LOG_WARN("could not save the calibration to {}", config.calibration);
      }
    }
  }
  m.workers = P;
  m.density = config.density;
  m.bytes_per_element = 4;
  *out = m;
  MGS_LOG_INFO("cost model ({}): {}", config.calibration, costModelToJson(m));
  return Status::OK();
}

}  // namespace mgs
