#include "plan/cost_model.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"

namespace mgs::plan {

CommModel CommModel::linear(double alpha_s, double beta_s_per_byte) {
  CommModel m;
  m.segments_.push_back({0.0, alpha_s, beta_s_per_byte});
  return m;
}

CommModel CommModel::switched(double threshold_bytes, double small_alpha, double small_beta, double large_alpha,
                              double large_beta) {
  CommModel m;
  m.segments_.push_back({0.0, small_alpha, small_beta});
  m.segments_.push_back({threshold_bytes, large_alpha, large_beta});
  return m;
}

Status CommModel::table(std::vector<Sample> points, CommModel* out) {
  MGS_ENSURE(points.size() >= 2, kInvalidArgument, "a cost table needs at least 2 points, got " << points.size());
  std::sort(points.begin(), points.end());
  CommModel m;
  for (size_t i = 0; i + 1 < points.size(); ++i) {
    const auto& [x0, y0] = points[i];
    const auto& [x1, y1] = points[i + 1];
    MGS_ENSURE(std::isfinite(x0) && std::isfinite(x1) && x0 >= 0, kInvalidArgument,
               "cost table sizes must be finite and >= 0");
    MGS_ENSURE(x1 > x0, kInvalidArgument, "cost table has two points at " << x0 << " bytes");
    MGS_ENSURE(std::isfinite(y0) && std::isfinite(y1) && y0 >= 0 && y1 >= 0, kInvalidArgument,
               "cost table times must be finite and >= 0");
    const double slope = (y1 - y0) / (x1 - x0);
    // The first segment also covers sizes below the first point.
    m.segments_.push_back({i == 0 ? 0.0 : x0, y0 - slope * x0, slope});
  }
  *out = std::move(m);
  return Status::OK();
}

Status CommModel::fromSegments(std::vector<Segment> segments, CommModel* out) {
  MGS_ENSURE(!segments.empty(), kInvalidArgument, "a cost model needs at least one segment");
  MGS_ENSURE(segments[0].from_bytes == 0, kInvalidArgument,
             "the first segment must start at 0 bytes, not " << segments[0].from_bytes);
  for (size_t i = 0; i < segments.size(); ++i) {
    const Segment& s = segments[i];
    MGS_ENSURE(std::isfinite(s.from_bytes) && std::isfinite(s.alpha_s) && std::isfinite(s.beta_s_per_byte),
               kInvalidArgument, "segment " << i << " has a non-finite number");
    MGS_ENSURE(i == 0 || s.from_bytes > segments[i - 1].from_bytes, kInvalidArgument,
               "segment " << i << " starts at " << s.from_bytes << " bytes, not after the previous one");
  }
  out->segments_ = std::move(segments);
  return Status::OK();
}

Status CommModel::fit(const std::vector<Sample>& samples, CommModel* out) {
  MGS_ENSURE(samples.size() >= 2, kInvalidArgument, "a linear fit needs at least 2 samples, got " << samples.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : samples) {
    MGS_ENSURE(std::isfinite(x) && std::isfinite(y) && x >= 0 && y >= 0, kInvalidArgument,
               "fit sample (" << x << ", " << y << ") is not finite and >= 0");
    sx += x, sy += y, sxx += x * x, sxy += x * y;
  }
  const double n = static_cast<double>(samples.size());
  const double den = n * sxx - sx * sx;
  MGS_ENSURE(den > 0, kInvalidArgument, "a linear fit needs at least 2 distinct sizes");
  double beta = (n * sxy - sx * sy) / den;
  double alpha = (sy - beta * sx) / n;
  if (alpha < 0) {
    alpha = 0;
    beta = sxy / sxx;
  }
  *out = linear(alpha, std::max(beta, 0.0));
  return Status::OK();
}

double CommModel::seconds(double bytes) const {
  if (bytes <= 0 || segments_.empty()) return 0.0;
  // Few segments (tables are tens of points): a linear scan from the back.
  size_t i = segments_.size() - 1;
  while (i > 0 && segments_[i].from_bytes > bytes) --i;
  // A table's first segment extrapolated below its first point can dip
  // under zero; a call never takes negative time.
  return std::max(0.0, segments_[i].alpha_s + segments_[i].beta_s_per_byte * bytes);
}

double SparsifyModel::seconds(int64_t elements) const {
  if (elements <= 1) return kind == Kind::kLinear && elements == 1 ? c_s : 0.0;
  const double n = static_cast<double>(elements);
  return kind == Kind::kLinear ? c_s * n : c_s * n * std::log2(n);
}

Status SparsifyModel::fit(Kind kind, const std::vector<Sample>& samples, SparsifyModel* out) {
  // One-parameter least squares through the origin: c = sum(f*y) / sum(f*f).
  double num = 0, den = 0;
  for (const auto& [n, y] : samples) {
    MGS_ENSURE(std::isfinite(n) && std::isfinite(y) && n >= 0 && y >= 0, kInvalidArgument,
               "fit sample (" << n << ", " << y << ") is not finite and >= 0");
    const double f = kind == Kind::kLinear ? n : (n > 1 ? n * std::log2(n) : 0.0);
    num += f * y, den += f * f;
  }
  MGS_ENSURE(den > 0, kInvalidArgument, "sparsify fit needs a sample with more than 1 element");
  out->kind = kind;
  out->c_s = num / den;
  return Status::OK();
}

int64_t CostModel::selected(int64_t elements) const {
  if (elements <= 0) return 0;
  const auto k = static_cast<int64_t>(std::floor(static_cast<double>(elements) * density));
  return std::clamp<int64_t>(k, 1, elements);
}

double CostModel::allreduceSeconds(int64_t elements) const {
  if (elements <= 0) return 0.0;
  return negotiation_s + allreduce.seconds(static_cast<double>(elements) * bytes_per_element);
}

double CostModel::allgatherSeconds(int64_t elements) const {
  // Every rank contributes k values and k int32 indices (two collectives in
  // the authors' code; the model's alpha covers both startups).
  if (elements <= 0) return 0.0;
  const double bytes = static_cast<double>(workers) * static_cast<double>(selected(elements)) * (bytes_per_element + 4);
  return negotiation_s + allgather.seconds(bytes);
}

const char* exchangeName(Exchange e) {
  switch (e) {
    case Exchange::kAgreed:
      return "agreed";
    case Exchange::kDense:
      return "dense";
    case Exchange::kHierarchical:
      return "hierarchical";
    default:
      return "allgather";
  }
}

bool parseExchanges(const std::string& names, unsigned* out) {
  unsigned set = 0;
  size_t at = 0;
  while (at <= names.size()) {
    const size_t end = std::min(names.find(',', at), names.size());
    const std::string name = names.substr(at, end - at);
    bool known = false;
    for (Exchange e : {Exchange::kAllgather, Exchange::kAgreed, Exchange::kDense, Exchange::kHierarchical})
      if (name == exchangeName(e)) set |= exchangeBit(e), known = true;
    if (!known) return false;
    at = end + 1;
  }
  if (set == 0) return false;
  *out = set;
  return true;
}

double CostModel::broadcastSeconds(double bytes) const {
  return broadcastModel().seconds(bytes);
}

double CostModel::agreedSeconds(int64_t elements) const {
  const double k = static_cast<double>(selected(elements));
  // The runtime's index block also carries a count and a seal (16 bytes),
  // and the value allreduce one flag slot: noise next to k, left out.
  if (elements <= 0) return 0.0;
  return negotiation_s + broadcastSeconds(4.0 * k) + allreduce.seconds(k * bytes_per_element);
}

double CostModel::nodeSeconds(double bytes) const {
  return nodeModel().seconds(bytes);
}

double CostModel::hierarchicalSeconds(int64_t elements) const {
  if (elements <= 0) return 0.0;
  // Each leader's block: k values and k int32 indices (the allgather's
  // block); the node's broadcast carries every leader's block.
  const double blocks =
      static_cast<double>(nodes()) * static_cast<double>(selected(elements)) * (bytes_per_element + 4);
  return negotiation_s + nodeSeconds(static_cast<double>(elements) * bytes_per_element) + leaderModel().seconds(blocks) +
         nodeSeconds(blocks);
}

double CostModel::exchangeSeconds(Exchange e, int64_t elements) const {
  switch (e) {
    case Exchange::kHierarchical:
      return hierarchicalSeconds(elements);
    case Exchange::kAgreed:
      return agreedSeconds(elements);
    case Exchange::kDense:
      return allreduceSeconds(elements);
    default:
      return allgatherSeconds(elements);
  }
}

double CostModel::wireSeconds(Exchange e, int64_t elements) const {
  // Subtracting 0 is exact: without negotiation the papers' numbers stay
  // bit for bit.
  return elements <= 0 ? 0.0 : exchangeSeconds(e, elements) - negotiation_s;
}

double CostModel::overlapStartupSeconds(Exchange e) const {
  switch (e) {
    case Exchange::kDense:
      return dense_overlap * allreduce.startup();
    case Exchange::kAgreed:
      return inflight_overlap * (broadcastModel().startup() + allreduce.startup());
    case Exchange::kHierarchical:
      return inflight_overlap * (2 * nodeModel().startup() + leaderModel().startup());
    default:
      return inflight_overlap * allgather.startup();
  }
}

double CostModel::overlapSeconds(Exchange e, int64_t elements) const {
  if (elements <= 0) return 0.0;
  const double ov = overlapStartupSeconds(e);
  return ov > 0 ? std::min(ov, wireSeconds(e, elements)) : 0.0;
}

double CostModel::selectionSeconds(Exchange e, int64_t elements) const {
  return e == Exchange::kDense ? 0.0 : sparsifySeconds(elements);
}

double CostModel::firstStageSeconds(Exchange e, int64_t elements) const {
  if (host_steal > 0) return host_steal * group_host_s;
  return selectionSeconds(e, elements) + group_host_s * host_dilation;
}

double CostModel::queuedStageSeconds(Exchange e, int64_t elements) const {
  if (!starvedCoordinator()) return firstStageSeconds(e, elements);
  return selectionSeconds(e, elements) + group_host_s;
}

Exchange CostModel::chooseExchange(int64_t elements) const {
  Exchange best = Exchange::kAllgather;
  double best_s = 0;
  bool any = false;
  const bool hierarchy = ranks_per_node > 1 && nodes() >= 2;
  for (Exchange e : {Exchange::kAllgather, Exchange::kAgreed, Exchange::kDense, Exchange::kHierarchical}) {
    if (!(exchanges & exchangeBit(e))) continue;
    if (e == Exchange::kHierarchical && !hierarchy) continue;
    const double s = selectionSeconds(e, elements) + exchangeSeconds(e, elements);
    if (!any || s < best_s) best = e, best_s = s, any = true;
  }
  return best;
}

}  // namespace mgs::plan
