// Device buckets (core/routed_local_stage.h, core/sparse_device.cc) on the
// CPU: P ranks as threads, each with its own SparsePipeline, residual store
// and a stand-in resident stage that runs the whole bucket "on the device"
// (its residuals in a private store standing for device memory; its
// exchange on a second ThreadCommunicator standing for NCCL; its first poll
// always "not done yet", so the pipeline must come back for it). What is
// tested is what the CUDA stage relies on and the pipeline decides:
//  - the pipeline never blocks on a device bucket in steady state (no
//    wait(): the CPU view of hostSyncs == 0), finishing it by polling;
//  - outputs and committed residuals bitwise equal to the host path's, and
//    sent + kept == gradient + old residual bit for bit (P = 1);
//  - a rank whose tensor is on the wrong device sends a staging code: every
//    rank fails the bucket with an error naming that rank, the tensor and
//    the cause, nothing is written, no residual moves, nobody hangs;
//  - a NaN on one rank: MGS_NONFINITE=propagate gives NaN outputs on every
//    rank, error fails every rank; no residual commits;
//  - one rank without a device stage: every rank takes the MPI path.
// The CUDA stage itself (src/device/cuda/cuda_local_stage.cc) ran on an H100 in
// tests/gpu/device_bucket_gpu_test.cc (2026-11-26).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "../compress/test_util.h"
#include "comm/fake/thread_communicator.h"
#include "common/check.h"
#include "core/cpu_local_stage.h"
#include "core/routed_local_stage.h"
#include "core/sparse_block.h"
#include "core/sparse_pipeline.h"
#include "stand_in_stage.h"

using namespace mgs;
using compress::test::bits;

namespace {

Request hostCopy(const Request& m) {
  Request h = m;
  h.input.device = MGS_DEVICE_CPU;
  h.output.device = MGS_DEVICE_CPU;
  return h;
}

// The outputs as the device writes them from P sealed count blocks: the sum
// in rank order from +0, each touched entry times float(factor).
void sumBlocks(const std::vector<Request>& members, const char* recv, int P, size_t cap, size_t n,
               const std::vector<double>& factors) {
  const size_t bb = block::allgatherBytes(cap);
  std::vector<float> sum(n, 0.0f);
  std::vector<char> touched(n, 0);
  for (int r = 0; r < P; ++r) {
    const block::ConstAllgatherBlock b(recv + r * bb, cap);
    for (size_t j = 0; j < b.header(); ++j) {
      sum[b.indices()[j]] += b.values()[j];
      touched[b.indices()[j]] = 1;
    }
  }
  size_t off = 0;
  for (size_t m = 0; m < members.size(); ++m) {
    float* o = static_cast<float*>(members[m].output.data);
    const float f = static_cast<float>(factors[m]);
    for (size_t i = 0; i < members[m].output.numel(); ++i, ++off)
      o[i] = touched[off] && f != 1.0f ? sum[off] * f : sum[off];
  }
}

// What both stand-in device buckets share: the first poll is always "the
// device is still working"; then done once the collective still in flight
// (op; none: every collective ran at start) has completed, when finish()
// decides the verdict and writes the outputs as the device does.
class StandInPendingBase : public PendingDeviceBucket {
 public:
  int* waits = nullptr;
  int polls = 0;
  std::unique_ptr<PendingCollective> op;
  size_t cap = 0;
  int P = 1;
  std::vector<Request> members;  // host views
  std::vector<double> factors;
  bool propagate = false;
  DeviceBucketResult res;  // local part filled at start
  std::unique_ptr<LocalSlab> slab;
  bool finished = false;

  Status test(bool* done) override {
    *done = false;
    if (polls++ == 0) return Status::OK();
    bool d = true;
    if (op) MGS_RETURN_IF_ERROR(op->test(&d));
    if (!d) return Status::OK();
    once();
    *done = true;
    return Status::OK();
  }
  Status wait() override {
    ++*waits;
    if (op) MGS_RETURN_IF_ERROR(op->wait());
    once();
    return Status::OK();
  }
  Status result(DeviceBucketResult* out) override {
    // (No Catch assertion here: rank threads; Catch is not thread-safe.)
    if (!finished) return Status(Code::kInternal, "stand-in: result() before done");
    *out = res;
    return Status::OK();
  }
  std::unique_ptr<LocalSlab> takeSlab() override { return std::move(slab); }

 protected:
  virtual void finish() = 0;

 private:
  void once() {
    if (finished) return;
    finished = true;
    finish();
  }
};

// A device bucket run on the host: the local part at start, the exchange
// started on the "device communicator", the verdict and the scatter once the
// exchange is done (as the device does: any failure code, no output written;
// only non-finite codes under propagate, NaN everywhere; else the sum in rank
// order from +0, each touched entry times float(factor)).
class StandInPending final : public StandInPendingBase {
 public:
  std::vector<char> send, recv;
  size_t n = 0;

 private:
  void finish() override {
    const size_t bb = block::allgatherBytes(cap);
    bool failed = false, other = false;
    for (int r = 0; r < P; ++r) {
      const block::ConstAllgatherBlock b(recv.data() + r * bb, cap);
      res.headers.push_back(b.header());
      const block::Header h = block::decodeHeader(b.header(), cap, members.size());
      if ((!b.sealed() || h.kind == block::Header::kInvalid) && res.malformed_rank < 0) res.malformed_rank = r;
      if (h.kind != block::Header::kFailure) continue;
      failed = true;
      other |= !(h.bad_member >= 0 && h.cause == block::StagingCause::kNone);
    }
    if (res.malformed_rank >= 0) return;
    if (failed) {
      if (other || !propagate) return;
      for (auto& m : members) {
        float* o = static_cast<float*>(m.output.data);
        for (size_t i = 0; i < m.output.numel(); ++i) o[i] = std::nanf("");
      }
      res.nan_written = true;
      return;
    }
    sumBlocks(members, recv.data(), P, cap, n, factors);
    res.written = true;
  }
};

// The agreed exchange's device bucket run on the host: the broadcast of the
// leader's block and the values' allreduce (with one verdict slot per rank)
// run at start on the "device communicator", in the order the device
// enqueues them; the verdict and the scatter once the pipeline polls (as
// the device decides them: a malformed leader block or any failed slot, no
// output written; only non-finite slots under propagate, NaN everywhere;
// else +0 everywhere but the sums at the leader's indices, each times
// float(factor) unless 1).
class StandInAgreedPending final : public StandInPendingBase {
 public:
  std::vector<char> block;  // the leader's, as broadcast (allgather layout)
  std::vector<float> vals;  // [cap sums | P slots]

 private:
  void finish() override {
    if (res.malformed_rank >= 0) return;
    const size_t M = members.size();
    bool failed = false, other = false;
    for (int r = 0; r < P; ++r) {
      const uint32_t slot = static_cast<uint32_t>(vals[cap + r]);
      if (slot == 0) {
        res.headers.push_back(res.count);
        continue;
      }
      const uint64_t code = block::agreedSlotCode(slot, M);
      res.headers.push_back(code);
      const block::Header h = block::decodeHeader(code, cap, M);
      failed = true;
      other |= !(h.bad_member >= 0 && h.cause == block::StagingCause::kNone);
    }
    if (failed) {
      if (other || !propagate) return;
      for (auto& m : members) std::fill_n(static_cast<float*>(m.output.data), m.output.numel(), std::nanf(""));
      res.nan_written = true;
      return;
    }
    const block::ConstAllgatherBlock b(block.data(), cap);
    std::vector<size_t> offsets{0};
    for (const auto& m : members) {
      std::fill_n(static_cast<float*>(m.output.data), m.output.numel(), 0.0f);
      offsets.push_back(offsets.back() + m.output.numel());
    }
    for (size_t j = 0; j < res.count; ++j) {
      const uint32_t i = b.indices()[j];
      size_t m = 0;
      while (i >= offsets[m + 1]) ++m;
      const float f = static_cast<float>(factors[m]);
      static_cast<float*>(members[m].output.data)[i - offsets[m]] = f != 1.0f ? vals[j] * f : vals[j];
    }
    res.written = true;
  }
};

// The dense fallback's device bucket run on the host: the allreduce of
// [acc | P slots] at start on the "device communicator"; the verdict and
// the outputs once the pipeline polls (any failed slot: no output written;
// only non-finite slots under propagate, NaN everywhere; else every entry
// the sum, times float(factor) unless 1). The slab is +0: all was sent.
class StandInDensePending final : public StandInPendingBase {
 public:
  std::vector<float> vals;  // [n sums | P slots]
  size_t n = 0;

 private:
  void finish() override {
    const size_t M = members.size();
    bool failed = false, other = false;
    for (int r = 0; r < P; ++r) {
      const uint32_t slot = static_cast<uint32_t>(vals[n + r]);
      const uint64_t code = slot == 0 ? 0 : block::agreedSlotCode(slot, M);
      res.headers.push_back(code);
      if (slot == 0) continue;
      const block::Header h = block::decodeHeader(code, cap, M);
      failed = true;
      other |= !(h.bad_member >= 0 && h.cause == block::StagingCause::kNone);
    }
    if (failed) {
      if (other || !propagate) return;
      for (auto& m : members) std::fill_n(static_cast<float*>(m.output.data), m.output.numel(), std::nanf(""));
      res.nan_written = true;
      return;
    }
    size_t off = 0;
    for (size_t m = 0; m < M; ++m) {
      const float f = static_cast<float>(factors[m]);
      float* o = static_cast<float*>(members[m].output.data);
      for (size_t i = 0; i < members[m].output.numel(); ++i, ++off) o[i] = f != 1.0f ? vals[off] * f : vals[off];
    }
    res.written = true;
  }
};

// The hierarchical exchange's device bucket run on the host (every
// collective at start, in the order routed_local_stage.h gives): the
// verdict over the P slots and the node blocks once the pipeline polls
// (a malformed block: nothing; any failed slot or node block: no output,
// NaN everywhere where every failure is non-finite under propagate; else
// the node blocks summed in node order from +0, touched entries times
// float(factor)).
class StandInHierPending final : public StandInPendingBase {
 public:
  std::vector<float> slots;  // P, summed over every rank
  std::vector<char> recv;    // the nodes' blocks
  int nodes = 0;
  size_t n = 0;

 private:
  void finish() override {
    const size_t M = members.size(), bb = block::allgatherBytes(cap);
    bool failed = false, other = false;
    auto note = [&](uint64_t code) {
      const block::Header h = block::decodeHeader(code, cap, M);
      if (h.kind == block::Header::kCount) return;
      failed = true;
      other |= !(h.bad_member >= 0 && h.cause == block::StagingCause::kNone);
    };
    for (int r = 0; r < P; ++r) {
      const uint32_t slot = static_cast<uint32_t>(slots[r]);
      res.headers.push_back(slot == 0 ? 0 : block::agreedSlotCode(slot, M));
      note(res.headers.back());
    }
    for (int r = 0; r < nodes; ++r) {
      const block::ConstAllgatherBlock b(recv.data() + r * bb, cap);
      res.node_headers.push_back(b.header());
      const block::Header h = block::decodeHeader(b.header(), cap, M);
      bool malformed = !b.sealed() || h.kind == block::Header::kInvalid;
      for (size_t j = 0; h.kind == block::Header::kCount && j < h.count && !malformed; ++j)
        malformed = b.indices()[j] >= n;
      if (malformed && res.malformed_rank < 0) res.malformed_rank = r;
      note(b.header());
    }
    if (res.malformed_rank >= 0) return;
    if (failed) {
      if (other || !propagate) return;
      for (auto& m : members) std::fill_n(static_cast<float*>(m.output.data), m.output.numel(), std::nanf(""));
      res.nan_written = true;
      return;
    }
    sumBlocks(members, recv.data(), nodes, cap, n, factors);
    res.written = true;
  }
};

class DeviceStandIn final : public test::StandInStage {
 public:
  explicit DeviceStandIn(const LocalStageOptions& shared) : StandInStage(shared), rank_(shared.rank) {}
  int starts = 0, waits = 0;

  // "The device" selects n elements in (rank + 1) picoseconds each: the
  // slowest rank's figure is the one every rank must end with.
  Status timeSelection(const compress::Selector&, const std::vector<size_t>& sizes,
                       std::vector<double>* seconds) override {
    seconds->clear();
    for (size_t n : sizes) seconds->push_back((rank_ + 1) * 1e-12 * static_cast<double>(n));
    return Status::OK();
  }

  // "The device communicator" takes (rank + 1) x (5 us + bytes x c) per
  // call, c = 1 ns per byte, the allgather's allgather_ns (per byte of this
  // rank's block): the slowest rank's figures are what every rank must price.
  // cannot_time: this rank cannot time them.
  double allgather_ns = 1.0;
  bool cannot_time = false;
  int collective_timings = 0;
  Status timeCollectives(Communicator& comm, const CollectiveSizes& sizes, std::vector<double>* seconds) override {
    ++collective_timings;
    if (comm.size() < 1) return Status(Code::kInternal, "stand-in: no device communicator");
    if (cannot_time) return Status(Code::kCuda, "stand-in: cannot time the device communicator");
    seconds->clear();
    auto call = [&](size_t b, double ns) { seconds->push_back((rank_ + 1) * (5e-6 + 1e-9 * ns * double(b))); };
    for (size_t b : sizes.allreduce) call(b, 1.0);
    for (size_t b : sizes.allgather) call(b, allgather_ns);
    for (size_t b : sizes.broadcast) call(b, 1.0);
    return Status::OK();
  }

  // Device buckets only; or (resident_only: a GPU without NCCL) the local
  // stage of the allgather and the agreed exchange, only compact data going
  // to MPI (the hierarchical exchange's and dense buckets stay on the host).
  bool resident_only = false;
  bool accepts(const LocalJob& job) const override {
    return resident_only && job.dense_acc == nullptr && job.acc_in == nullptr;
  }
  void run(const LocalJob& job, LocalOutcome* out) override {
    ++runs;
    // "On the device": the host stage on host views of the CUDA tensors.
    std::vector<Request> views;
    for (const auto& m : *job.members) views.push_back(hostCopy(m));
    LocalJob j = job;
    j.members = &views;
    const Status st = adopt(*job.members);  // the residuals move "to the device" with the bucket
    if (!st.ok()) {
      *out = LocalOutcome();
      out->status = st;
      return;
    }
    inner_->run(j, out);
  }
  int runs = 0;
  bool runsDeviceBuckets() const override { return !resident_only; }
  // resident_only: the received blocks' scatter into the "CUDA" outputs.
  bool acceptsScatter(const std::vector<Request>&) const override { return resident_only; }
  Status scatterBlocks(const std::vector<Request>& members, const char* recv, int P, size_t cap,
                       const std::vector<double>& factors) override {
    size_t n = 0;
    for (const auto& m : members) n += m.output.numel();
    sumBlocks(members, recv, P, cap, n, factors);
    return Status::OK();
  }
  // The agreed exchange's scatter "on the device": +0 everywhere, the sums
  // assigned at the agreed indices, each times float(factor) unless 1.
  int agreed_scatters = 0;
  Status scatterAgreed(const std::vector<Request>& members, const uint32_t* idx, const float* vals, size_t count,
                       const std::vector<double>& factors) override {
    ++agreed_scatters;
    std::vector<size_t> offsets{0};
    for (const auto& m : members) {
      std::fill_n(static_cast<float*>(m.output.data), m.output.numel(), 0.0f);
      offsets.push_back(offsets.back() + m.output.numel());
    }
    for (size_t j = 0; j < count; ++j) {
      size_t m = 0;
      while (idx[j] >= offsets[m + 1]) ++m;
      const float f = static_cast<float>(factors[m]);
      static_cast<float*>(members[m].output.data)[idx[j] - offsets[m]] = f != 1.0f ? vals[j] * f : vals[j];
    }
    return Status::OK();
  }
  bool runsAgreedDeviceBuckets() const override { return !resident_only; }
  bool runsDenseDeviceBuckets() const override { return !resident_only; }
  bool hierarchical = true;  // takes the hierarchical exchange's device buckets
  bool runsHierarchicalDeviceBuckets() const override { return !resident_only && hierarchical; }
  Status startBucket(const DeviceBucketJob& dj, std::unique_ptr<PendingDeviceBucket>* out) override {
    ++starts;
    if (dj.job->block != nullptr) return Status(Code::kInternal, "stand-in: a host block for a device bucket");
    if (dj.dense) return startDense(dj, out);
    if (dj.hier) return startHier(dj, out);
    if (dj.leader >= 0) return startAgreed(dj, out);
    const std::vector<Request>& members = *dj.job->members;
    auto p = std::make_unique<StandInPending>();
    p->waits = &waits;
    p->cap = dj.job->cap;
    p->n = dj.job->n;
    p->P = dj.comm->size();
    p->factors = dj.factors;
    p->propagate = dj.propagate;
    for (const auto& m : members) p->members.push_back(hostCopy(m));
    p->send.assign(block::allgatherBytes(p->cap), 0);
    p->recv.assign(p->send.size() * p->P, 0);
    int bad = -1;
    const block::StagingCause cause = deviceBucketProblem(members, dj.comm_device, &bad);
    if (cause != block::StagingCause::kNone) {
      block::AllgatherBlock(p->send.data(), p->cap).finish(block::stagingCode(bad, cause));
      p->res.local = Status(Code::kInvalidArgument, "stand-in: " + std::string(block::stagingCauseText(cause)));
    } else {
      MGS_RETURN_IF_ERROR(adopt(members));
      LocalJob j = *dj.job;
      j.members = &p->members;
      j.block = p->send.data();
      LocalOutcome lo;
      inner_->run(j, &lo);
      p->res.local = lo.status;
      p->res.count = lo.count;
      p->res.k = lo.k;
      p->res.bad_member = lo.bad_member;
      p->res.non_finite = lo.non_finite;
      p->slab = std::move(lo.slab);
    }
    MGS_RETURN_IF_ERROR(dj.comm->startAllgather(p->send.data(), p->send.size(), p->recv.data(), &p->op));
    *out = std::move(p);
    return Status::OK();
  }
  int agreed_starts = 0, dense_starts = 0, hier_starts = 0;

 private:
  Status startHier(const DeviceBucketJob& dj, std::unique_ptr<PendingDeviceBucket>* out) {
    ++hier_starts;
    const std::vector<Request>& members = *dj.job->members;
    if (dj.node_comm == nullptr || dj.nodes < 2) return Status(Code::kInternal, "stand-in: no node communicator");
    const bool lead = dj.node_comm->rank() == 0;
    if (lead != (dj.leader_comm != nullptr) || dj.job->select != lead)
      return Status(Code::kInternal, "stand-in: only the node's leader selects and allgathers");
    auto p = std::make_unique<StandInHierPending>();
    p->waits = &waits;
    p->cap = dj.job->cap;
    p->n = dj.job->n;
    p->P = dj.comm->size();
    p->nodes = dj.nodes;
    p->factors = dj.factors;
    p->propagate = dj.propagate;
    for (const auto& m : members) p->members.push_back(hostCopy(m));
    p->slots.assign(p->P, 0.0f);
    std::vector<float> sum(p->n, 0.0f);
    uint32_t slot = 0;
    int bad = -1;
    const block::StagingCause cause = deviceBucketProblem(members, dj.comm_device, &bad);
    std::unique_ptr<LocalSlab> fused;
    if (cause != block::StagingCause::kNone) {
      p->res.local = Status(Code::kInvalidArgument, "stand-in: " + std::string(block::stagingCauseText(cause)));
      slot = block::agreedSlot(bad, static_cast<uint8_t>(cause));
    } else {
      MGS_RETURN_IF_ERROR(adopt(members));
      // 1. fuse only; all of acc goes into the node's sum (the slab +0).
      LocalJob j = *dj.job;
      j.members = &p->members;
      j.select = false;
      LocalOutcome lo;
      inner_->run(j, &lo);
      p->res.local = lo.status;
      p->res.bad_member = lo.bad_member;
      p->res.non_finite = lo.non_finite;
      fused = std::move(lo.slab);
      if (!lo.status.ok()) {
        slot = block::agreedSlot(lo.bad_member, 0);
      } else if (fused) {
        std::vector<uint32_t> all(p->n);
        for (size_t i = 0; i < p->n; ++i) all[i] = static_cast<uint32_t>(i);
        MGS_RETURN_IF_ERROR(inner_->extract(*fused, all.data(), p->n, sum.data()));
      }
    }
    p->slots[dj.comm->rank()] = static_cast<float>(slot);
    MGS_RETURN_IF_ERROR(dj.comm->allreduce(p->slots.data(), p->slots.size(), MGS_FLOAT32, CommOp::kSum));
    // 2. the node's sum.
    MGS_RETURN_IF_ERROR(dj.node_comm->allreduce(sum.data(), sum.size(), MGS_FLOAT32, CommOp::kSum));
    const size_t bb = block::allgatherBytes(p->cap);
    p->recv.assign(bb * p->nodes, 0);
    if (lead) {
      // 3. the leader's selection from it: its new residual is the sum
      // with the selected entries +0.
      std::vector<char> send(bb, 0);
      LocalJob j = *dj.job;
      j.members = &p->members;
      j.block = send.data();
      j.acc_in = sum.data();
      LocalOutcome lo;
      inner_->run(j, &lo);  // a failure (a non-finite sum) packs its code into the block
      p->res.count = lo.status.ok() ? lo.count : 0;
      p->res.k = lo.k;
      if (fused) inner_->settle(members, std::move(fused), false);  // replaced by the selection's slab
      fused = std::move(lo.slab);
      // 4. the leaders' blocks.
      MGS_RETURN_IF_ERROR(dj.leader_comm->allgather(send.data(), bb, p->recv.data()));
    }
    p->slab = std::move(fused);
    // 5. inside the node.
    MGS_RETURN_IF_ERROR(dj.node_comm->broadcast(p->recv.data(), p->recv.size(), 0));
    *out = std::move(p);
    return Status::OK();
  }

  Status startDense(const DeviceBucketJob& dj, std::unique_ptr<PendingDeviceBucket>* out) {
    ++dense_starts;
    const std::vector<Request>& members = *dj.job->members;
    if (dj.job->select || dj.leader >= 0) return Status(Code::kInternal, "stand-in: a dense job selects nothing");
    auto p = std::make_unique<StandInDensePending>();
    p->waits = &waits;
    p->cap = dj.job->cap;
    p->n = dj.job->n;
    p->P = dj.comm->size();
    p->factors = dj.factors;
    p->propagate = dj.propagate;
    for (const auto& m : members) p->members.push_back(hostCopy(m));
    p->vals.assign(p->n + p->P, 0.0f);
    uint32_t slot = 0;
    int bad = -1;
    const block::StagingCause cause = deviceBucketProblem(members, dj.comm_device, &bad);
    if (cause != block::StagingCause::kNone) {
      p->res.local = Status(Code::kInvalidArgument, "stand-in: " + std::string(block::stagingCauseText(cause)));
      slot = block::agreedSlot(bad, static_cast<uint8_t>(cause));
    } else {
      MGS_RETURN_IF_ERROR(adopt(members));
      LocalJob j = *dj.job;
      j.members = &p->members;
      LocalOutcome lo;
      inner_->run(j, &lo);
      p->res.local = lo.status;
      p->res.bad_member = lo.bad_member;
      p->res.non_finite = lo.non_finite;
      p->slab = std::move(lo.slab);
      if (!lo.status.ok()) slot = block::agreedSlot(lo.bad_member, 0);
      // All of acc into the sum; the slab keeps +0 everywhere.
      std::vector<uint32_t> all(p->n);
      for (size_t i = 0; i < p->n; ++i) all[i] = static_cast<uint32_t>(i);
      if (p->slab) MGS_RETURN_IF_ERROR(inner_->extract(*p->slab, all.data(), p->n, p->vals.data()));
    }
    p->vals[p->n + dj.comm->rank()] = static_cast<float>(slot);
    MGS_RETURN_IF_ERROR(dj.comm->allreduce(p->vals.data(), p->vals.size(), MGS_FLOAT32, CommOp::kSum));
    *out = std::move(p);
    return Status::OK();
  }

  Status startAgreed(const DeviceBucketJob& dj, std::unique_ptr<PendingDeviceBucket>* out) {
    ++agreed_starts;
    const std::vector<Request>& members = *dj.job->members;
    const int me = dj.comm->rank();
    const bool lead = me == dj.leader;
    if (dj.job->select != lead) return Status(Code::kInternal, "stand-in: only the leader selects");
    auto p = std::make_unique<StandInAgreedPending>();
    p->waits = &waits;
    p->cap = dj.job->cap;
    p->P = dj.comm->size();
    p->factors = dj.factors;
    p->propagate = dj.propagate;
    for (const auto& m : members) p->members.push_back(hostCopy(m));
    p->block.assign(block::allgatherBytes(p->cap), 0);
    p->vals.assign(p->cap + p->P, 0.0f);
    uint32_t slot = 0;  // this rank's verdict slot
    int bad = -1;
    const block::StagingCause cause = deviceBucketProblem(members, dj.comm_device, &bad);
    if (cause != block::StagingCause::kNone) {
      if (lead) block::AllgatherBlock(p->block.data(), p->cap).finish(block::stagingCode(bad, cause));
      p->res.local = Status(Code::kInvalidArgument, "stand-in: " + std::string(block::stagingCauseText(cause)));
      slot = block::agreedSlot(bad, static_cast<uint8_t>(cause));
    } else {
      MGS_RETURN_IF_ERROR(adopt(members));
      LocalJob j = *dj.job;
      j.members = &p->members;
      j.block = lead ? p->block.data() : nullptr;  // the allgather layout on the device
      LocalOutcome lo;
      inner_->run(j, &lo);
      p->res.local = lo.status;
      p->res.k = lo.k;
      p->res.bad_member = lo.bad_member;
      p->res.non_finite = lo.non_finite;
      p->slab = std::move(lo.slab);
      if (!lo.status.ok()) slot = block::agreedSlot(lo.bad_member, 0);
    }
    // The leader's block to every rank.
    MGS_RETURN_IF_ERROR(dj.comm->broadcast(p->block.data(), p->block.size(), dj.leader));
    const block::ConstAllgatherBlock b(p->block.data(), p->cap);
    const block::Header h = block::decodeHeader(b.header(), p->cap, members.size());
    bool malformed = !b.sealed() || h.kind == block::Header::kInvalid;
    const size_t count = h.kind == block::Header::kCount ? h.count : 0;
    for (size_t j = 0; j < count && !malformed; ++j) malformed = b.indices()[j] >= dj.job->n;
    if (malformed) p->res.malformed_rank = dj.leader;
    p->res.count = malformed ? 0 : count;
    // This rank's values at the leader's indices (+0 left in its acc); the
    // leader's are its block's. A failed rank adds zeros and its slot.
    if (slot == 0 && !malformed) {
      if (lead)
        std::copy(b.values(), b.values() + count, p->vals.begin());
      else
        MGS_RETURN_IF_ERROR(inner_->extract(*p->slab, b.indices(), count, p->vals.data()));
    }
    p->vals[p->cap + me] = static_cast<float>(slot);
    MGS_RETURN_IF_ERROR(dj.comm->allreduce(p->vals.data(), p->vals.size(), MGS_FLOAT32, CommOp::kSum));
    *out = std::move(p);
    return Status::OK();
  }
  int rank_;
};

struct WorldOptions {
  int P = 1;
  int steps = 4;
  bool device = true;          // CUDA tensors with a device communicator; else host tensors
  bool propagate = true;       // MGS_NONFINITE
  int wrong_device_rank = -1;  // this rank's "w.b" input is on CUDA device 1 at step wrong_step
  int wrong_step = -1;
  int nan_rank = -1;  // this rank's "w.a" gets a NaN at step nan_step
  int nan_step = -1;
  int no_stage_rank = -1;  // this rank cannot make a device stage
  bool drain = false;      // finish each step with drain() (waits) instead of polling
  bool calibrate = false;  // MGS_CALIBRATION=auto (else off)
  std::string exchange = "allgather";
  int node_size = 0;
  size_t size_scale = 1;  // every tensor this many times its kTensors size
  bool resident_only = false;  // CUDA tensors and a resident stage, but no device communicator (MPI only)
  double density = 0.05;
  bool dense_fallback = false;  // MGS_DENSE_FALLBACK
  double device_allgather_ns = 1.0;  // the stand-in device communicator's allgather cost (see DeviceStandIn)
  int cannot_time_rank = -1;         // this rank cannot time the device communicator
  bool hier_device = true;           // the stand-in takes the hierarchical exchange's device buckets
};

const std::vector<std::pair<std::string, size_t>> kTensors = {{"w.a", 300}, {"w.b", 200}};

std::vector<float> gradient(int rank, int step, size_t t, size_t n) {
  std::mt19937 rng(1000 * rank + 10 * step + static_cast<uint32_t>(t));
  std::normal_distribution<float> g;
  std::vector<float> v(n);
  for (auto& x : v) x = g(rng);
  return v;
}

struct RankLog {
  std::vector<std::vector<float>> outputs;    // [step * tensors + t]
  std::vector<Status> statuses;               // idem
  std::vector<std::vector<float>> residuals;  // after each step, [step * tensors + t]
  std::vector<std::vector<float>> residuals_before;
  uint64_t device_buckets = 0, host_buckets = 0;
  int waits = 0, starts = 0, resident_runs = 0, agreed_scatters = 0, agreed_starts = 0, dense_starts = 0;
  int collective_timings = 0, hier_starts = 0;
  double allgather_1m = -1;  // the model's allgather of 1 MiB per rank, at the end
  double c_s_calibrated = -1, c_s = -1;  // the model's selection term after init, and at the end
  SparseStats stats;                     // the pipeline's counters at the end
  std::string error;                     // a REQUIRE-free report of set-up failures
};

void runRank(const WorldOptions& wo, int rank, std::shared_ptr<ThreadWorld> world, std::shared_ptr<ThreadWorld> dworld,
             RankLog* log) {
  ThreadCommunicator comm(world, rank);
  Config config;
  config.compressor = "topk";
  config.density = wo.density;
  config.min_sparse_elements = 1;
  config.calibration = wo.calibrate ? "auto" : "off";
  config.exchange = wo.exchange;
  config.node_size = wo.node_size;
  config.dense_fallback = wo.dense_fallback;
  config.profile_steps = 1000;  // layer-wise buckets throughout
  config.replan_tolerance = 0;
  config.nonfinite = wo.propagate ? "propagate" : "error";
  ResidualStore store;
  std::map<std::string, Status> done;
  std::unique_ptr<SparsePipeline> pipe;
  Status st = SparsePipeline::create(
      comm, config, store, [&done](Request& r, Status s) { done[r.name] = std::move(s); }, &pipe);
  if (!st.ok()) {
    log->error = st.toString();
    return;
  }
  if (pipe->costModel()) log->c_s_calibrated = pipe->costModel()->sparsify.c_s;
  DeviceStandIn* standin = nullptr;
  device::DeviceComm dc;
  if (wo.device) {
    LocalStageOptions o;
    o.rank = rank;
    o.residuals = &store;
    o.max_slabs = 10;
    pipe->setResidentFactory([&, o](const LocalJob&, std::unique_ptr<ResidentLocalStage>* out) -> Status {
      if (rank == wo.no_stage_rank) return Status(Code::kCuda, "stand-in: no device here");
      auto s = std::make_unique<DeviceStandIn>(o);
      s->resident_only = wo.resident_only;
      s->allgather_ns = wo.device_allgather_ns;
      s->cannot_time = rank == wo.cannot_time_rank;
      s->hierarchical = wo.hier_device;
      standin = s.get();
      *out = std::move(s);
      return Status::OK();
    });
    dc.comm = std::make_unique<ThreadCommunicator>(dworld, rank);
    dc.stream = &dc;  // any non-null stream
    dc.device = 0;
    if (!wo.resident_only) pipe->setDeviceComm([&dc]() { return &dc; });
  }
  const size_t T = kTensors.size();
  std::vector<std::vector<float>> grads(T), outs(T);
  for (int step = 0; step < wo.steps; ++step) {
    std::vector<Request> reqs;
    for (size_t t = 0; t < T; ++t) {
      const size_t n = kTensors[t].second * wo.size_scale;
      grads[t] = gradient(rank, step, t, n);
      if (rank == wo.nan_rank && step == wo.nan_step && t == 0) grads[t][17] = std::nanf("");
      outs[t].assign(n, -7.0f);  // "not written"
      std::vector<float> before(n);
      store.read(kTensors[t].first, before.data(), n);
      log->residuals_before.push_back(before);
      Request r;
      r.name = kTensors[t].first;
      r.sig.dtype = MGS_FLOAT32;
      r.sig.shape = {static_cast<int64_t>(n)};
      r.sig.flags = MGS_FLAG_SPARSE_OK;
      r.sig.on_cuda = wo.device;
      r.sig.reduce_op = MGS_REDUCE_AVERAGE;
      r.input.data = grads[t].data();
      r.input.dtype = MGS_FLOAT32;
      r.input.shape = r.sig.shape;
      r.output = r.input;
      r.output.data = outs[t].data();
      if (wo.device) {
        r.input.device = r.output.device = 0;
        if (rank == wo.wrong_device_rank && step == wo.wrong_step && t == 1) r.input.device = 1;
      }
      reqs.push_back(std::move(r));
    }
    done.clear();
    pipe->submit(std::move(reqs));
    pipe->endCycle(false);
    if (wo.drain) pipe->drain();  // shutdown's way: waits for what polling has not seen done
    // Poll as the coordinator does, until both handles completed.
    for (int spin = 0; done.size() < T && spin < 1000000; ++spin) {
      pipe->poll();
      if (done.size() < T) std::this_thread::yield();
    }
    if (done.size() < T) {
      log->error = "step " + std::to_string(step) + ": the handles never completed";
      return;
    }
    for (size_t t = 0; t < T; ++t) {
      log->outputs.push_back(outs[t]);
      log->statuses.push_back(done[kTensors[t].first]);
      std::vector<float> r(kTensors[t].second * wo.size_scale);
      store.read(kTensors[t].first, r.data(), r.size());  // through External wherever it lives
      log->residuals.push_back(r);
    }
  }
  pipe->drain();
  log->device_buckets = pipe->localStage().deviceBuckets();
  if (pipe->costModel()) log->c_s = pipe->costModel()->sparsify.c_s;
  if (pipe->costModel()) log->allgather_1m = pipe->costModel()->allgather.seconds(double(wo.P) * (1 << 20));
  log->host_buckets = pipe->localStage().hostBuckets();
  log->stats = pipe->stats();
  if (standin) {
    log->waits = standin->waits;
    log->starts = standin->starts;
    log->resident_runs = standin->runs;
    log->agreed_scatters = standin->agreed_scatters;
    log->agreed_starts = standin->agreed_starts;
    log->dense_starts = standin->dense_starts;
    log->collective_timings = standin->collective_timings;
    log->hier_starts = standin->hier_starts;
  }
}

std::vector<RankLog> runWorld(const WorldOptions& wo) {
  auto world = std::make_shared<ThreadWorld>(wo.P), dworld = std::make_shared<ThreadWorld>(wo.P);
  std::vector<RankLog> logs(wo.P);
  std::vector<std::thread> threads;
  for (int r = 0; r < wo.P; ++r) threads.emplace_back([&, r] { runRank(wo, r, world, dworld, &logs[r]); });
  for (auto& t : threads) t.join();
  for (const auto& l : logs) {
    INFO(l.error);
    REQUIRE(l.error.empty());
  }
  return logs;
}

// Every finished bucket counted on exactly one path, `path`, with all the bytes.
void requireOnePath(const SparseStats& s, BucketPath path, uint64_t buckets) {
  uint64_t bytes = 0;
  for (int p = 0; p < 4; ++p) {
    INFO("path " << bucketPathName(static_cast<BucketPath>(p)));
    REQUIRE(s.path_buckets[p] == (p == static_cast<int>(path) ? buckets : 0));
    bytes += s.path_bytes[p];
  }
  REQUIRE(s.buckets + s.dense_buckets == buckets);
  REQUIRE(s.path_bytes[static_cast<int>(path)] == s.bytes_sent);
  REQUIRE(bytes == s.bytes_sent);
}

bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), 4 * a.size()) == 0;
}

// Every entry of `d` ok, its outputs and residuals bitwise the reference's.
void requireSameResults(const RankLog& d, const RankLog& ref) {
  REQUIRE(d.outputs.size() == ref.outputs.size());
  for (size_t i = 0; i < d.outputs.size(); ++i) {
    INFO("entry " << i);
    INFO(d.statuses[i].toString());
    REQUIRE(d.statuses[i].ok());
    REQUIRE(sameBits(d.outputs[i], ref.outputs[i]));
    REQUIRE(sameBits(d.residuals[i], ref.residuals[i]));
  }
}

}  // namespace

TEST_CASE("device buckets: no wait in steady state, outputs and residuals bitwise the host path's",
          "[core][device_bucket]") {
  for (int P : {1, 3}) {
    WorldOptions dev, host;
    dev.P = host.P = P;
    host.device = false;
    const std::vector<RankLog> d = runWorld(dev), h = runWorld(host);
    for (int r = 0; r < P; ++r) {
      INFO("P = " << P << ", rank " << r);
      REQUIRE(d[r].device_buckets == dev.steps * kTensors.size());
      REQUIRE(d[r].host_buckets == 0);
      REQUIRE(d[r].starts == static_cast<int>(dev.steps * kTensors.size()));
      REQUIRE(d[r].waits == 0);  // finished by polling only: the pipeline never blocked
      REQUIRE(h[r].device_buckets == 0);
      // What mgs_get_stats reports: every bucket on the device path, or on the host path.
      requireOnePath(d[r].stats, BucketPath::kDevice, dev.steps * kTensors.size());
      requireOnePath(h[r].stats, BucketPath::kHost, host.steps * kTensors.size());
      REQUIRE(d[r].stats.bytes_sent > 0);
      for (size_t i = 0; i < d[r].outputs.size(); ++i) {
        INFO("entry " << i);
        REQUIRE(d[r].statuses[i].ok());
        REQUIRE(h[r].statuses[i].ok());
        REQUIRE(sameBits(d[r].outputs[i], h[r].outputs[i]));
        REQUIRE(sameBits(d[r].residuals[i], h[r].residuals[i]));
      }
    }
    if (P == 1) {
      // sent + kept == gradient + old residual, bit for bit: at every entry
      // either the output holds acc and the residual +0, or the reverse
      // (P = 1, average over one rank: factor 1).
      size_t bad = 0, sent = 0;
      for (int step = 0; step < dev.steps; ++step)
        for (size_t t = 0; t < kTensors.size(); ++t) {
          const size_t i = step * kTensors.size() + t;
          const std::vector<float> g = gradient(0, step, t, kTensors[t].second);
          for (size_t e = 0; e < g.size(); ++e) {
            const float acc = g[e] + d[0].residuals_before[i][e];
            const float out = d[0].outputs[i][e], kept = d[0].residuals[i][e];
            const bool is_sent = bits(kept) == 0;
            sent += is_sent;
            bad += is_sent ? bits(out) != bits(acc) : (bits(kept) != bits(acc) || bits(out) != 0);
          }
        }
      REQUIRE(bad == 0);
      REQUIRE(sent > 0);
    }
  }
}

TEST_CASE("device buckets: drain waits for buckets not yet seen done, with the same results", "[core][device_bucket]") {
  WorldOptions dev, host;
  dev.P = host.P = 2;
  dev.drain = true;
  host.device = false;
  const std::vector<RankLog> d = runWorld(dev), h = runWorld(host);
  for (int r = 0; r < dev.P; ++r) {
    INFO("rank " << r);
    // The stand-in's first poll of a bucket is "not yet". Queueing a device
    // bucket polls the queue once (pushInFlight): the step's first bucket is done at the second bucket's
    // start, the second is seen only once (not done); drain() waits for it.
    REQUIRE(d[r].waits == dev.steps);
    for (size_t i = 0; i < d[r].outputs.size(); ++i) {
      REQUIRE(d[r].statuses[i].ok());
      REQUIRE(sameBits(d[r].outputs[i], h[r].outputs[i]));
      REQUIRE(sameBits(d[r].residuals[i], h[r].residuals[i]));
    }
  }
}

TEST_CASE("device buckets: a tensor on the wrong device fails the bucket on every rank, naming it",
          "[core][device_bucket]") {
  WorldOptions wo;
  wo.P = 3;
  wo.wrong_device_rank = 1;
  wo.wrong_step = 2;
  const std::vector<RankLog> logs = runWorld(wo);
  const size_t T = kTensors.size();
  for (int r = 0; r < wo.P; ++r) {
    INFO("rank " << r);
    for (int step = 0; step < wo.steps; ++step) {
      const size_t ia = step * T, ib = step * T + 1;
      REQUIRE(logs[r].statuses[ia].ok());  // w.a's bucket is not affected
      if (step != wo.wrong_step) {
        REQUIRE(logs[r].statuses[ib].ok());
        continue;
      }
      const Status& st = logs[r].statuses[ib];
      REQUIRE(!st.ok());
      const std::string msg = st.message();
      INFO(msg);
      REQUIRE(msg.find("rank 1: tensor 'w.b': the input is on another CUDA device than the exchange's") !=
              std::string::npos);
      REQUIRE(msg.find("rank 0:") == std::string::npos);
      REQUIRE(msg.find("rank 2:") == std::string::npos);
      // Nothing written, no residual moved, on every rank.
      for (float v : logs[r].outputs[ib]) REQUIRE(v == -7.0f);
      REQUIRE(sameBits(logs[r].residuals[ib], logs[r].residuals_before[ib]));
    }
    REQUIRE(logs[r].waits == 0);
  }
  // The failing rank says what it found itself as well.
  REQUIRE(logs[1].statuses[wo.wrong_step * T + 1].code() == Code::kInvalidArgument);
}

TEST_CASE("device buckets: a non-finite value on one rank, under propagate and error", "[core][device_bucket]") {
  for (bool propagate : {true, false}) {
    WorldOptions wo;
    wo.P = 2;
    wo.propagate = propagate;
    wo.nan_rank = 1;
    wo.nan_step = 1;
    const std::vector<RankLog> logs = runWorld(wo);
    const size_t i = wo.nan_step * kTensors.size();  // w.a at the NaN step
    for (int r = 0; r < wo.P; ++r) {
      INFO("propagate " << propagate << ", rank " << r);
      REQUIRE(sameBits(logs[r].residuals[i], logs[r].residuals_before[i]));  // nothing committed
      if (propagate) {
        REQUIRE(logs[r].statuses[i].ok());  // a skipped step: NaN outputs everywhere, as the host path
        for (float v : logs[r].outputs[i]) REQUIRE(std::isnan(v));
      } else {
        REQUIRE(logs[r].statuses[i].code() == Code::kNumeric);
        REQUIRE(logs[r].statuses[i].message().find("rank 1: non-finite gradient in tensor 'w.a'") != std::string::npos);
        for (float v : logs[r].outputs[i]) REQUIRE(v == -7.0f);
      }
      REQUIRE(logs[r].statuses[i + 1].ok());  // w.b
    }
  }
}

TEST_CASE("device buckets: one rank without a device stage sends every rank through MPI", "[core][device_bucket]") {
  // Rank 1's factory fails: the agreement sends both ranks down the MPI path
  // (none starts a device bucket, so none waits in an exchange the other
  // never joins). In this CPU build that path cannot stage the "CUDA"
  // inputs (device_none), so every bucket fails on both ranks, naming both.
  WorldOptions wo;
  wo.P = 2;
  wo.steps = 2;
  wo.no_stage_rank = 1;
  const std::vector<RankLog> logs = runWorld(wo);
  for (int r = 0; r < wo.P; ++r) {
    INFO("rank " << r);
    REQUIRE(logs[r].device_buckets == 0);
    REQUIRE(logs[r].starts == 0);
    REQUIRE(logs[r].host_buckets == wo.steps * kTensors.size());
    for (const Status& st : logs[r].statuses) {
      INFO(st.toString());
      REQUIRE(!st.ok());
      REQUIRE(st.message().find("rank 0: local error") != std::string::npos);
      REQUIRE(st.message().find("rank 1: local error") != std::string::npos);
    }
  }
}

TEST_CASE("device buckets: staging codes and deviceBucketProblem", "[core][device_bucket]") {
  const size_t cap = 10, M = 3;
  for (uint8_t c = 1; c <= block::kMaxStagingCause; ++c) {
    const uint64_t code = block::stagingCode(2, static_cast<block::StagingCause>(c));
    const block::Header h = block::decodeHeader(code, cap, M);
    REQUIRE(h.kind == block::Header::kFailure);
    REQUIRE(h.bad_member == 2);
    REQUIRE(static_cast<uint8_t>(h.cause) == c);
    REQUIRE(block::decodeHeader(block::stagingCode(3, static_cast<block::StagingCause>(c)), cap, M).kind ==
            block::Header::kInvalid);  // no member 3
  }
  REQUIRE(block::decodeHeader(block::kStagingBit, cap, M).kind == block::Header::kInvalid);  // cause 0
  REQUIRE(block::decodeHeader(block::kStagingBit | (uint64_t{1} << 40) | 1, cap, M).kind == block::Header::kInvalid);
  REQUIRE(block::decodeHeader(block::kStagingBit | (block::kMaxStagingCause + 1), cap, M).kind ==
          block::Header::kInvalid);
  // The non-finite codes and counts are what they were.
  REQUIRE(block::decodeHeader(block::failureCode(1), cap, M).cause == block::StagingCause::kNone);
  REQUIRE(block::decodeHeader(block::failureCode(1), cap, M).bad_member == 1);
  REQUIRE(block::decodeHeader(7, cap, M).kind == block::Header::kCount);

  std::vector<float> x(4), y(4);
  auto member = [&](const std::string& name) {
    Request r;
    r.name = name;
    r.input.data = x.data();
    r.input.dtype = MGS_FLOAT32;
    r.input.shape = {4};
    r.input.device = 0;
    r.output = r.input;
    r.output.data = y.data();
    return r;
  };
  std::vector<Request> ms = {member("a"), member("b")};
  int bad = -2;
  REQUIRE(deviceBucketProblem(ms, 0, &bad) == block::StagingCause::kNone);
  REQUIRE(bad == -1);
  REQUIRE(deviceBucketProblem(ms, 1, &bad) == block::StagingCause::kWrongDevice);
  REQUIRE(bad == 0);
  ms[1].input.device = MGS_DEVICE_CPU;
  REQUIRE(deviceBucketProblem(ms, 0, &bad) == block::StagingCause::kNotCuda);
  REQUIRE(bad == 1);
  ms[1] = member("b");
  ms[1].input.dtype = MGS_INT32;
  REQUIRE(deviceBucketProblem(ms, 0, &bad) == block::StagingCause::kDtype);
  ms[1] = member("b");
  ms[1].output.shape = {3};
  REQUIRE(deviceBucketProblem(ms, 0, &bad) == block::StagingCause::kOutput);
  ms[1] = member("b");
  ms[1].output.device = 1;
  REQUIRE(deviceBucketProblem(ms, 0, &bad) == block::StagingCause::kOutput);
  ms[1] = member("b");
  ms[1].input.data = nullptr;
  REQUIRE(deviceBucketProblem(ms, 0, &bad) == block::StagingCause::kNoData);
  REQUIRE(bad == 1);
}

TEST_CASE("device buckets: calibration times the selection where it runs, the slowest rank's figure everywhere",
          "[core][device_bucket]") {
  WorldOptions wo;
  wo.P = 3;
  wo.steps = 2;
  wo.calibrate = true;
  SECTION("every rank selects on the device") {
    const auto logs = runWorld(wo);
    for (const auto& l : logs) {
      REQUIRE(l.c_s_calibrated > 0);                  // calibration's CPU figure
      REQUIRE(l.c_s == Approx(3e-12).epsilon(1e-9));  // rank 2's device figure, on every rank
      REQUIRE(l.device_buckets > 0);
    }
  }
  SECTION("one rank without a device stage: every rank keeps calibration's figure") {
    wo.no_stage_rank = 1;
    const auto logs = runWorld(wo);
    for (const auto& l : logs) REQUIRE(l.c_s == l.c_s_calibrated);
  }
  SECTION("host tensors: nothing to time") {
    wo.device = false;
    const auto logs = runWorld(wo);
    for (const auto& l : logs) REQUIRE(l.c_s == l.c_s_calibrated);
  }
  SECTION("MGS_CALIBRATION=off: the preset stays") {
    wo.calibrate = false;
    const auto logs = runWorld(wo);
    for (const auto& l : logs) REQUIRE(l.c_s == l.c_s_calibrated);
  }
}

TEST_CASE("device buckets: the device communicator's collectives are timed once; auto keeps the allgather",
          "[core][device_bucket]") {
  // MGS_CALIBRATION=auto: at the first device bucket every rank times the
  // device communicator; the slowest rank's figures replace the model's
  // collective terms on every rank. auto then chooses among the exchanges it
  // allows (the allgather, dense) by that model: even an allgather priced
  // 1,000x the other collectives per byte, which makes the agreed exchange
  // the cheapest, keeps every bucket on the allgather (allowedExchanges).
  // One rank that cannot time them keeps every rank on the MPI terms and
  // device buckets on the allgather.
  const uint64_t buckets = 4 * kTensors.size();
  for (double ag_ns : {0.01, 1000.0})
    for (int cannot : {-1, 1}) {
      WorldOptions wo;
      wo.P = 3;
      wo.calibrate = true;
      wo.exchange = "auto";
      wo.device_allgather_ns = ag_ns;
      wo.cannot_time_rank = cannot;
      const std::vector<RankLog> logs = runWorld(wo);
      const double slowest = 3 * (5e-6 + 1e-9 * ag_ns * double(1 << 20));  // rank 2, 1 MiB per rank
      for (int r = 0; r < wo.P; ++r) {
        INFO("allgather " << ag_ns << " ns/B, rank " << cannot << " cannot time; rank " << r);
        const RankLog& l = logs[r];
        REQUIRE(l.collective_timings == 1);
        REQUIRE(l.device_buckets == buckets);
        requireOnePath(l.stats, BucketPath::kDevice, buckets);
        REQUIRE(l.waits == 0);
        if (cannot >= 0) {
          REQUIRE(l.allgather_1m != Approx(slowest).epsilon(1e-6));
          REQUIRE(l.agreed_starts == 0);
          continue;
        }
        REQUIRE(l.allgather_1m == Approx(slowest).epsilon(1e-9));
        REQUIRE(l.agreed_starts == 0);
        REQUIRE(l.stats.agreed_buckets == 0);
      }
    }
}

TEST_CASE("device buckets: hierarchical buckets of CUDA tensors the stage does not take are staged",
          "[core][device_bucket]") {
  // The hierarchical exchange (two nodes of two thread ranks,
  // MGS_NODE_SIZE=2) where the resident stage does not take its device
  // buckets (the CUDA stage today) sums whole buckets in host memory, so a
  // bucket of CUDA tensors that takes it goes by the local stage's host
  // route (staged), with a device communicator or with only a resident
  // stage. Here the
  // "CUDA" tensors are host memory, which the staging copy refuses without
  // a GPU, so each bucket fails; what is checked is the route (no device
  // bucket started, none counted) and that every rank takes the same verdict.
  for (bool resident_only : {false, true}) {
    WorldOptions wo;
    wo.P = 4;
    wo.steps = 1;
    wo.exchange = "hierarchical";
    wo.node_size = 2;
    wo.resident_only = resident_only;
    wo.hier_device = false;
    const std::vector<RankLog> d = runWorld(wo);
    for (int r = 0; r < wo.P; ++r) {
      INFO((resident_only ? "resident stage without NCCL" : "device communicator") << ", rank " << r);
      REQUIRE(d[r].resident_runs == 0);
      REQUIRE(d[r].stats.path_buckets[static_cast<int>(BucketPath::kResident)] == 0);
      REQUIRE(d[r].stats.path_buckets[static_cast<int>(BucketPath::kDevice)] == 0);
      REQUIRE(d[r].device_buckets == 0);
      REQUIRE(d[r].starts == 0);
      REQUIRE(d[r].statuses.size() == kTensors.size());
      for (size_t i = 0; i < d[r].statuses.size(); ++i) {
        INFO("entry " << i << ": " << d[r].statuses[i].toString());
        REQUIRE(d[r].statuses[i].code() == d[0].statuses[i].code());
        REQUIRE(d[r].statuses[i].message().find("incomplete job") == std::string::npos);
      }
    }
  }
}

// A world of the agreed exchange (MGS_EXCHANGE=agreed), or of the dense
// fallback (auto, MGS_DENSE_FALLBACK, density * P >= 1: every bucket dense).
WorldOptions exchangeWorld(bool dense, int P) {
  WorldOptions wo;
  wo.P = P;
  if (dense) {
    wo.exchange = "auto";
    wo.dense_fallback = true;
    wo.density = 0.5;
  } else {
    wo.exchange = "agreed";
  }
  return wo;
}

TEST_CASE("device buckets: dense fallback buckets of CUDA tensors run as device buckets, bitwise the host dense exchange's",
          "[core][device_bucket]") {
  // Where the 1/P rule sends a bucket of CUDA tensors dense: the fused acc
  // and the verdict slots summed by one allreduce, the verdict and the
  // outputs on the device; finished by polling only, every bucket on the
  // device path, outputs, residuals (+0: everything was sent) and bytes
  // bitwise the host dense exchange's.
  for (int P : {2, 3, 4}) {
    WorldOptions dev = exchangeWorld(true, P), host = dev;
    host.device = false;
    const std::vector<RankLog> d = runWorld(dev), h = runWorld(host);
    const uint64_t buckets = dev.steps * kTensors.size();
    for (int r = 0; r < P; ++r) {
      INFO("P = " << P << ", rank " << r);
      REQUIRE(d[r].device_buckets == buckets);
      REQUIRE(d[r].dense_starts == static_cast<int>(buckets));
      REQUIRE(d[r].host_buckets == 0);
      REQUIRE(d[r].resident_runs == 0);
      REQUIRE(d[r].waits == 0);
      REQUIRE(d[r].stats.dense_buckets == buckets);
      REQUIRE(h[r].stats.dense_buckets == buckets);  // the reference is the host dense exchange
      requireOnePath(d[r].stats, BucketPath::kDevice, buckets);
      requireOnePath(h[r].stats, BucketPath::kHost, buckets);
      REQUIRE(d[r].stats.bytes_sent == h[r].stats.bytes_sent);
      REQUIRE(d[r].stats.selected == 0);
      requireSameResults(d[r], h[r]);
      for (const auto& res : d[r].residuals)
        for (float v : res) REQUIRE(bits(v) == 0);
    }
  }
}

TEST_CASE("device buckets: agreed buckets of CUDA tensors run as device buckets, bitwise the host agreed exchange's",
          "[core][device_bucket]") {
  // MGS_EXCHANGE=agreed with a device communicator: the leader's block
  // broadcast, the values' allreduce with the verdict slots, the verdict and
  // the scatter are one device bucket; finished by polling only (no wait),
  // every bucket on the device path, and outputs, residuals and bytes sent
  // bitwise the host agreed exchange's.
  for (int P : {2, 3, 4}) {
    WorldOptions dev, host;
    dev.P = host.P = P;
    dev.steps = host.steps = 5;  // the leader rotates through every rank
    dev.exchange = host.exchange = "agreed";
    host.device = false;
    const std::vector<RankLog> d = runWorld(dev), h = runWorld(host);
    const uint64_t buckets = dev.steps * kTensors.size();
    for (int r = 0; r < P; ++r) {
      INFO("P = " << P << ", rank " << r);
      REQUIRE(d[r].device_buckets == buckets);
      REQUIRE(d[r].agreed_starts == static_cast<int>(buckets));
      REQUIRE(d[r].host_buckets == 0);
      REQUIRE(d[r].resident_runs == 0);
      REQUIRE(d[r].waits == 0);
      REQUIRE(d[r].stats.agreed_buckets == buckets);
      REQUIRE(h[r].stats.agreed_buckets == buckets);
      requireOnePath(d[r].stats, BucketPath::kDevice, buckets);
      REQUIRE(d[r].stats.bytes_sent == h[r].stats.bytes_sent);
      REQUIRE(d[r].stats.selected == h[r].stats.selected);
      requireSameResults(d[r], h[r]);
    }
  }
}

TEST_CASE("device buckets: a non-finite value in an agreed (on its leader or not) or dense device bucket",
          "[core][device_bucket]") {
  // Agreed: rank 1 leads some steps and not others. Under 'error' every
  // rank fails w.a's bucket at that step naming rank 1 and the tensor; under
  // 'propagate' every output is NaN on every rank and the step is skipped.
  // Either way nothing commits, and w.b is unaffected.
  for (bool dense : {false, true})
  for (bool propagate : {false, true})
    for (int nan_step : {0, 1, 2}) {
      WorldOptions wo = exchangeWorld(dense, 3);
      wo.propagate = propagate;
      wo.nan_rank = 1;
      wo.nan_step = nan_step;
      const std::vector<RankLog> logs = runWorld(wo);
      const size_t i = nan_step * kTensors.size();
      for (int r = 0; r < wo.P; ++r) {
        INFO((dense ? "dense" : "agreed") << ", propagate " << propagate << ", NaN at step " << nan_step << ", rank "
                                          << r);
        const Status& st = logs[r].statuses[i];
        INFO(st.toString());
        if (propagate) {
          REQUIRE(st.ok());
          for (float v : logs[r].outputs[i]) REQUIRE(std::isnan(v));
        } else {
          REQUIRE(st.code() == Code::kNumeric);
          REQUIRE(st.message().find("rank 1: non-finite gradient in tensor 'w.a'") != std::string::npos);
          REQUIRE(st.message().find("rank 0:") == std::string::npos);
          REQUIRE(st.message().find("rank 2:") == std::string::npos);
          for (float v : logs[r].outputs[i]) REQUIRE(v == -7.0f);
        }
        REQUIRE(sameBits(logs[r].residuals[i], logs[r].residuals_before[i]));
        REQUIRE(logs[r].statuses[i + 1].ok());
        REQUIRE(logs[r].waits == 0);
        REQUIRE(logs[r].device_buckets == wo.steps * kTensors.size());
        REQUIRE(logs[r].dense_starts == (dense ? static_cast<int>(wo.steps * kTensors.size()) : 0));
      }
    }
}

TEST_CASE("device buckets: a tensor on the wrong device fails an agreed or dense device bucket on every rank, naming it",
          "[core][device_bucket]") {
  // Agreed: at steps 0..2 rank 1 is the leader once: as leader its block
  // carries the staging code; otherwise its verdict slot does (dense: always
  // its slot). Either way every rank names rank 1, the tensor and the cause,
  // and nothing is written.
  for (bool dense : {false, true})
  for (int wrong_step : {0, 1, 2}) {
    WorldOptions wo = exchangeWorld(dense, 3);
    wo.wrong_device_rank = 1;
    wo.wrong_step = wrong_step;
    const std::vector<RankLog> logs = runWorld(wo);
    const size_t ib = wrong_step * kTensors.size() + 1;
    for (int r = 0; r < wo.P; ++r) {
      INFO((dense ? "dense" : "agreed") << ", step " << wrong_step << ", rank " << r);
      const Status& st = logs[r].statuses[ib];
      REQUIRE(!st.ok());
      INFO(st.message());
      REQUIRE(st.message().find("rank 1: tensor 'w.b': the input is on another CUDA device than the exchange's") !=
              std::string::npos);
      REQUIRE(st.message().find("rank 0:") == std::string::npos);
      for (float v : logs[r].outputs[ib]) REQUIRE(v == -7.0f);
      REQUIRE(sameBits(logs[r].residuals[ib], logs[r].residuals_before[ib]));
      REQUIRE(logs[r].statuses[ib - 1].ok());  // w.a
    }
  }
}

TEST_CASE("device buckets: with MGS_EXCHANGE=auto, CUDA buckets take the device path at every P",
          "[core][device_bucket]") {
  // Before the cost model exists (the profile steps, here all of them), auto
  // picks the agreed exchange for P >= 3 on the host; a bucket of CUDA
  // tensors that can run on the device must not be staged through host
  // memory for it: it takes the allgather's device path, with the results
  // of the host path's allgather.
  for (int P : {3, 4}) {
    WorldOptions dev, host;
    dev.P = host.P = P;
    dev.size_scale = host.size_scale = 1000;  // buckets large enough for the cost model to pick the agreed exchange
    dev.exchange = "auto";
    host.device = false;  // host tensors, allgather forced
    const std::vector<RankLog> d = runWorld(dev), h = runWorld(host);
    for (int r = 0; r < P; ++r) {
      INFO("P = " << P << ", rank " << r);
      REQUIRE(d[r].device_buckets == dev.steps * kTensors.size());
      REQUIRE(d[r].stats.agreed_buckets == 0);
      requireOnePath(d[r].stats, BucketPath::kDevice, dev.steps * kTensors.size());
      for (size_t i = 0; i < d[r].outputs.size(); ++i) {
        INFO("entry " << i);
        REQUIRE(d[r].statuses[i].ok());
        REQUIRE(sameBits(d[r].outputs[i], h[r].outputs[i]));
        REQUIRE(sameBits(d[r].residuals[i], h[r].residuals[i]));
      }
    }
  }
}

TEST_CASE("device buckets: host tensors under auto keep the host exchange choice", "[core][device_bucket]") {
  WorldOptions host;
  host.P = 4;
  host.size_scale = 1000;
  host.device = false;
  host.exchange = "auto";
  const std::vector<RankLog> h = runWorld(host);
  for (int r = 0; r < host.P; ++r) {
    INFO("rank " << r);
    // Buckets the cost model would send by the agreed exchange at P = 4
    // (the earlier auto's choice): auto takes the allgather.
    REQUIRE(h[r].stats.agreed_buckets == 0);
    requireOnePath(h[r].stats, BucketPath::kHost, host.steps * kTensors.size());
  }
}

TEST_CASE("device buckets: without NCCL, CUDA buckets under auto are selected on the GPU, not staged",
          "[core][device_bucket]") {
  // A resident stage on every rank but no device communicator (MPI): the
  // allgather selects on the GPU and sends only compact data, auto takes it
  // (as for host tensors; these buckets are the ones the cost model would
  // send by the agreed exchange at P = 4), and no bucket is staged through
  // host memory.
  WorldOptions res, host;
  res.P = host.P = 4;
  res.size_scale = host.size_scale = 1000;
  res.resident_only = true;
  res.exchange = host.exchange = "auto";
  host.device = false;  // host tensors, the same choice
  const std::vector<RankLog> d = runWorld(res), h = runWorld(host);
  const uint64_t buckets = res.steps * kTensors.size();
  for (int r = 0; r < res.P; ++r) {
    INFO("rank " << r);
    REQUIRE(d[r].starts == 0);
    REQUIRE(d[r].resident_runs == static_cast<int>(buckets));
    REQUIRE(h[r].stats.agreed_buckets == 0);
    REQUIRE(d[r].stats.agreed_buckets == 0);
    REQUIRE(d[r].agreed_scatters == 0);
    requireOnePath(d[r].stats, BucketPath::kResident, buckets);
    requireSameResults(d[r], h[r]);
  }
}

TEST_CASE("device buckets: without NCCL, agreed buckets of CUDA tensors stay on the GPU, bitwise the host's",
          "[core][device_bucket]") {
  // MGS_EXCHANGE=agreed, CUDA tensors, a resident stage on every rank: the
  // leader selects on "the device", every other rank fuses there and gives
  // up the agreed entries there (extract), the sums are scattered there;
  // outputs and residuals equal the host agreed exchange's bit for bit, and
  // every bucket is counted on the resident path (none staged).
  for (int P : {2, 3, 4}) {
    WorldOptions res, host;
    res.P = host.P = P;
    res.steps = host.steps = 5;  // the leader rotates through every rank
    res.resident_only = true;
    res.exchange = host.exchange = "agreed";
    host.device = false;
    const std::vector<RankLog> d = runWorld(res), h = runWorld(host);
    const uint64_t buckets = res.steps * kTensors.size();
    for (int r = 0; r < P; ++r) {
      INFO("P = " << P << ", rank " << r);
      REQUIRE(d[r].resident_runs == static_cast<int>(buckets));
      REQUIRE(d[r].host_buckets == 0);
      REQUIRE(d[r].agreed_scatters == static_cast<int>(buckets));
      REQUIRE(d[r].stats.agreed_buckets == buckets);
      requireOnePath(d[r].stats, BucketPath::kResident, buckets);
      requireOnePath(h[r].stats, BucketPath::kHost, buckets);
      REQUIRE(d[r].stats.bytes_sent == h[r].stats.bytes_sent);
      requireSameResults(d[r], h[r]);
    }
  }
}

TEST_CASE("device buckets: a non-finite value in a resident agreed bucket fails it on every rank, naming it",
          "[core][device_bucket]") {
  // Rank 1 is not the leader of every step, so both a leader's and a
  // non-leader's non-finite value are met over the steps; under 'error'
  // every rank fails w.a's bucket at that step naming rank 1 and the tensor,
  // nothing is written and no residual commits; w.b is unaffected.
  for (int nan_step : {0, 1, 2}) {
    WorldOptions wo;
    wo.P = 3;
    wo.resident_only = true;
    wo.exchange = "agreed";
    wo.propagate = false;
    wo.nan_rank = 1;
    wo.nan_step = nan_step;
    const std::vector<RankLog> logs = runWorld(wo);
    const size_t i = nan_step * kTensors.size();
    for (int r = 0; r < wo.P; ++r) {
      INFO("NaN at step " << nan_step << ", rank " << r);
      const Status& st = logs[r].statuses[i];
      INFO(st.toString());
      REQUIRE(st.code() == Code::kNumeric);
      REQUIRE(st.message().find("rank 1: non-finite gradient in tensor 'w.a'") != std::string::npos);
      REQUIRE(st.message().find("rank 0:") == std::string::npos);
      for (float v : logs[r].outputs[i]) REQUIRE(v == -7.0f);
      REQUIRE(sameBits(logs[r].residuals[i], logs[r].residuals_before[i]));
      REQUIRE(logs[r].statuses[i + 1].ok());
    }
  }
}

TEST_CASE("device buckets: hierarchical buckets of CUDA tensors run as device buckets, bitwise the host hierarchical's",
          "[core][device_bucket]") {
  // Nodes of thread ranks (MGS_NODE_SIZE): the P slots, the node's sum, the
  // leaders' allgather and the node broadcast on the split device
  // communicator; finished by polling only, every bucket on the device
  // path, outputs, residuals (+0 on non-leaders, the node sum less its
  // selection on leaders), bytes and selections bitwise the host
  // hierarchical exchange's.
  for (auto [P, node] : {std::pair<int, int>{4, 2}, {6, 3}, {6, 2}}) {
    WorldOptions dev, host;
    dev.P = host.P = P;
    dev.node_size = host.node_size = node;
    dev.exchange = host.exchange = "hierarchical";
    host.device = false;
    const std::vector<RankLog> d = runWorld(dev), h = runWorld(host);
    const uint64_t buckets = dev.steps * kTensors.size();
    for (int r = 0; r < P; ++r) {
      INFO("P = " << P << ", nodes of " << node << ", rank " << r);
      REQUIRE(d[r].hier_starts == static_cast<int>(buckets));
      REQUIRE(d[r].device_buckets == buckets);
      REQUIRE(d[r].host_buckets == 0);
      REQUIRE(d[r].waits == 0);
      requireOnePath(d[r].stats, BucketPath::kDevice, buckets);
      requireOnePath(h[r].stats, BucketPath::kHost, buckets);
      REQUIRE(d[r].stats.bytes_sent == h[r].stats.bytes_sent);
      REQUIRE(d[r].stats.selected == h[r].stats.selected);
      requireSameResults(d[r], h[r]);
      if (r % node != 0)
        for (const auto& res : d[r].residuals)
          for (float v : res) REQUIRE(bits(v) == 0);
    }
  }
}

TEST_CASE("device buckets: a non-finite value or a wrong-device tensor in a hierarchical device bucket",
          "[core][device_bucket]") {
  // Two nodes of two: rank 1 (not a leader) or rank 2 (node 1's leader)
  // has the bad input. Every rank names that rank (and the tensor and the
  // cause); nothing is written but NaN under propagate for a non-finite
  // value; no residual moves.
  for (int bad_rank : {1, 2})
    for (int kind = 0; kind < 3; ++kind) {  // NaN under error, NaN under propagate, wrong device
      WorldOptions wo;
      wo.P = 4;
      wo.node_size = 2;
      wo.exchange = "hierarchical";
      wo.propagate = kind == 1;
      if (kind < 2) {
        wo.nan_rank = bad_rank;
        wo.nan_step = 1;
      } else {
        wo.wrong_device_rank = bad_rank;
        wo.wrong_step = 1;
      }
      const std::vector<RankLog> logs = runWorld(wo);
      const size_t i = kTensors.size() + (kind < 2 ? 0 : 1);  // step 1: w.a (NaN) or w.b (wrong device)
      for (int r = 0; r < wo.P; ++r) {
        INFO("bad rank " << bad_rank << ", kind " << kind << ", rank " << r);
        const Status& st = logs[r].statuses[i];
        INFO(st.toString());
        REQUIRE(logs[r].hier_starts == static_cast<int>(wo.steps * kTensors.size()));
        REQUIRE(sameBits(logs[r].residuals[i], logs[r].residuals_before[i]));
        REQUIRE(logs[r].statuses[kind < 2 ? i + 1 : i - 1].ok());  // the other tensor's bucket
        if (kind == 1) {
          REQUIRE(st.ok());
          for (float v : logs[r].outputs[i]) REQUIRE(std::isnan(v));
          continue;
        }
        REQUIRE(!st.ok());
        const std::string want = "rank " + std::to_string(bad_rank) +
                                 (kind == 0 ? ": non-finite gradient in tensor 'w.a'"
                                            : ": tensor 'w.b': the input is on another CUDA device than the exchange's");
        REQUIRE(st.message().find(want) != std::string::npos);
        for (int o = 0; o < wo.P; ++o)
          if (o != bad_rank) REQUIRE(st.message().find("rank " + std::to_string(o) + ":") == std::string::npos);
        for (float v : logs[r].outputs[i]) REQUIRE(v == -7.0f);
      }
    }
}

TEST_CASE("hierarchical exchange over thread ranks: every rank the same outputs, every bucket on the host path",
          "[core][device_bucket]") {
  // The thread communicator splits (node and leader communicators), so the
  // hierarchical exchange runs here: two nodes of two ranks. Every rank must
  // hold bitwise the same outputs each step (the leaders' allgather of node
  // sums, broadcast in each node), and every bucket is counted as a host
  // bucket.
  WorldOptions wo;
  wo.P = 4;
  wo.device = false;
  wo.exchange = "hierarchical";
  wo.node_size = 2;
  const std::vector<RankLog> h = runWorld(wo);
  const uint64_t buckets = wo.steps * kTensors.size();
  for (int r = 0; r < wo.P; ++r) {
    INFO("rank " << r);
    requireOnePath(h[r].stats, BucketPath::kHost, buckets);
    REQUIRE(h[r].stats.agreed_buckets == 0);
    for (size_t i = 0; i < h[r].outputs.size(); ++i) {
      INFO("entry " << i << ": " << h[r].statuses[i].toString());
      REQUIRE(h[r].statuses[i].ok());
      REQUIRE(sameBits(h[r].outputs[i], h[0].outputs[i]));
    }
  }
  // Something was delivered: the outputs are not all zero.
  bool nonzero = false;
  for (float v : h[0].outputs.back()) nonzero |= v != 0.0f;
  REQUIRE(nonzero);
}
