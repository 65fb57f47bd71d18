// The exchanges' shared services (bucket_exchange.h) and their registry.
#include "core/bucket_exchange.h"

#include <algorithm>

namespace mgs {

// The registrations, one per exchange (each in its own file). The first
// entry of the plan's exchange whose claims() says yes takes the bucket: a
// device bucket before the host allgather.
bool deviceClaims(ExchangeContext& ctx, const BucketStart& b);
std::unique_ptr<BucketExchange> startDeviceExchange(ExchangeContext& ctx, BucketStart& b);
bool deviceAgreedClaims(ExchangeContext& ctx, const BucketStart& b);
std::unique_ptr<BucketExchange> startDeviceAgreedExchange(ExchangeContext& ctx, BucketStart& b);
std::unique_ptr<BucketExchange> startAllgatherExchange(ExchangeContext& ctx, BucketStart& b);
std::unique_ptr<BucketExchange> startAgreedExchange(ExchangeContext& ctx, BucketStart& b);
std::unique_ptr<BucketExchange> startHierarchicalExchange(ExchangeContext& ctx, BucketStart& b);
std::unique_ptr<BucketExchange> startDenseExchange(ExchangeContext& ctx, BucketStart& b);
bool deviceDenseClaims(ExchangeContext& ctx, const BucketStart& b);
bool deviceHierarchicalClaims(ExchangeContext& ctx, const BucketStart& b);
std::unique_ptr<BucketExchange> startDeviceHierarchicalExchange(ExchangeContext& ctx, BucketStart& b);
std::unique_ptr<BucketExchange> startDeviceDenseExchange(ExchangeContext& ctx, BucketStart& b);

const std::vector<ExchangeEntry>& exchangeRegistry() {
  static const std::vector<ExchangeEntry> entries = {
      {plan::Exchange::kAllgather, "device", &deviceClaims, &startDeviceExchange},
      {plan::Exchange::kAllgather, "allgather", nullptr, &startAllgatherExchange},
      {plan::Exchange::kAgreed, "agreed (device)", &deviceAgreedClaims, &startDeviceAgreedExchange},
      {plan::Exchange::kAgreed, "agreed", nullptr, &startAgreedExchange},
      {plan::Exchange::kHierarchical, "hierarchical (device)", &deviceHierarchicalClaims,
       &startDeviceHierarchicalExchange},
      {plan::Exchange::kHierarchical, "hierarchical", nullptr, &startHierarchicalExchange},
      {plan::Exchange::kDense, "dense (device)", &deviceDenseClaims, &startDeviceDenseExchange},
      {plan::Exchange::kDense, "dense", nullptr, &startDenseExchange},
  };
  return entries;
}

BucketPath ExchangeContext::pathOf(const std::vector<Request>& members, const LocalOutcome& out) {
  if (out.resident) return BucketPath::kResident;
  for (const auto& m : members)
    if (m.sig.on_cuda) return BucketPath::kStaged;
  return BucketPath::kHost;
}

void ExchangeContext::runLocal(const LocalJob& job, Clock::time_point t0, LocalOutcome* out) {
  const std::vector<Request>& members = *job.members;
  local->run(job, out);
  if (timeline) {
    const std::string path_arg = std::string("{\"path\":\"") + bucketPathName(pathOf(members, *out)) + "\"}";
    for (auto& m : members) timeline->span(m.name, "FUSE", t0, out->fuse_end, path_arg);
    if (out->selected)
      for (auto& m : members)
        timeline->span(m.name, "SELECT", out->select_begin, out->select_end,
                       "{\"count\":" + std::to_string(out->reported) + ",\"k\":" + std::to_string(out->k) + "}");
  }
  if (out->selected)
    online.selected(static_cast<int64_t>(job.n),
                    std::chrono::duration<double>(out->select_end - out->select_begin).count());
}

std::vector<float> ExchangeContext::takeVals(size_t n) {
  std::vector<float> v;
  if (!vals_pool_.empty()) {
    v = std::move(vals_pool_.back());
    vals_pool_.pop_back();
  }
  v.resize(n);
  return v;
}

Status ExchangeContext::startNames(const uint64_t* code, std::vector<uint64_t>* codes,
                                   std::unique_ptr<PendingCollective>* op) {
  codes->resize(static_cast<size_t>(comm.size()));
  Communicator& c = names_comm ? *names_comm : comm;
  return c.startAllgather(code, sizeof *code, codes->data(), op);
}

std::string ExchangeContext::failedRanks(const uint64_t* codes, size_t cap, const std::vector<Request>& members,
                                         bool* other_error) const {
  std::string failed;
  for (int i = 0; i < comm.size(); ++i) {
    const block::Header h = block::decodeHeader(codes[i], cap, members.size());
    if (h.kind == block::Header::kCount) continue;
    const bool numeric = h.bad_member >= 0 && h.cause == block::StagingCause::kNone;
    *other_error |= !numeric;
    std::string what;
    if (numeric)
      what = ": non-finite gradient in tensor '" + members[h.bad_member].name + "'";
    else if (h.bad_member >= 0)  // a staging code: the tensor and the cause, on every rank
      what = ": tensor '" + members[h.bad_member].name + "': " + block::stagingCauseText(h.cause);
    else
      what = ": local error (see that rank's log)";
    failed += std::string(failed.empty() ? "" : "; ") + "rank " + std::to_string(i) + what;
  }
  return failed;
}

Status ExchangeContext::failedVerdict(const std::string& what, const std::string& failed, bool other_error,
                                      const Status& local) {
  std::string msg = what + " failed: " + failed;
  if (!other_error) msg += " (MGS_NONFINITE=error: the step was not applied, residuals are unchanged)";
  if (!local.ok()) msg += "; on this rank: " + local.message();
  const Code code = !local.ok() ? local.code() : (other_error ? Code::kInternal : Code::kNumeric);
  return Status(code, msg);
}

bool PhaseOrder::free(const void* lane) const {
  return std::find(blocked_.begin(), blocked_.end(), lane) == blocked_.end();
}

void PhaseOrder::block(const void* lane) {
  if (free(lane)) blocked_.push_back(lane);
}

}  // namespace mgs
