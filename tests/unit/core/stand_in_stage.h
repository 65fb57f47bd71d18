// A stand-in for the CUDA local stage in CPU tests: it keeps the residuals it
// holds in a private ResidualStore (standing for device memory) and runs the
// host stage on them. Subclasses decide which buckets it takes (accepts, or
// device buckets through startBucket); what every stand-in shares is here:
// moving a residual in (adopt) and back out (evict), and the C ABI's reads and
// writes of the residuals it holds. No Catch assertions inside: some tests
// call it from rank threads.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/check.h"
#include "core/cpu_local_stage.h"
#include "core/routed_local_stage.h"

namespace mgs::test {

class StandInStage : public ResidentLocalStage {
 public:
  explicit StandInStage(const LocalStageOptions& shared) : shared_(shared) {
    LocalStageOptions o = shared;
    o.residuals = &mine_;
    inner_ = std::make_unique<CpuLocalStage>(o);
  }
  bool fail_evict = false;  // evicting fails (a device-to-host copy that fails)

  Status extract(LocalSlab& s, const uint32_t* idx, size_t count, float* vals) override {
    return inner_->extract(s, idx, count, vals);
  }
  void settle(const std::vector<Request>& members, std::unique_ptr<LocalSlab> s, bool commit) override {
    inner_->settle(members, std::move(s), commit);
  }
  void zeroResidual(const std::vector<Request>& members) override { inner_->zeroResidual(members); }
  Status readSlab(const LocalSlab& s, float* dst) override { return inner_->readSlab(s, dst); }
  Status evict(const std::vector<Request>& members) override {
    std::vector<std::string> names;
    for (const auto& m : members) names.push_back(m.name);
    return evictNames(names);
  }
  Status evictAll() override {
    std::vector<std::string> names;
    for (const auto& kv : held_) names.push_back(kv.first);
    return evictNames(names);
  }
  bool acceptsScatter(const std::vector<Request>&) const override { return false; }
  Status scatterBlocks(const std::vector<Request>&, const char*, int, size_t, const std::vector<double>&) override {
    return Status(Code::kUnsupported, "stand-in: no scatter");
  }
  bool holds(const std::string& name, size_t* n) const override {
    auto it = held_.find(name);
    if (it == held_.end()) return false;
    *n = it->second;
    return true;
  }
  Status read(const std::string& name, float* dst, size_t n) const override { return mine_.copyOut(name, dst, n); }
  Status write(const std::string& name, const float* src, size_t n) override { return mine_.copyIn(name, src, n); }
  void drop(const std::string& name) override { held_.erase(name); }

 protected:
  // Takes the members' residuals it does not hold yet out of the shared
  // store (under its lock): a residual moves with its bucket.
  Status adopt(const std::vector<Request>& members) {
    auto lk = shared_.residuals->lock();
    for (const auto& m : members) {
      if (held_.count(m.name)) continue;
      std::vector<float> v(m.input.numel());
      shared_.residuals->takeLocked(m.name, v.data(), v.size());
      MGS_RETURN_IF_ERROR(mine_.copyIn(m.name, v.data(), v.size()));
      held_[m.name] = v.size();
    }
    return Status::OK();
  }
  Status evictNames(const std::vector<std::string>& names) {
    auto lk = shared_.residuals->lock();
    for (const auto& name : names) {
      auto it = held_.find(name);
      if (it == held_.end()) continue;
      if (fail_evict) return Status(Code::kCuda, "stand-in: copy failed");
      std::vector<float> v(it->second);
      mine_.read(name, v.data(), v.size());
      shared_.residuals->putLocked(name, v.data(), v.size());
      held_.erase(it);
    }
    return Status::OK();
  }

  LocalStageOptions shared_;
  ResidualStore mine_;  // "device memory"
  std::unique_ptr<CpuLocalStage> inner_;
  std::map<std::string, size_t> held_;
};

}  // namespace mgs::test
